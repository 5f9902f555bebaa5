// `tandem tokenize --model DIR [--chat] [--chat-template NAME] [--output text|json] TEXT`: what a
// model's tokenizer makes of TEXT, so a user sees what the model sees. With --chat, TEXT is one
// user turn of the model's chat template (run by tokenizer/chat_template.h) with a generation
// prompt, tokenized without adding special tokens again, as apply_chat_template does; without it,
// TEXT is tokenized with the tokenizer's special tokens (a BOS where it adds one). "<image>" stays
// one token here (`tandem generate --output json` shows the prompt with it expanded).
//
// Prints the text that was tokenized, the ids and each id decoded alone, or with --output json one
// object {"text", "ids", "tokens"}. Exit code 0 when it tokenized, 1 with the error on stderr (no
// tokenizer.json in DIR, a template that fails or raises), 2 for bad flags (cli/main.cc).
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::cli {

void AddTokenizeCommand(CLI::App& app, int* exit_code);

}  // namespace tandem::cli
