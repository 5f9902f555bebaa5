// `tandem data pack IN OUT_DIR [--shard-size 512MB] [--prefix train] [--video-frames 8]
// [--output text|json]`: a conversation file (LLaVA or ShareGPT) or a caption JSON Lines file
// written as WebDataset tar shards and OUT_DIR/index.json (data/shard_pack.h), for data.shards.
//
// Prints the shards written and the pattern to give data.shards.train, or with --output json the
// index. Exit code 0 when it packed, 1 with the error on stderr (an input error naming the file and
// its entry, an OUT_DIR that already holds shards), 2 for bad flags (cli/main.cc).
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::cli {

void AddDataCommand(CLI::App& app, int* exit_code);

}  // namespace tandem::cli
