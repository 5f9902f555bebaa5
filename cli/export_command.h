// `tandem export RUN_DIR --format hf OUT_DIR [--max-shard-size 5GB]`: a finished run of Tandem's
// own models, or one of its checkpoints, written as a Hugging Face LLaVA directory (hf/export.h
// says what it holds) that transformers loads with LlavaForConditionalGeneration.from_pretrained
// and `tandem generate` reads. OUT_DIR must not exist; it appears whole or not at all. Exit code 0
// when written, 1 with the error on stderr, 2 for bad flags.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::cli {

void AddExportCommand(CLI::App& app, int* exit_code);

}  // namespace tandem::cli
