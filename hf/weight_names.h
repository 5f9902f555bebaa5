// NOTE [Hugging Face names]
// Tandem's models keep their own parameter names (models/README.md); a Hugging Face checkpoint's
// tensors are found through this table, both ways. Each name belongs to a part of the model:
//
//   part       transformers' local name                        Tandem's name
//   vision     embeddings.patch_embedding.{weight,bias}        patch_embed.{weight,bias}
//              embeddings.class_embedding [h]                  class_token [1, 1, h]
//              embeddings.position_embedding.weight [N, h]     positions [1, N, h]
//              pre_layrnorm.*, post_layernorm.*                pre_norm.*, post_norm.*
//              encoder.layers.i.layer_norm{1,2}.*              blocks.i.norm{1,2}.*
//              encoder.layers.i.self_attn.{q,k,v}_proj.*       blocks.i.attn.qkv.* (q, k, v
//                                                              stacked on rows)
//              encoder.layers.i.self_attn.out_proj.*           blocks.i.attn.proj.*
//              encoder.layers.i.mlp.fc{1,2}.*                  blocks.i.mlp.fc{1,2}.*
//              head.* (SigLIP)                                 head.*
//   projector  linear_{1,2}.*                                  projector.linear_{1,2}.*
//   llm        embed_tokens.weight                             embed.weight
//              layers.i.input_layernorm.weight                 blocks.i.attn_norm.weight
//              layers.i.self_attn.{q,k,v,o}_proj.*             blocks.i.attn.{q,k,v,o}.*
//              layers.i.post_attention_layernorm.weight        blocks.i.mlp_norm.weight
//              layers.i.mlp.{gate,up,down}_proj.weight         blocks.i.mlp.{gate,up,down}.weight
//              norm.weight                                     norm.weight
//   lm_head    weight                                          head.weight
//   newline    image_newline (LLaVA-NeXT)                      image_newline (the LLM's)
//
// A checkpoint's full names put a prefix before the local name. Reading accepts the layouts
// transformers has written: for LLaVA "vision_tower.[vision_model.]", "multi_modal_projector.",
// "language_model.model.", "language_model.lm_head.", "image_newline" (and the same under "model."
// with "model.language_model." and a bare "lm_head."); for a tower "[vision_model.]" (a whole CLIP
// or SigLIP model's text side is skipped); for an LLM "model." and "lm_head.". Writing uses the
// layout transformers 5 writes for LlavaForConditionalGeneration: "vision_tower.",
// "multi_modal_projector.", "language_model.model.", "language_model.lm_head." (and
// "image_newline" for LlavaNextForConditionalGeneration).
// Torch-free; stateless and thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hf/pretrained_config.h"

namespace tandem::hf {

enum class Part { kVision, kProjector, kLlm, kLmHead, kNewline };

struct LocalName {
  Part part;
  std::string name;  // transformers' name inside the part
};

// The part and local name of a tensor of a checkpoint of `kind`; nullopt for a tensor Tandem
// skips (a CLIP or SigLIP text model); an error naming the tensor when it belongs to no part.
absl::StatusOr<std::optional<LocalName>> ClassifyCheckpointName(PretrainedKind kind,
                                                                const std::string& name);

// transformers' local names of Tandem's vision parameter `ours` (three for a stacked qkv), with
// its part (kVision or kProjector); NotFound when it has none (Tandem's own final norm, linear
// projector or sine-cosine buffer).
absl::StatusOr<std::vector<LocalName>> TheirVisionNames(const std::string& ours);
// The same for the LLM (kLlm, kLmHead, or kNewline for LLaVA-NeXT's image_newline).
absl::StatusOr<std::vector<LocalName>> TheirLlmNames(const std::string& ours);

// The full name a checkpoint of `kind` would use for `local`, as transformers 5 writes it.
std::string FullName(PretrainedKind kind, const LocalName& local);

}  // namespace tandem::hf
