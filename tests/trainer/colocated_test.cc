// The colocated trainer end to end on tiny models: it learns the shapes captions, normalises the
// loss over the global batch (so gradient accumulation does not change the losses), and writes the
// run directory it documents.
#include "trainer/colocated.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "jobspec/job_spec.h"
#include "nlohmann/json.hpp"
#include "rundir/run_log.h"

namespace tandem::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string TempDir() {
  char pattern[] = "/tmp/tandem-colocated-XXXXXX";
  return mkdtemp(pattern);
}

constexpr char kFp32Engine[] =
    R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.003, "betas": [0.9, 0.98]}}, "gradient_clipping": 1.0})";

// A four-shape job as a spec's JSON, for each test to change before Resolved reads it.
nlohmann::json TinyJob(int64_t steps) {
  return {
      {"name", "tiny"},
      {"data",
       {{"shapes", {{"seed", 7}, {"train_samples", 2048}, {"eval_samples", 64}}},
        {"max_text_tokens", 12}}},
      {"vision",
       {{"model", {{"preset", "vit-tiny"}}}, {"engine", nlohmann::json::parse(kFp32Engine)}}},
      {"llm",
       {{"model", {{"preset", "llm-tiny"}}}, {"engine", nlohmann::json::parse(kFp32Engine)}}},
      {"schedule", {{"global_batch", 32}, {"micro_batches", 1}, {"steps", steps}, {"seed", 3}}}};
}

// The spec as `tandem run` reads it (jobspec::ResolvedJobSpec).
jobspec::ResolvedJobSpec Resolved(const nlohmann::json& spec) {
  absl::StatusOr<jobspec::ResolvedJobSpec> resolved =
      jobspec::ResolveJobSpecJson(spec.dump(), "test spec");
  EXPECT_TRUE(resolved.ok()) << resolved.status();
  return resolved.ok() ? *std::move(resolved) : jobspec::ResolvedJobSpec{};
}

RunOptions Quiet(const std::string& run_dir) {
  RunOptions options;
  options.run_dir = run_dir;
  options.progress = nullptr;
  return options;
}

std::vector<rundir::StepRecord> Steps(const std::string& run_dir) {
  std::vector<rundir::StepRecord> steps;
  std::vector<rundir::EvalRecord> evals;
  EXPECT_TRUE(rundir::ReadMetrics(run_dir + "/metrics.jsonl", &steps, &evals).ok());
  return steps;
}

TEST(ColocatedTest, GradientAccumulationGivesTheSameLosses) {
  // The loss is normalised by the tokens of the whole global batch, so 2 micro-batches of 16 and
  // one of 32 over the same samples must give the same updates (fp32 engines).
  nlohmann::json one = TinyJob(4);
  one["data"]["shapes"]["eval_samples"] = 8;
  nlohmann::json two = one;
  two["schedule"]["micro_batches"] = 2;
  const std::string dir = TempDir();
  ASSERT_TRUE(RunColocated(Resolved(one), Quiet(dir + "/one")).ok());
  ASSERT_TRUE(RunColocated(Resolved(two), Quiet(dir + "/two")).ok());
  const auto a = Steps(dir + "/one"), b = Steps(dir + "/two");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i].loss, b[i].loss, 1e-5 * a[i].loss) << "step " << i + 1;
  }
  EXPECT_LT(a.back().loss, a.front().loss);
}

TEST(ColocatedTest, WritesTheRunDirectory) {
  nlohmann::json job = TinyJob(4);
  job["schedule"]["eval_every"] = 2;
  job["schedule"]["checkpoint_every"] = 2;
  const std::string run_dir = TempDir() + "/run";
  auto summary = RunColocated(Resolved(job), Quiet(run_dir));
  ASSERT_TRUE(summary.ok()) << summary.status();
  for (const char* name :
       {"job.json", "tokenizer.json", "metrics.jsonl", "loss.svg", "summary.json",
        "vision.safetensors", "llm.safetensors", "checkpoints/step-000002/vision/complete",
        "checkpoints/step-000004/llm/complete", "checkpoints/step-000004/tokenizer.json"}) {
    EXPECT_TRUE(fs::exists(run_dir + "/" + name)) << name;
  }
  std::vector<rundir::StepRecord> steps;
  std::vector<rundir::EvalRecord> evals;
  ASSERT_TRUE(rundir::ReadMetrics(run_dir + "/metrics.jsonl", &steps, &evals).ok());
  EXPECT_EQ(steps.size(), 4u);
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0].step, 2);
  EXPECT_EQ(evals[1].step, 4);
  EXPECT_EQ(summary->steps, 4);
  EXPECT_EQ(summary->samples, 128);
  EXPECT_TRUE(summary->evaluated);
  EXPECT_EQ(summary->last_checkpoint, run_dir + "/checkpoints/step-000004");
  EXPECT_GT(summary->vision_parameters, 0);
}

// A mixture of two shapes sources 3:1: metrics.jsonl counts each source's samples at every step
// (the 320 samples of ten steps split 240 and 80), and a run resumed from its checkpoint of step 5
// continues every source where it was, with the same losses (fp32).
TEST(ColocatedTest, AMixtureCountsItsSourcesAndResumesThemExactly) {
  nlohmann::json job = TinyJob(10);
  job["data"] = {
      {"mixture",
       {{"sources",
         {{{"name", "big"}, {"weight", 3}, {"shapes", {{"seed", 7}, {"train_samples", 512}}}},
          {{"name", "small"},
           {"weight", 1},
           {"shapes", {{"seed", 8}, {"train_samples", 24}, {"eval_samples", 8}}}}}}}},
      {"max_text_tokens", 12}};
  job["schedule"]["checkpoint_every"] = 5;
  const std::string run_dir = TempDir() + "/run";
  auto summary = RunColocated(Resolved(job), Quiet(run_dir));
  ASSERT_TRUE(summary.ok()) << summary.status();
  const std::vector<rundir::StepRecord> steps = Steps(run_dir);
  ASSERT_EQ(steps.size(), 10u);
  using Counts = std::vector<std::pair<std::string, int64_t>>;
  EXPECT_EQ(steps[0].samples_by_source, (Counts{{"big", 24}, {"small", 8}}));
  EXPECT_EQ(steps[9].samples_by_source, (Counts{{"big", 240}, {"small", 80}}));
  EXPECT_TRUE(summary->evaluated);  // on both sources' held-out samples

  job["resume_from"] = run_dir + "/checkpoints/step-000005";
  const std::string resumed_dir = TempDir() + "/resumed";
  ASSERT_TRUE(RunColocated(Resolved(job), Quiet(resumed_dir)).ok());
  const std::vector<rundir::StepRecord> resumed = Steps(resumed_dir);
  ASSERT_EQ(resumed.size(), 5u);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_EQ(resumed[i].step, steps[5 + i].step);
    EXPECT_EQ(resumed[i].loss, steps[5 + i].loss) << "step " << resumed[i].step;
    EXPECT_EQ(resumed[i].samples_by_source, steps[5 + i].samples_by_source);
  }
}

// checkpoint.async: each checkpoint is written while the next step trains, counts once finished,
// and resumes bit for bit; the run's losses are the synchronous run's.
TEST(ColocatedTest, AsynchronousCheckpointsResumeBitForBit) {
  nlohmann::json job = TinyJob(10);
  job["schedule"]["checkpoint_every"] = 4;
  const std::string sync_dir = TempDir() + "/sync";
  ASSERT_TRUE(RunColocated(Resolved(job), Quiet(sync_dir)).ok());
  job["checkpoint"] = {{"async", true}};
  const std::string run_dir = TempDir() + "/async";
  auto summary = RunColocated(Resolved(job), Quiet(run_dir));
  ASSERT_TRUE(summary.ok()) << summary.status();
  const std::vector<rundir::StepRecord> steps = Steps(run_dir), sync = Steps(sync_dir);
  ASSERT_EQ(steps.size(), 10u);
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i].loss, sync[i].loss) << i;
  for (const char* step : {"step-000004", "step-000008", "step-000010"}) {
    const std::filesystem::path checkpoint = std::filesystem::path(run_dir) / "checkpoints" / step;
    EXPECT_TRUE(std::filesystem::exists(checkpoint / "complete")) << step;
    EXPECT_TRUE(std::filesystem::exists(checkpoint / "vision/complete")) << step;
    EXPECT_TRUE(std::filesystem::exists(checkpoint / "llm/complete")) << step;
  }
  job["resume_from"] = run_dir + "/checkpoints/step-000004";
  const std::string resumed_dir = TempDir() + "/resumed";
  ASSERT_TRUE(RunColocated(Resolved(job), Quiet(resumed_dir)).ok());
  const std::vector<rundir::StepRecord> resumed = Steps(resumed_dir);
  ASSERT_EQ(resumed.size(), 6u);
  for (size_t i = 0; i < resumed.size(); ++i)
    EXPECT_EQ(resumed[i].loss, steps[4 + i].loss) << "step " << resumed[i].step;
}

// A four-step job run with --profile FIRST LAST into RUN_DIR.
absl::StatusOr<rundir::RunSummary> RunProfiled(const std::string& run_dir, int first, int last) {
  RunOptions options = Quiet(run_dir);
  options.profile_first = first;
  options.profile_last = last;
  return RunColocated(Resolved(TinyJob(4)), options);
}

// --profile 2 3: the trace holds those steps' operators, the vision encoder's and the LLM's.
TEST(ColocatedTest, ProfileTracesTheStepsItNames) {
  const std::string run_dir = TempDir() + "/run";
  auto summary = RunProfiled(run_dir, 2, 3);
  // A LibTorch without Kineto (platform_report_test demands it of LibTorch 2.x) says so before
  // the run starts.
  if (!summary.ok() && summary.status().code() == absl::StatusCode::kUnimplemented) {
    EXPECT_THAT(std::string(summary.status().message()),
                HasSubstr("built without the Kineto profiler"));
    EXPECT_FALSE(fs::exists(run_dir));
    return;
  }
  ASSERT_TRUE(summary.ok()) << summary.status();
  std::ifstream in(run_dir + "/trace.json");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"traceEvents\""));
  EXPECT_THAT(text.str(), HasSubstr("\"aten::linear\""));     // both models
  EXPECT_THAT(text.str(), HasSubstr("\"aten::embedding\""));  // the LLM's
  EXPECT_EQ(Steps(run_dir).size(), 4u);
}

TEST(ColocatedTest, ProfilePastTheLastStepIsRefused) {
  const std::string run_dir = TempDir() + "/run";
  auto summary = RunProfiled(run_dir, 3, 9);
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(summary.status().message(), "--profile 3 9: the job has 4 steps");
  EXPECT_FALSE(fs::exists(run_dir)) << "refused before the run directory is made";
}

TEST(ColocatedTest, RefusesANonEmptyRunDirectoryAndLeavesItAlone) {
  const std::string run_dir = TempDir();
  std::ofstream(run_dir + "/precious.txt") << "keep me";
  auto summary = RunColocated(Resolved(TinyJob(1)), Quiet(run_dir));
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(summary.status().message()),
              HasSubstr(run_dir + " already exists and is not empty"));
  std::ifstream in(run_dir + "/precious.txt");
  std::stringstream content;
  content << in.rdbuf();
  EXPECT_EQ(content.str(), "keep me");
  EXPECT_FALSE(fs::exists(run_dir + "/metrics.jsonl"));
}

TEST(ColocatedTest, ShortLowPrecisionRunLearnsToCaptionHeldOutShapes) {
  // The shapes example's low-precision engines (bf16 params, grads, master and moments, Kahan
  // updates, torch_autocast "auto": bf16 compute where the CPU has it, fp32 compute from the bf16
  // storage elsewhere) for a shortened schedule: the loss must fall from ln(vocabulary) ~ 3.2
  // below the stated bar, and greedy captions of held-out images must beat chance (1 caption in
  // 432, 1 token in 24) by far. TANDEM_TRAIN_STEPS (tests/trainer/CMakeLists.txt) is sized for a
  // slow 2-core CPU; its ctest timeout leaves room for bf16 emulation (TANDEM_CPU_BF16=emulated).
  constexpr char kBf16Engine[] = R"({
    "bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true},
    "torch_autocast": {"enabled": true, "dtype": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": 1.5e-3, "betas": [0.9, 0.98], "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 100, "total_num_steps": 100000}},
    "gradient_clipping": 1.0,
    "tandem": {"bf16_update": "kahan"}})";
  nlohmann::json job = TinyJob(TANDEM_TRAIN_STEPS);
  job["data"]["shapes"]["train_samples"] = 20000;
  job["data"]["shapes"]["eval_samples"] = 128;
  job["schedule"]["global_batch"] = 64;
  job["vision"]["model"]["positions"] = "sincos";  // as examples/shapes_vlm.json
  job["vision"]["engine"] = nlohmann::json::parse(kBf16Engine);
  job["llm"]["engine"] = nlohmann::json::parse(kBf16Engine);
  const std::string run_dir = TempDir() + "/run";
  auto summary = RunColocated(Resolved(job), Quiet(run_dir));
  ASSERT_TRUE(summary.ok()) << summary.status();
  // The margin over the bars, for whoever tunes TANDEM_TRAIN_STEPS.
  std::printf("after %d steps: final loss %.4f, token accuracy %.4f, caption exact match %.4f\n",
              TANDEM_TRAIN_STEPS, summary->final_loss, summary->token_accuracy,
              summary->caption_exact_match);
  EXPECT_LT(summary->final_loss, TANDEM_TRAIN_MAX_LOSS);
  EXPECT_GT(summary->token_accuracy, TANDEM_TRAIN_MIN_TOKEN_ACCURACY);
  EXPECT_GT(summary->caption_exact_match, TANDEM_TRAIN_MIN_EXACT_MATCH);
}

}  // namespace
}  // namespace tandem::trainer
