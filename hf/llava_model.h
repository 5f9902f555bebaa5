// A whole Hugging Face LLaVA directory as Tandem's models, ready for inference: config.json,
// the safetensors weights, tokenizer.json (with tokenizer_config.json) and
// preprocessor_config.json.
//
//   ASSIGN_OR_RETURN(hf::LlavaModel model, hf::LoadLlava(dir));
//   at::Tensor features = model.vision->forward(images01);   // normalised as the preprocessor says
//
// The vision model's image_mean and image_std come from preprocessor_config.json, whose output
// size must equal the tower's image_size; the tokenizer must hold the image token at config.json's
// image_token_index. Errors name the file: those of ReadPretrainedConfig, CheckpointFiles,
// LoadVisionWeights / LoadLlmWeights, HfTokenizer::Load and ReadImagePreprocessor, and
// InvalidArgument for a directory that is not a LLaVA model or files that disagree.
// Not thread-safe: one forward at a time.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/image_preprocessor.h"
#include "hf/pretrained_config.h"
#include "models/llm.h"
#include "models/vision_encoder.h"
#include "tokenizer/hf_tokenizer.h"

namespace tandem::hf {

struct LlavaModel {
  PretrainedConfig config;
  models::VisionEncoder vision{nullptr};
  models::Llm llm{nullptr};
  tokenizer::HfTokenizer tokenizer;
  data::ImagePreprocessor preprocessor;
  // Generation stops at any of these: config.json's eos_token_id(s), generation_config.json's and
  // the tokenizer's eos token.
  std::vector<int64_t> stop_ids;
};

absl::StatusOr<LlavaModel> LoadLlava(const std::string& directory);

}  // namespace tandem::hf
