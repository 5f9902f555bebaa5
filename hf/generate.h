// `tandem generate`: greedy decoding from a Hugging Face LLaVA directory, with a KV cache. A Tandem
// run directory is exported first (hf/export.h) to a temporary directory, so it generates exactly
// what its export does.
//
// The prompt is raw text in which each "<image>" marks where an image goes, in order. It is
// tokenized with the
// model's tokenizer, with the special tokens its post-processor adds (a BOS); with `chat` the
// chat template (tokenizer/chat_template.h: the model's own, run by the Jinja interpreter, or a
// built-in one named "chatml", "llama3" or "tandem") first makes it one user turn with a generation
// prompt, and the result is tokenized as transformers' apply_chat_template does, without adding
// special tokens again. Each image token becomes one token per image feature, and its image,
// decoded, resized and cropped as preprocessor_config.json says, feeds them. Decoding is greedy and
// stops at an end-of-sequence token (kept in token_ids, dropped from the text) or after
// max_new_tokens.
//
// Errors name what is wrong: the model's files (hf/llava_model.h), an image that cannot be read
// or decoded, a prompt whose "<image>" marks are not one an image, a tokenizer without the image
// token, an unknown chat template.
// This header is torch-free (the CLI includes it). Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::hf {

struct GenerateRequest {
  std::string model_dir;            // a Hugging Face LLaVA directory or a Tandem run directory
  std::vector<std::string> images;  // in the order of the prompt's marks; none for text only
  std::string prompt;
  int64_t max_new_tokens = 64;
  bool chat = false;
  std::string chat_template;  // "chatml", "llama3" or "tandem"; "" runs the model's own
  int threads = 0;            // intra-op threads; 0 leaves LibTorch's default
};

struct GenerateResult {
  std::string text;                // the new tokens decoded, special tokens skipped
  std::vector<int64_t> token_ids;  // the new tokens
  int64_t prompt_tokens = 0;       // the prompt's length with the image tokens expanded
  // The prompt as the model reads it: its ids, each image token repeated once per image feature.
  std::vector<int64_t> prompt_token_ids;
  std::string prompt_text;  // the text that was tokenized: the prompt, or its chat-template render
};

absl::StatusOr<GenerateResult> Generate(const GenerateRequest& request);

}  // namespace tandem::hf
