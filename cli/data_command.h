// `tandem data pack IN OUT_DIR [--shard-size 512MB] [--prefix train] [--video-frames 8]
// [--output text|json]`: a conversation file (LLaVA or ShareGPT) or a caption JSON Lines file
// written as WebDataset tar shards and OUT_DIR/index.json (data/shard_pack.h), for data.shards.
//
// Prints the shards written and the pattern to give data.shards.train, or with --output json the
// index. Exit code 0 when it packed, 1 with the error on stderr (an input error naming the file and
// its entry, an OUT_DIR that already holds shards), 2 for bad flags (cli/main.cc).
//
// `tandem data inspect SHARDS [--first 3] [--limit N] [--tokenizer DIR] [--chat-template NAME]
// [--output text|json]`: what shards hold, read as training reads them (data/shard_inspect.h):
// samples, images a sample, image sizes, text token lengths with a histogram, the first samples.
// Exit code 0, or 1 with the error (naming the shard, the key and the byte offset) on stderr.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::cli {

void AddDataCommand(CLI::App& app, int* exit_code);

}  // namespace tandem::cli
