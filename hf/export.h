// `tandem export RUN_DIR --format hf OUT_DIR`: a run written as a Hugging Face LLaVA directory that
// transformers loads with LlavaForConditionalGeneration.from_pretrained.
//
// The run's job.json gives the models and its tokenizer.json the vocabulary; the weights are the
// run's final ones (vision.safetensors, llm.safetensors), or, given one of its checkpoints
// (RUN_DIR/checkpoints/step-N), that checkpoint's: its ZeRO shards of any world size are read by
// an engine of one rank with the group's engine config and freeze list, and gathered. What is
// written:
//   config.json            "llava": a "siglip_vision_model" tower (no class token, no pooling
//                          head; its post-layernorm, which LLaVA does not run, as the identity),
//                          vision_feature_layer -1 with the "full" strategy, the mlp2x projector,
//                          and a "llama" LLM; image_token_index is one new token after the
//                          vocabulary
//   model*.safetensors     fp32, sharded at max_shard_bytes with model.safetensors.index.json,
//                          under transformers 5's names (NOTE [Hugging Face names])
//   tokenizer.json,        the word-level tokenizer as a WordLevel model (lowercase, split on
//   tokenizer_config.json  whitespace and ASCII punctuation) plus the "<image>" token; its template
//                          appends <bos>, because Tandem's captioner reads the image, then <bos>,
//                          then the caption: the prompt "<image>" gives the model what it was
//                          trained on
//   preprocessor_config.json  SiglipImageProcessor at the model's image size, mean and std 0.5
//   generation_config.json    bos, eos and pad ids
// The new image token's rows of the embedding (and untied head) are zero: the embedding row is
// replaced by image features wherever the token is, and its logit is always 0. The tokenizer's
// chat_template is the "tandem" format (tokenizer/chat_template.h), the same sequence in chat form.
//
// A run whose LLM started from a pretrained one (llm.pretrained) exports that LLM's model_type
// ("llama", or "qwen2" for one with q/k/v biases), vocabulary, image token, rotary scaling and
// special token ids, and copies its tokenizer files (tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, chat_template.jinja) and generation_config.json, adding the "<image>"
// token the job added (hf/pretrained_job.h) to the first two. A job that named llm.chat_template
// for a tokenizer without a template exports none: name it again to `tandem generate --chat`.
//
// The directory appears whole or not at all: it is written under a temporary name beside OUT_DIR
// and renamed, and an OUT_DIR that exists is refused. Errors name what is wrong: a run directory
// without job.json, tokenizer.json or the final weights (a run that has not finished), a model
// in a layout LLaVA cannot express (final_norm, a linear projector), a weight missing from the run.
// This header is torch-free (the CLI includes it).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace tandem::hf {

struct ExportOptions {
  std::string run_dir;  // a run directory or one of its checkpoints
  std::string out_dir;
  int64_t max_shard_bytes = int64_t{5} * 1000 * 1000 * 1000;  // transformers' default "5GB"
};

absl::Status ExportRunAsLlava(const ExportOptions& options);

// Whether `directory` is a Tandem run directory (it holds job.json) or a complete checkpoint of
// one, as `tandem generate` asks.
bool IsRunDirectory(const std::string& directory);

}  // namespace tandem::hf
