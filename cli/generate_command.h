// `tandem generate --model DIR [--image IMG ...] --prompt TEXT [--max-new-tokens N] [--chat]
// [--chat-template NAME] [--output text|json] [--threads N]`: greedy decoding with a KV cache
// from a Hugging Face LLaVA directory (hf/generate.h says what it does to the prompt and the
// images: one --image a "<image>" mark, in order). Prints the generated text, or with --output json
// one object
// {"text", "token_ids", "prompt_tokens", "prompt_token_ids", "prompt_text"}: the prompt's ids as
// the model reads them (each image token once per image feature) and the text that was tokenized.
// Exit code 0 when it generated, 1 with the error on stderr (a missing file, an undecodable image,
// an unsupported model, marks that do not pair with the images), 2 for bad flags (cli/main.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace tandem::cli {

void AddGenerateCommand(CLI::App& app, int* exit_code);
// --chat-template NAME (chatml, llama3, tandem), as generate and tokenize take it.
void AddChatTemplateOption(CLI::App& command, std::string& chat_template);

}  // namespace tandem::cli
