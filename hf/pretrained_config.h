// The config.json of a Hugging Face model directory, read into the sizes of Tandem's models.
//
// Three kinds of directory are read:
//   - a whole LLaVA checkpoint (model_type "llava": LlavaForConditionalGeneration), whose
//     vision_config and text_config give both models and whose projector is linear_1 -> act ->
//     linear_2; or a LLaVA-NeXT one ("llava_next": LlavaNextForConditionalGeneration), the same
//     with any-resolution tiles (image_grid_pinpoints into VisionConfig::grid_pinpoints) and the
//     LLM's image_newline (kind kLlava too);
//   - a vision tower: "clip_vision_model" or "siglip_vision_model", or a whole "clip" / "siglip"
//     model whose vision_config is read (its text model is not used);
//   - an LLM: "llama" or "qwen2" (LlamaForCausalLM, Qwen2ForCausalLM).
// Keys a config leaves out take transformers' defaults for that model_type, as from_pretrained
// does (older configs write only what differs). Settings Tandem does not implement are refused with
// an error naming the key: a list of vision_feature_layer, a sliding window, mlp or o_proj biases,
// an activation other than SiLU in the LLM, dynamic or YaRN rotary scaling.
//
// The vision config keeps the pretrained tower's layout (NOTE [Vision towers] in
// models/vision_encoder.h): no final norm before the projector, its post-layernorm (and SigLIP's
// pooling head) carried frozen. output_dim and the projector are set for LLaVA; a tower read alone
// gets the LLaVA-1.5 projector ("mlp2x", GELU) with output_dim 0 for the caller to fill in, and
// LLaVA's features: a CLIP tower's second-to-last layer without the class token (LLaVA-1.5), a
// SigLIP tower's last layer, every position (LLaVA-OneVision).
//
// Errors: NotFound for a missing config.json, InvalidArgument naming the file and key otherwise.
// Torch-free; stateless and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/model_config.h"

namespace tandem::hf {

enum class PretrainedKind { kLlava, kVisionTower, kLlm };

struct PretrainedConfig {
  std::string directory;
  PretrainedKind kind = PretrainedKind::kLlm;
  std::string
      model_type;  // config.json's, e.g. "llava", "llava_next", "clip_vision_model", "qwen2"
  std::string vision_model_type;  // "clip_vision_model" or "siglip_vision_model" (LLaVA, towers)
  std::string llm_model_type;     // "llama" or "qwen2" (LLaVA, LLMs)
  std::optional<models::VisionConfig> vision;  // LLaVA and towers
  std::optional<models::LlmConfig> llm;        // LLaVA and LLMs
  // The dtype config.json names ("dtype" or "torch_dtype"): "float32", "bfloat16", "float16", or
  // empty when it names none. Every tensor of the checkpoint must have it.
  std::string dtype;
  // Token ids from config.json (the LLM's; -1 or empty when it has none). eos_token_id may be a
  // list.
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = -1;
};

// Reads <directory>/config.json.
absl::StatusOr<PretrainedConfig> ReadPretrainedConfig(const std::string& directory);

}  // namespace tandem::hf
