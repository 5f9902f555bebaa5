// rundir/run_driver.h over a scripted RunGroups: the sequence both placements share (segments,
// evaluations, checkpoints, the plot, the export and summary.json), the resume point, and errors.
#include "rundir/run_driver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tandem::rundir {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Records every call; step k has loss 1/k. Evaluate answers 10 samples, 5 exact.
class ScriptedGroups : public RunGroups {
 public:
  absl::Status RunSteps(int64_t first, int64_t last, const StepDone& done) override {
    calls.push_back(absl::StrCat("steps ", first, "-", last));
    for (int64_t step = first; step <= last; ++step) {
      StepOutcome outcome;
      outcome.loss = step == fail_at ? std::nan("") : 1.0 / static_cast<double>(step);
      if (absl::Status status = done(step, outcome); !status.ok()) return status;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<EvalCounts> Evaluate(int64_t step) override {
    calls.push_back(absl::StrCat("evaluate ", step));
    if (!evaluate_error.ok()) return evaluate_error;
    return EvalCounts{10, 5, 40, 30};
  }
  absl::Status SaveCheckpoint(int64_t step, const std::string& directory) override {
    calls.push_back(absl::StrCat("save ", step, " ", fs::path(directory).filename().string()));
    fs::create_directories(directory);
    // The marker comes after every group saved.
    EXPECT_FALSE(fs::exists(fs::path(directory) / "complete"));
    return absl::OkStatus();
  }
  absl::Status FinishCheckpoint(int64_t step, const std::string& directory) override {
    calls.push_back(absl::StrCat("finish ", step, " ", fs::path(directory).filename().string()));
    EXPECT_FALSE(fs::exists(fs::path(directory) / "complete"));
    return absl::OkStatus();
  }
  absl::Status Export(const std::string& vision_path, const std::string& llm_path) override {
    calls.push_back(absl::StrCat("export ", fs::path(vision_path).filename().string(), " ",
                                 fs::path(llm_path).filename().string()));
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> BeforeSegment(int64_t first, int64_t last) override {
    return hold_at > 0 && hold_at >= first ? std::min(last, hold_at) : last;
  }
  absl::Status OnStep(const StepRecord& record) override {
    steps.push_back(record.step);
    return absl::OkStatus();
  }
  void OnEval(const EvalRecord& eval) override {
    calls.push_back(absl::StrCat("eval record ", eval.step));
  }
  void OnCheckpoint(const std::string& directory) override {
    calls.push_back(absl::StrCat("checkpoint ", fs::path(directory).filename().string()));
  }

  std::vector<std::string> calls;
  std::vector<int64_t> steps;
  int64_t hold_at = 0;
  int64_t fail_at = 0;
  absl::Status evaluate_error;
};

RunDriverOptions Options(const fs::path& dir, int64_t steps) {
  RunDriverOptions options;
  options.run_dir = dir.string();
  options.holder = "run_driver_test";
  options.job_json = R"({"name": "t"})";
  options.job_name = "t";
  options.loop.steps = steps;
  options.loop.global_batch = 8;
  options.loop.eval_every = 2;
  options.loop.checkpoint_every = 3;
  options.vision_actors = 2;
  options.llm_actors = 3;
  return options;
}

TEST(RunDriver, RunsSegmentsBetweenEvaluationsAndCheckpointsThenExportsAndSummarises) {
  const fs::path dir = TempDir("run_driver_sequence");
  absl::StatusOr<std::unique_ptr<RunDriver>> driver = RunDriver::Open(Options(dir, 4));
  ASSERT_TRUE(driver.ok()) << driver.status();
  EXPECT_EQ((*driver)->resume_point(), std::nullopt);
  EXPECT_EQ(ReadFile(dir / "job.json"), "{\"name\": \"t\"}\n");
  ScriptedGroups groups;
  groups.hold_at = 1;  // a hold ends the first segment after step 1
  absl::StatusOr<RunSummary> summary = (*driver)->Run(groups, RunDriver::Clock::now());
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(groups.calls,
              ElementsAre("steps 1-1", "steps 2-2", "evaluate 2", "eval record 2", "steps 3-3",
                          "save 3 step-000003", "checkpoint step-000003", "steps 4-4", "evaluate 4",
                          "eval record 4", "save 4 step-000004", "checkpoint step-000004",
                          "export vision.safetensors llm.safetensors"));
  EXPECT_THAT(groups.steps, ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(summary->steps, 4);
  EXPECT_EQ(summary->samples, 32);
  EXPECT_DOUBLE_EQ(summary->final_loss, 0.25);
  EXPECT_DOUBLE_EQ(summary->caption_exact_match, 0.5);
  EXPECT_EQ(summary->last_checkpoint, (dir / "checkpoints/step-000004").string());
  // The marker records both groups' sizes; summary.json and loss.svg are written.
  absl::StatusOr<CheckpointInfo> marker =
      ReadCheckpoint((dir / "checkpoints/step-000003").string());
  ASSERT_TRUE(marker.ok()) << marker.status();
  EXPECT_EQ(marker->vision_actors, 2);
  EXPECT_EQ(marker->llm_actors, 3);
  EXPECT_EQ(ReadFile(dir / "summary.json"), SummaryJson(*summary) + "\n");
  EXPECT_THAT(ReadFile(dir / "loss.svg"), ::testing::HasSubstr("<svg"));
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  ASSERT_TRUE(ReadMetrics((dir / "metrics.jsonl").string(), &steps, &evals).ok());
  EXPECT_EQ(steps.size(), 4u);
  EXPECT_EQ(evals.size(), 2u);
  fs::remove_all(dir);
}

// checkpoint.async: a checkpoint is written while the next step trains (a segment of its own),
// then finished and marked complete; the run's last one is finished at once.
TEST(RunDriver, AnAsynchronousCheckpointIsFinishedAfterTheStepThatFollowsIt) {
  const fs::path dir = TempDir("run_driver_async");
  RunDriverOptions options = Options(dir, 7);
  options.async_checkpoints = true;
  absl::StatusOr<std::unique_ptr<RunDriver>> driver = RunDriver::Open(options);
  ASSERT_TRUE(driver.ok()) << driver.status();
  ScriptedGroups groups;
  absl::StatusOr<RunSummary> summary = (*driver)->Run(groups, RunDriver::Clock::now());
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(
      groups.calls,
      ElementsAre("steps 1-2", "evaluate 2", "eval record 2", "steps 3-3", "save 3 step-000003",
                  "steps 4-4", "finish 3 step-000003", "checkpoint step-000003", "evaluate 4",
                  "eval record 4", "steps 5-6", "evaluate 6", "eval record 6", "save 6 step-000006",
                  "steps 7-7", "finish 6 step-000006", "checkpoint step-000006", "evaluate 7",
                  "eval record 7", "save 7 step-000007", "finish 7 step-000007",
                  "checkpoint step-000007", "export vision.safetensors llm.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "checkpoints/step-000003/complete"));
  EXPECT_EQ(summary->last_checkpoint, (dir / "checkpoints/step-000007").string());
  fs::remove_all(dir);
}

TEST(RunDriver, ResumesFromTheRunsOwnCheckpointBeforeTheSpecsAndCutsMetricsBack) {
  const fs::path dir = TempDir("run_driver_resume");
  {
    absl::StatusOr<std::unique_ptr<RunDriver>> first = RunDriver::Open(Options(dir, 4));
    ASSERT_TRUE(first.ok()) << first.status();
    ScriptedGroups groups;
    groups.fail_at = 4;  // a non-finite loss after the checkpoint of step 3
    absl::StatusOr<RunSummary> failed = (*first)->Run(groups, RunDriver::Clock::now());
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(failed.status().message()),
                ::testing::StartsWith("loss is nan at step 4"));
    EXPECT_FALSE(fs::exists(dir / "summary.json"));
  }
  // Another run's checkpoint, named by the spec: the run's own step 3 wins.
  const fs::path other = TempDir("run_driver_other") / "step-000001";
  fs::create_directories(other);
  ASSERT_TRUE(MarkCheckpointComplete({other.string(), 1, 1, 1}).ok());
  RunDriverOptions options = Options(dir, 4);
  options.resume_from = other.string();
  absl::StatusOr<std::unique_ptr<RunDriver>> again = RunDriver::Open(options);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->resume_point().has_value());
  EXPECT_EQ((*again)->resume_point()->step, 3);
  EXPECT_TRUE((*again)->resumes_own_checkpoint());
  EXPECT_EQ((*again)->metrics().steps().size(), 3u);  // step 4's record was dropped
  ScriptedGroups groups;
  absl::StatusOr<RunSummary> summary = (*again)->Run(groups, RunDriver::Clock::now());
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(groups.steps, ElementsAre(4));
  fs::remove_all(dir);
  fs::remove_all(other.parent_path());
}

TEST(RunDriver, ASpecCheckpointWithNothingLeftToTrainIsRefusedNamingTheField) {
  const fs::path dir = TempDir("run_driver_nothing_left");
  const fs::path checkpoint = TempDir("run_driver_done") / "step-000004";
  fs::create_directories(checkpoint);
  ASSERT_TRUE(MarkCheckpointComplete({checkpoint.string(), 4, 1, 1}).ok());
  RunDriverOptions options = Options(dir, 4);
  options.resume_from = checkpoint.string();
  absl::StatusOr<std::unique_ptr<RunDriver>> driver = RunDriver::Open(options);
  EXPECT_EQ(driver.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(driver.status().message()),
              ::testing::StartsWith("resume_from: " + checkpoint.string() + " is at step 4"));
  fs::remove_all(dir);
  fs::remove_all(checkpoint.parent_path());
}

TEST(RunDriver, AGroupsErrorEndsTheRunAsItIs) {
  const fs::path dir = TempDir("run_driver_error");
  absl::StatusOr<std::unique_ptr<RunDriver>> driver = RunDriver::Open(Options(dir, 4));
  ASSERT_TRUE(driver.ok()) << driver.status();
  ScriptedGroups groups;
  groups.evaluate_error = absl::UnavailableError("llm-0 (llm rank 0): gone");
  absl::StatusOr<RunSummary> summary = (*driver)->Run(groups, RunDriver::Clock::now());
  EXPECT_EQ(summary.status(), groups.evaluate_error);
  EXPECT_THAT(groups.calls, ElementsAre("steps 1-2", "evaluate 2"));
  EXPECT_FALSE(fs::exists(dir / "summary.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::rundir
