// The sizes of the two models (models/vision_encoder.h, models/llm.h) as plain C++ values. A job
// spec resolves into them (jobspec::JobConfig holds one of each); tests and benchmarks fill them
// directly. Every size here is concrete: presets (jobspec/presets.h) are already expanded.
//
// Plain C++: neither LibTorch nor protobuf, so the job spec's torch-free code can hold them.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::models {

// ViT encoder plus a linear projector to the LLM width. Output: [batch, num_patches(), output_dim].
struct VisionConfig {
  std::string preset;            // the preset these values started from ("" if none)
  int64_t image_size = 32;       // square input, pixels
  int64_t channels = 3;          // RGB
  int64_t patch_size = 8;        // image_size must be a multiple
  int64_t hidden = 64;           // ViT width
  int64_t layers = 2;            // pre-norm transformer blocks
  int64_t heads = 4;             // hidden must be a multiple
  int64_t mlp_hidden = 256;      // GELU MLP width
  std::string positions = "learned";  // "learned" or "sincos" (fixed 2D sine-cosine)
  double norm_eps = 1e-6;        // LayerNorm epsilon
  int64_t output_dim = 64;       // projector output: the LLM's hidden size

  int64_t grid() const { return image_size / patch_size; }
  int64_t num_patches() const { return grid() * grid(); }
};

// Llama-style decoder: RMSNorm, rotary positions, SwiGLU, causal attention.
struct LlmConfig {
  std::string preset;
  int64_t hidden = 64;
  int64_t layers = 2;
  int64_t heads = 4;             // hidden must be a multiple; head_dim = hidden / heads must be even
  int64_t kv_heads = 4;          // grouped-query attention; heads must be a multiple
  int64_t mlp_hidden = 172;      // SwiGLU inner width
  int64_t max_seq_len = 64;      // image patches + text tokens; bounds the rotary table
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;        // RMSNorm epsilon
  bool tie_embeddings = true;    // output head shares the token embedding
  int64_t vocab_size = 0;        // 0 in a spec: taken from the tokenizer when the job starts
};

}  // namespace tandem::models
