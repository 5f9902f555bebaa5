// Shared by the jobspec tests: a small valid spec to modify, and helpers that parse it and compare
// configs.
#pragma once

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "jobspec/job_spec.h"
#include "nlohmann/json.hpp"

namespace tandem::jobspec {

using json = nlohmann::json;

inline const std::string kExamples = std::string(TANDEM_SOURCE_DIR) + "/examples";

// A small valid spec, to be modified by each test.
inline json BaseSpec() {
  return json::parse(R"({
    "name": "t",
    "data": {"shapes": {"seed": 3, "train_samples": 100, "eval_samples": 10},
             "max_text_tokens": 12},
    "vision": {"actors": 2, "model": {"preset": "vit-tiny"}},
    "llm": {"actors": 1, "model": {"preset": "llm-tiny"}},
    "schedule": {"global_batch": 8, "micro_batches": 2, "steps": 10}
  })");
}

// The config of the spec file at `path` (ReadJobSpecFile).
inline absl::StatusOr<JobConfig> ReadConfig(const std::string& path) {
  absl::StatusOr<ResolvedJobSpec> resolved = ReadJobSpecFile(path);
  if (!resolved.ok()) return resolved.status();
  return resolved->config;
}

// `relative` as ReadJobSpecFile makes it absolute against the examples' directory.
inline std::string InExamples(const std::string& relative) {
  return (std::filesystem::absolute(kExamples) / relative).lexically_normal().string();
}

inline JobConfig ExpectValid(const std::string& text) {
  absl::StatusOr<JobConfig> config = ParseJobSpecJson(text, "job.json");
  EXPECT_TRUE(config.ok()) << config.status() << "\n" << text;
  return config.ok() ? *config : JobConfig{};
}

// The error message of parsing `text`, which must fail with InvalidArgument.
inline std::string Error(const std::string& text) {
  absl::StatusOr<JobConfig> config = ParseJobSpecJson(text, "job.json");
  EXPECT_FALSE(config.ok()) << text;
  if (config.ok()) return "";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  return std::string(config.status().message());
}
inline std::string Error(const json& spec) { return Error(spec.dump()); }
inline std::string Error(const char* text) { return Error(std::string(text)); }

// Field-by-field equality, for messages that name the field; then operator== for the rest.
inline void ExpectSameConfig(const JobConfig& a, const JobConfig& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.data.kind, b.data.kind);
  EXPECT_EQ(a.data.shapes.seed, b.data.shapes.seed);
  EXPECT_EQ(a.data.shapes.train_samples, b.data.shapes.train_samples);
  EXPECT_EQ(a.data.shapes.eval_samples, b.data.shapes.eval_samples);
  EXPECT_EQ(a.data.jsonl.train_path, b.data.jsonl.train_path);
  EXPECT_EQ(a.data.jsonl.eval_path, b.data.jsonl.eval_path);
  EXPECT_EQ(a.data.max_text_tokens, b.data.max_text_tokens);
  EXPECT_EQ(a.vision.pool, b.vision.pool);
  EXPECT_EQ(a.vision.actors, b.vision.actors);
  EXPECT_EQ(a.vision.engine_json, b.vision.engine_json);
  EXPECT_EQ(a.vision.freeze, b.vision.freeze);
  EXPECT_EQ(a.vision.sequence_parallel, b.vision.sequence_parallel);
  EXPECT_EQ(a.vision.model.preset, b.vision.model.preset);
  EXPECT_EQ(a.vision.model.image_size, b.vision.model.image_size);
  EXPECT_EQ(a.vision.model.channels, b.vision.model.channels);
  EXPECT_EQ(a.vision.model.patch_size, b.vision.model.patch_size);
  EXPECT_EQ(a.vision.model.hidden, b.vision.model.hidden);
  EXPECT_EQ(a.vision.model.layers, b.vision.model.layers);
  EXPECT_EQ(a.vision.model.heads, b.vision.model.heads);
  EXPECT_EQ(a.vision.model.mlp_hidden, b.vision.model.mlp_hidden);
  EXPECT_EQ(a.vision.model.positions, b.vision.model.positions);
  EXPECT_EQ(a.vision.model.norm_eps, b.vision.model.norm_eps);
  EXPECT_EQ(a.vision.model.output_dim, b.vision.model.output_dim);
  EXPECT_TRUE(a.vision.model.grid_pinpoints == b.vision.model.grid_pinpoints);
  EXPECT_EQ(a.llm.model.image_newline, b.llm.model.image_newline);
  EXPECT_EQ(a.llm.pool, b.llm.pool);
  EXPECT_EQ(a.llm.actors, b.llm.actors);
  EXPECT_EQ(a.llm.engine_json, b.llm.engine_json);
  EXPECT_EQ(a.llm.freeze, b.llm.freeze);
  EXPECT_EQ(a.llm.tensor_parallel, b.llm.tensor_parallel);
  EXPECT_EQ(a.llm.embeddings, b.llm.embeddings);
  EXPECT_EQ(a.llm.model.preset, b.llm.model.preset);
  EXPECT_EQ(a.llm.model.hidden, b.llm.model.hidden);
  EXPECT_EQ(a.llm.model.layers, b.llm.model.layers);
  EXPECT_EQ(a.llm.model.heads, b.llm.model.heads);
  EXPECT_EQ(a.llm.model.kv_heads, b.llm.model.kv_heads);
  EXPECT_EQ(a.llm.model.mlp_hidden, b.llm.model.mlp_hidden);
  EXPECT_EQ(a.llm.model.max_seq_len, b.llm.model.max_seq_len);
  EXPECT_EQ(a.llm.model.rope_theta, b.llm.model.rope_theta);
  EXPECT_EQ(a.llm.model.norm_eps, b.llm.model.norm_eps);
  EXPECT_EQ(a.llm.model.tie_embeddings, b.llm.model.tie_embeddings);
  EXPECT_EQ(a.llm.model.vocab_size, b.llm.model.vocab_size);
  EXPECT_EQ(a.schedule.global_batch, b.schedule.global_batch);
  EXPECT_EQ(a.schedule.micro_batches, b.schedule.micro_batches);
  EXPECT_EQ(a.schedule.steps, b.schedule.steps);
  EXPECT_EQ(a.schedule.eval_every, b.schedule.eval_every);
  EXPECT_EQ(a.schedule.eval_samples, b.schedule.eval_samples);
  EXPECT_EQ(a.schedule.checkpoint_every, b.schedule.checkpoint_every);
  EXPECT_EQ(a.schedule.seed, b.schedule.seed);
  EXPECT_EQ(a.schedule.gradient_clipping, b.schedule.gradient_clipping);
  EXPECT_EQ(a.max_restarts, b.max_restarts);
  EXPECT_EQ(a.resume_from, b.resume_from);
  EXPECT_TRUE(a == b) << "a field not listed above differs";
}

}  // namespace tandem::jobspec
