// The central equivalence of docs/design.md §2 through the whole service: `tandem run JOB` (a local
// coordinator and Nv vision plus Nl LLM actor processes exchanging embeddings and gradients over
// gRPC) gives the per-step losses of `tandem run JOB --colocated` with fp32 engines, for Nv x Nl in
// {1x1, 2x2, 1x2, 2x1} and ZeRO stages 0-3 (each shape and each stage at least once, the sharded
// stages on 2x2: the engine tests hold every stage against plain data parallelism in one process),
// with gradient accumulation and the vision group running ahead, and with clipping by the whole
// model's gradient norm. Also: the run directory holds what a
// colocated run writes, and a bad spec fails before anything starts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/service/run_losses.h"
#include "tests/service/service_testing.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kSteps = 20;

std::string TempDir() {
  char pattern[] = "/tmp/tandem-service-XXXXXX";
  return mkdtemp(pattern);
}

// A tiny shapes job: 2 micro-batches of 6 samples per step, fp32 engines at ZeRO stage `stage`.
// `schedule_extra` adds schedule keys (a leading comma and the pairs).
std::string JobSpec(int vision_actors, int llm_actors, int stage,
                    const std::string& schedule_extra = "") {
  const std::string engine = testing::Fp32Engine(stage);
  return absl::StrCat(R"({
  "name": "equivalence",
  "data": {"shapes": {"seed": 5, "train_samples": 512, "eval_samples": 12}, "max_text_tokens": 12},
  "vision": {"actors": )",
                      vision_actors, R"(, "model": {"preset": "vit-tiny"}, "engine": )", engine,
                      R"(},
  "llm": {"actors": )",
                      llm_actors, R"(, "model": {"preset": "llm-tiny"}, "engine": )", engine, R"(},
  "schedule": {"global_batch": 12, "micro_batches": 2, "steps": )",
                      kSteps, R"(, "seed": 11)", schedule_extra, R"(}
})");
}

using testing::Losses;
using testing::Outcome;

Outcome RunTandem(const std::string& args) { return testing::Tandem("run " + args); }

// Per step, within a relative 1e-4 of the colocated reference.
void ExpectLossesMatch(const std::vector<double>& losses, const std::vector<double>& reference) {
  ASSERT_EQ(losses.size(), reference.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    EXPECT_LE(std::abs(losses[i] - reference[i]), 1e-4 * std::abs(reference[i]))
        << "step " << i + 1 << ": " << losses[i] << " vs colocated " << reference[i];
  }
}

class DisaggregatedTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { dir_ = TempDir(); }
  void TearDown() override { fs::remove_all(dir_); }

  std::string WriteSpec(const std::string& name, const std::string& text) {
    const std::string path = (fs::path(dir_) / name).string();
    std::ofstream(path) << text;
    return path;
  }

  std::string dir_;
};

TEST_P(DisaggregatedTest, LossesEqualColocatedForEveryGroupShape) {
  const int stage = GetParam();
  const std::string reference_dir = dir_ + "/colocated";
  const Outcome colocated =
      RunTandem(absl::StrCat(WriteSpec("colocated.json", JobSpec(1, 1, stage)),
                             " --colocated --threads 1 --run-dir ", reference_dir));
  ASSERT_EQ(colocated.exit_code, 0) << colocated.output;
  const std::vector<double> reference = Losses(reference_dir);
  ASSERT_EQ(reference.size(), static_cast<size_t>(kSteps));

  // Per stage, the shapes its equivalence runs on.
  const std::vector<std::vector<std::pair<int, int>>> shapes = {
      {{1, 1}, {2, 1}}, {{1, 2}}, {{2, 2}}, {{2, 2}, {1, 2}}};
  for (auto [nv, nl] : shapes[stage]) {
    SCOPED_TRACE(absl::StrCat(nv, " x ", nl, " at stage ", stage));
    const std::string run_dir = absl::StrCat(dir_, "/run-", nv, "x", nl);
    const Outcome run = RunTandem(
        absl::StrCat(WriteSpec(absl::StrCat("job-", nv, "x", nl, ".json"), JobSpec(nv, nl, stage)),
                     " --threads 1 --run-dir ", run_dir));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    ExpectLossesMatch(Losses(run_dir), reference);
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, DisaggregatedTest, ::testing::Values(0, 1, 2, 3));

// schedule.gradient_clipping clips by the norm of both groups together: the groups exchange their
// squared norms, so the disaggregated run takes the colocated run's clipped steps. The clip is
// below the tiny model's gradient norm, so it scales every step, and the colocated losses move away
// from an unclipped run's (the clipping is on, not ignored on both sides).
TEST_F(DisaggregatedTest, WholeModelClippingEqualsColocated) {
  const std::string clip = R"(, "gradient_clipping": 0.05)";
  const Outcome unclipped =
      RunTandem(absl::StrCat(WriteSpec("unclipped.json", JobSpec(1, 1, 2)),
                             " --colocated --threads 1 --run-dir ", dir_, "/unclipped"));
  ASSERT_EQ(unclipped.exit_code, 0) << unclipped.output;
  const Outcome colocated =
      RunTandem(absl::StrCat(WriteSpec("colocated.json", JobSpec(1, 1, 2, clip)),
                             " --colocated --threads 1 --run-dir ", dir_, "/colocated"));
  ASSERT_EQ(colocated.exit_code, 0) << colocated.output;
  const std::vector<double> reference = Losses(dir_ + "/colocated");
  const std::vector<double> free = Losses(dir_ + "/unclipped");
  ASSERT_EQ(reference.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(free.size(), static_cast<size_t>(kSteps));
  EXPECT_GT(std::abs(reference.back() - free.back()), 1e-3 * std::abs(free.back()));

  for (auto [nv, nl] : std::vector<std::pair<int, int>>{{1, 2}, {2, 1}}) {
    SCOPED_TRACE(absl::StrCat(nv, " x ", nl));
    const std::string run_dir = absl::StrCat(dir_, "/run-", nv, "x", nl);
    const Outcome run = RunTandem(absl::StrCat(
        WriteSpec(absl::StrCat("job-", nv, "x", nl, ".json"), JobSpec(nv, nl, 2, clip)),
        " --threads 1 --run-dir ", run_dir));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    ExpectLossesMatch(Losses(run_dir), reference);
  }
}

// With asynchronous checkpoints (checkpoint.async): each actor writes its shard while the next step
// trains, and the checkpoint is complete once FinishCheckpoint has run on every actor.
TEST(DisaggregatedRun, WritesTheColocatedRunDirectory) {
  const std::string dir = TempDir();
  const std::string spec = dir + "/job.json";
  std::ofstream(spec) << absl::StrReplaceAll(
      JobSpec(2, 1, 1, R"(, "checkpoint_every": 10)"),
      {{R"("name": "equivalence",)", R"("name": "equivalence", "checkpoint": {"async": true},)"}});
  const std::string run_dir = dir + "/run";
  const Outcome run =
      RunTandem(absl::StrCat(spec, " --threads 1 --output json --run-dir ", run_dir));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("\"steps\":20"));
  for (const char* name :
       {"job.json", "tokenizer.json", "metrics.jsonl", "loss.svg", "summary.json",
        "vision.safetensors", "llm.safetensors", "checkpoints/step-000010/complete",
        "checkpoints/step-000010/vision/rank_1_of_2.safetensors",
        "checkpoints/step-000010/llm/complete", "checkpoints/step-000020/vision",
        "checkpoints/step-000020/llm", "checkpoints/step-000020/tokenizer.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(run_dir) / name)) << name;
  }
  fs::remove_all(dir);
}

TEST(DisaggregatedRun, BadSpecFailsWithItsPathBeforeStarting) {
  const std::string dir = TempDir();
  const std::string spec = dir + "/job.json";
  std::ofstream(spec) << absl::StrReplaceAll(JobSpec(1, 1, 0), {{"\"steps\": 20", "\"steps\": 0"}});
  const Outcome run = RunTandem(absl::StrCat(spec, " --run-dir ", dir, "/run"));
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.output, HasSubstr("schedule.steps"));
  EXPECT_FALSE(fs::exists(dir + "/run"));
  fs::remove_all(dir);
}

// data.on_bad_sample "skip" through the service: shards packed by `tandem data pack` from
// examples/jsonl (two samples a shard), one shard deleted and one cut inside an image. `tandem run`
// with 2 vision and 2 LLM actors, where only the vision actor reading the cut image finds it bad,
// leaves out the same three samples every step as the colocated run does, with its losses.
TEST(DisaggregatedRun, BadSamplesAreLeftOutAsTheColocatedRunLeavesThemOut) {
  const std::string dir = TempDir();
  const fs::path examples = fs::path(TANDEM_EXAMPLES_DIR);
  const Outcome packed =
      testing::Tandem(absl::StrCat("data pack ", (examples / "jsonl/train.jsonl").string(), " ",
                                   dir, "/shards --shard-size 6KiB"));
  ASSERT_EQ(packed.exit_code, 0) << packed.output;
  ASSERT_TRUE(fs::exists(dir + "/shards/train-000003.tar")) << packed.output;
  fs::remove(dir + "/shards/train-000001.tar");
  // The second sample's image data starts at byte 3584 of its shard.
  fs::resize_file(dir + "/shards/train-000002.tar", 3584 + 40);
  const auto spec = [&](int actors) {
    const std::string engine = testing::Fp32Engine(1);
    const std::string path = absl::StrCat(dir, "/job-", actors, ".json");
    std::ofstream(path) << absl::StrCat(
        R"({"name": "skip", "data": {"shards": {"train": ")", dir,
        R"(/shards"}, "max_text_tokens": 32, "on_bad_sample": "skip"},
  "vision": {"actors": )",
        actors, R"(, "model": {"preset": "vit-tiny"}, "engine": )", engine, R"(},
  "llm": {"actors": )",
        actors, R"(, "model": {"preset": "llm-tiny"}, "engine": )", engine, R"(},
  "schedule": {"global_batch": 8, "micro_batches": 2, "steps": 4, "seed": 11}})");
    return path;
  };
  const Outcome colocated =
      RunTandem(absl::StrCat(spec(1), " --colocated --threads 1 --run-dir ", dir, "/colocated"));
  ASSERT_EQ(colocated.exit_code, 0) << colocated.output;
  EXPECT_THAT(colocated.output, HasSubstr("train-000002.tar: cannot read member 000000005.0.png"));
  const Outcome run = RunTandem(absl::StrCat(spec(2), " --threads 1 --run-dir ", dir, "/run"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ExpectLossesMatch(Losses(dir + "/run"), Losses(dir + "/colocated"));
  for (const std::string& name : {"colocated", "run"}) {
    std::vector<rundir::StepRecord> steps;
    std::vector<rundir::EvalRecord> evals;
    ASSERT_TRUE(
        rundir::ReadMetrics(absl::StrCat(dir, "/", name, "/metrics.jsonl"), &steps, &evals).ok());
    ASSERT_EQ(steps.size(), 4u) << name;
    for (const rundir::StepRecord& step : steps) EXPECT_EQ(step.skipped_samples, 3) << name;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem
