// Tests for jobspec/job_config_json.cc: JobConfigToJson writes every field and reads back into the
// same JobConfig.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jobspec/job_spec.h"
#include "tests/jobspec/spec_testing.h"

namespace tandem::jobspec {
namespace {

using ::testing::StartsWith;

TEST(JobConfigToJson, RoundTripsToAnEqualConfig) {
  json spec = BaseSpec();
  spec["data"]["shapes"]["seed"] = 18446744073709551615ull;
  spec["vision"]["pool"] = "gpu-a";
  spec["vision"]["model"] = {{"preset", "vit-tiny"}, {"norm_eps", 1e-5}, {"positions", "sincos"}};
  spec["vision"]["engine"] =
      json::parse(R"({"bf16": {"enabled": true}, "optimizer": {"type": "AdamW",
      "params": {"lr": 3e-4, "betas": [0.9, 0.95]}}, "zero_optimization": {"stage": 3}})");
  spec["vision"]["freeze"] = {"patch_embed.*", "blocks.0.*"};
  spec["vision"]["parallel"] = {{"sequence", 2}};
  spec["llm"]["actors"] = 2;
  spec["llm"]["parallel"] = {{"tensor", 2}, {"embeddings", "broadcast"}};
  spec["llm"]["model"] = {{"hidden", 96},
                          {"heads", 6},
                          {"kv_heads", 2},
                          {"rope_theta", 12345.5},
                          {"tie_embeddings", false},
                          {"max_seq_len", 100}};
  spec["schedule"] = {{"global_batch", 12}, {"micro_batches", 3}, {"steps", 7},
                      {"eval_every", 2},    {"eval_samples", 5},  {"checkpoint_every", 3},
                      {"seed", 99}};
  spec["failure"] = {{"max_restarts", 7}};
  spec["resume_from"] = "/runs/a/checkpoints/step-000003";
  JobConfig original = ExpectValid(spec.dump());
  EXPECT_EQ(original.max_restarts, 7);
  EXPECT_EQ(original.vision.freeze, (std::vector<std::string>{"patch_embed.*", "blocks.0.*"}));
  EXPECT_TRUE(original.llm.freeze.empty());
  EXPECT_EQ(original.vision.sequence_parallel, 2);
  EXPECT_EQ(original.llm.tensor_parallel, 2);
  EXPECT_EQ(original.llm.embeddings, EmbeddingRoute::kBroadcast);
  std::string text = JobConfigToJson(original);
  absl::StatusOr<JobConfig> again = ParseJobSpecJson(text, "round-trip");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  ExpectSameConfig(original, *again);
  EXPECT_EQ(JobConfigToJson(*again), text);
}

TEST(JobConfigToJson, WritesEveryFieldSnakeCaseWithTwoSpaceIndent) {
  JobConfig config = ExpectValid(BaseSpec().dump());
  std::string text = JobConfigToJson(config);
  EXPECT_THAT(text, StartsWith("{\n  \"name\": \"t\",\n  \"data\": {\n    \"shapes\": {"));
  json written = json::parse(text);
  EXPECT_EQ(written["vision"]["model"]["image_size"], 32);  // the preset, expanded
  EXPECT_EQ(written["vision"]["model"]["preset"], "vit-tiny");
  EXPECT_EQ(written["llm"]["model"]["tie_embeddings"], true);
  EXPECT_TRUE(written["vision"]["engine"].is_object());
  EXPECT_FALSE(written["vision"]["model"].contains("output_dim"));
  EXPECT_FALSE(written["llm"]["model"].contains("vocab_size"));
  EXPECT_EQ(written["schedule"].size(), 8u);
  EXPECT_EQ(written["schedule"]["gradient_clipping"], 0.0);
  EXPECT_EQ(written["llm"]["model"].size(), 10u);
  EXPECT_EQ(written["vision"]["model"].size(), 10u);
  EXPECT_EQ(written["failure"]["max_restarts"], 3);  // the default, written out
  EXPECT_EQ(written["resume_from"], "");
  EXPECT_EQ(written["vision"]["freeze"], json::array());  // none, written out
}

TEST(JobConfigToJson, RelativeResumeFromIsJoinedWithSpecDir) {
  json spec = BaseSpec();
  spec["resume_from"] = "runs/a/checkpoints/step-000010";
  absl::StatusOr<JobConfig> config = ParseJobSpecJson(spec.dump(), "job.json");
  ASSERT_TRUE(config.ok()) << config.status();
  config->spec_dir = "/specs";
  absl::StatusOr<JobConfig> again = ParseJobSpecJson(JobConfigToJson(*config), "run/job.json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->resume_from, "/specs/runs/a/checkpoints/step-000010");
  EXPECT_EQ(SpecPath("/abs/step-000001", "/specs"), "/abs/step-000001");
  EXPECT_EQ(SpecPath("", "/specs"), "");
}

TEST(JobConfigToJson, APretrainedTowerIsWrittenInsteadOfTheModel) {
  json spec = BaseSpec();
  spec["vision"].erase("model");
  spec["vision"]["pretrained"] = "towers/clip";
  absl::StatusOr<JobConfig> config = ParseJobSpecJson(spec.dump(), "job.json");
  ASSERT_TRUE(config.ok()) << config.status();
  config->spec_dir = "/specs";
  const json written = json::parse(JobConfigToJson(*config));
  EXPECT_FALSE(written["vision"].contains("model"));
  EXPECT_EQ(written["vision"]["pretrained"], "/specs/towers/clip");
  absl::StatusOr<JobConfig> again = ParseJobSpecJson(written.dump(), "run/job.json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->vision.pretrained, "/specs/towers/clip");
}

TEST(JobConfigToJson, JsonlPathsAreJoinedWithSpecDir) {
  absl::StatusOr<JobConfig> loaded = LoadJobSpecFile(kExamples + "/jsonl_vlm.json");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<JobConfig> again = ParseJobSpecJson(JobConfigToJson(*loaded), "run/job.json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->spec_dir, "");
  EXPECT_EQ(again->data.jsonl.train_path, loaded->spec_dir + "/jsonl/train.jsonl");
  EXPECT_EQ(again->data.jsonl.eval_path, loaded->spec_dir + "/jsonl/eval.jsonl");
  JobConfig expected = *loaded;
  expected.spec_dir = "";
  expected.data.jsonl = again->data.jsonl;
  ExpectSameConfig(expected, *again);
}

}  // namespace
}  // namespace tandem::jobspec
