// The sizes of the two models (models/vision_encoder.h, models/llm.h) as plain C++ values. A job
// spec resolves into them (jobspec::JobConfig holds one of each); tests and benchmarks fill them
// directly. Every size here is concrete: presets (jobspec/presets.h) are already expanded.
//
// Plain C++: neither LibTorch nor protobuf, so the job spec's torch-free code can hold them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/any_res.h"

namespace tandem::models {

// The largest sizes a model may have, whether a spec or a Hugging Face config gives them: several
// times today's largest models (Llama 3 405B: width 16384, 126 layers, 128 heads; InternViT-6B:
// 3200 wide, 45 layers), and small enough that no product of them overflows 64 bits, so that a
// spec asking for 2^62 layers is refused at submit rather than grown until the kernel kills it.
inline constexpr int64_t kMaxWidth = 65536;       // hidden, head_dim
inline constexpr int64_t kMaxMlpWidth = 1 << 20;  // mlp_hidden
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxHeads = 1024;        // heads, kv_heads
inline constexpr int64_t kMaxImageSize = 8192;    // pixels a side
inline constexpr int64_t kMaxSequence = 1 << 20;  // max_seq_len
inline constexpr int64_t kMaxVocabulary = 1 << 24;

// ViT encoder plus LLaVA's projector to the LLM width. Output: [batch, num_features(), output_dim].
struct VisionConfig {
  std::string preset;                 // the preset these values started from ("" if none)
  int64_t image_size = 32;            // square input, pixels
  int64_t channels = 3;               // RGB
  int64_t patch_size = 8;             // image_size must be a multiple
  int64_t hidden = 64;                // ViT width
  int64_t layers = 2;                 // pre-norm transformer blocks
  int64_t heads = 4;                  // hidden must be a multiple
  int64_t mlp_hidden = 256;           // GELU MLP width
  std::string positions = "learned";  // "learned" or "sincos" (fixed 2D sine-cosine)
  double norm_eps = 1e-6;             // LayerNorm epsilon
  int64_t output_dim = 64;            // projector output: the LLM's hidden size

  // The rest describes the pretrained towers of Hugging Face checkpoints (hf/, NOTE [Vision towers]
  // in models/vision_encoder.h). The defaults are Tandem's own ViT.
  // forward normalises [0, 1] pixels: (x - mean) / std per channel; empty: 0.5 for every channel.
  std::vector<double> image_mean;
  std::vector<double> image_std;
  bool class_token = false;         // CLIP: a learned class embedding ahead of the patches
  bool patch_bias = true;           // CLIP's patch embedding has no bias
  bool pre_norm = false;            // CLIP's LayerNorm on the embeddings, before the first block
  std::string activation = "gelu";  // MLP: "gelu" (erf), "quick_gelu" (CLIP), "gelu_tanh" (SigLIP)
  int64_t feature_layer = -1;  // the residual stream that feeds the projector: 0 is the embeddings,
                               // i the output of block i, negative counts from the end (-1: last)
  bool drop_first_feature = false;  // LLaVA's "default" feature strategy: drop position 0 (CLS)
  bool final_norm = false;          // a LayerNorm on the features before the projector
  bool post_norm = false;  // a pretrained tower's final LayerNorm, which LLaVA does not use: kept
                           // frozen so that an export carries it
  bool pooling_head = false;  // SigLIP's attention-pooling head: likewise kept, frozen, unused
  std::string projector =
      "mlp2x";  // LLaVA's: linear_1 -> projector_activation -> linear_2; or "linear"
  std::string projector_activation = "gelu";
  // LLaVA-NeXT's image_grid_pinpoints (data/any_res.h), each a multiple of image_size both ways:
  // an image is read as a base tile and a grid of tiles. Empty: an image is one tile. Needs
  // num_features() == grid()^2 (the features form the tile's grid of patches).
  std::vector<data::Resolution> grid_pinpoints;

  int64_t grid() const { return image_size / patch_size; }
  int64_t num_patches() const { return grid() * grid(); }
  // Positions in the residual stream: the patches and the class token.
  int64_t num_positions() const { return num_patches() + (class_token ? 1 : 0); }
  // The index of feature_layer counted from the start, in [0, layers].
  int64_t feature_index() const {
    return feature_layer < 0 ? layers + 1 + feature_layer : feature_layer;
  }
  // Embeddings per image handed to the LLM.
  int64_t num_features() const { return num_positions() - (drop_first_feature ? 1 : 0); }
  bool any_res() const { return !grid_pinpoints.empty(); }

  bool operator==(const VisionConfig&) const = default;
};

// transformers' rope_parameters beyond rope_theta. "default": none. "linear": every frequency
// divided by factor. "llama3" (Llama 3.1): wavelengths longer than original_max / low_freq_factor
// divided by factor, shorter than original_max / high_freq_factor kept, the band between
// interpolated.
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_positions = 0;

  bool operator==(const RopeScaling&) const = default;
};

// Llama-style decoder: RMSNorm, rotary positions, SwiGLU, causal attention.
struct LlmConfig {
  std::string preset;
  int64_t hidden = 64;
  int64_t layers = 2;
  int64_t heads = 4;         // hidden must be a multiple; head_dim = hidden / heads must be even
  int64_t kv_heads = 4;      // grouped-query attention; heads must be a multiple
  int64_t mlp_hidden = 172;  // SwiGLU inner width
  int64_t max_seq_len = 64;  // image patches + text tokens; bounds the rotary table
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;      // RMSNorm epsilon
  bool tie_embeddings = true;  // output head shares the token embedding
  int64_t vocab_size = 0;      // 0 in a spec: taken from the tokenizer when the job starts

  // The rest describes the pretrained LLMs of Hugging Face checkpoints (hf/); the defaults are
  // Tandem's own decoder.
  int64_t head_dim = 0;         // 0: hidden / heads
  bool attention_bias = false;  // q, k and v projections with biases (Qwen2)
  RopeScaling rope_scaling;     // rotary scaling, as transformers' rope_parameters
  // >= 0: LLaVA's layout. The image embeddings replace the tokens with this id wherever the text
  // has them, and logits cover every position. -1: the embeddings are a prefix before the text.
  int64_t image_token_id = -1;
  // LLaVA-NeXT's any-resolution images (data/any_res.h): a learned embedding, "image_newline"
  // [hidden], ends each row of an image's grid of features (models/any_res.h).
  bool image_newline = false;

  int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : hidden / heads; }

  bool operator==(const LlmConfig&) const = default;
};

}  // namespace tandem::models
