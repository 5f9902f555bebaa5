// JobConfig: a training job as plain C++ values, resolved from a `tandem.v1.JobSpec` (jobspec/job_spec.h).
//
// This header is the seam between the proto side (CLI, coordinator) and the LibTorch side (models,
// trainer, actors): it includes neither protobuf nor LibTorch, so both sides can include it. Every
// model size here is concrete: presets are already expanded and explicit fields applied over them.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::jobspec {

// ViT encoder plus a linear projector to the LLM width. Output: [batch, num_patches(), output_dim].
struct VisionModelConfig {
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
struct LlmModelConfig {
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

struct VisionGroupConfig {
  std::string pool = "vision";   // actor pool the group is scheduled on
  int32_t actors = 1;            // data-parallel ranks
  VisionModelConfig model;
  std::string engine_json = "{}";  // the group's DeepSpeed-style engine config, as a JSON object
};

struct LlmGroupConfig {
  std::string pool = "llm";
  int32_t actors = 1;
  LlmModelConfig model;
  std::string engine_json = "{}";
};

// Procedural coloured shapes with captions ("a small red circle at the top left"); data/shapes.h.
struct ShapesDataConfig {
  uint64_t seed = 0;             // same seed, same images and captions
  int64_t train_samples = 4096;
  int64_t eval_samples = 256;    // held out: disjoint from the training samples
};

// One {"image": "path", "text": "caption"} object per line; image paths relative to the jsonl file.
struct JsonlDataConfig {
  std::string train_path;        // absolute, or relative to the job spec file
  std::string eval_path;         // optional ("" = no held-out set unless eval_fraction > 0)
};

struct DataConfig {
  enum class Kind { kShapes, kJsonl };
  Kind kind = Kind::kShapes;
  ShapesDataConfig shapes;
  JsonlDataConfig jsonl;
  int64_t max_text_tokens = 16;  // caption tokens incl. <bos>/<eos>; longer captions are an error
};

struct ScheduleConfig {
  int64_t global_batch = 32;     // samples per optimizer step, over all ranks and micro-batches
  int64_t micro_batches = 1;     // gradient accumulation steps per optimizer step
  int64_t steps = 100;           // optimizer steps
  int64_t eval_every = 0;        // steps between evaluations; 0 = only at the end
  int64_t eval_samples = 0;      // held-out samples per evaluation; 0 = all
  int64_t checkpoint_every = 0;  // steps between checkpoints; 0 = only at the end
  uint64_t seed = 0;             // model initialisation and data order
  double gradient_clipping = 0;  // max L2 norm of both groups' gradient together; 0 = off
};

struct JobConfig {
  std::string name;
  DataConfig data;
  VisionGroupConfig vision;
  LlmGroupConfig llm;
  ScheduleConfig schedule;
  int64_t max_restarts = 3;      // failure.max_restarts
  std::string resume_from;       // a checkpoint directory; "" = from scratch
  std::string spec_dir;          // directory of the spec file, for relative data paths ("" = cwd)
};

}  // namespace tandem::jobspec
