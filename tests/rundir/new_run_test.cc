// rundir/new_run.h: the rules every way of starting a run shares (tandem run, --colocated, submit).
#include "rundir/new_run.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace tandem::rundir {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  return fs::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid()));
}

TEST(NewRun, TakesAMissingOrEmptyRunDirectoryOnly) {
  const fs::path dir = TempDir("new_run_dir");
  fs::remove_all(dir);
  EXPECT_TRUE(CheckRunDirIsNew(dir.string()).ok());
  fs::create_directories(dir);
  EXPECT_TRUE(CheckRunDirIsNew(dir.string()).ok());
  std::ofstream(dir / "metrics.jsonl") << "{}\n";
  const absl::Status taken = CheckRunDirIsNew(dir.string());
  EXPECT_EQ(taken.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(taken.message(), "run directory " + dir.string() +
                                 " already exists and is not empty; choose another --run-dir");
  fs::remove_all(dir);
}

TEST(NewRun, AResumePointMustLeaveStepsToTrain) {
  const fs::path dir = TempDir("new_run_checkpoint") / "step-000005";
  fs::create_directories(dir);
  ASSERT_TRUE(MarkCheckpointComplete({dir.string(), 5, 1, 1}).ok());
  absl::StatusOr<CheckpointInfo> resume = ReadResumePoint(dir.string(), 6);
  ASSERT_TRUE(resume.ok()) << resume.status();
  EXPECT_EQ(resume->step, 5);
  const absl::Status done = ReadResumePoint(dir.string(), 5).status();
  EXPECT_EQ(done.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(done.message(),
            dir.string() + " is at step 5 and schedule.steps is 5: nothing is left to train");
  EXPECT_EQ(ReadResumePoint((dir.parent_path() / "step-000009").string(), 10).status().code(),
            absl::StatusCode::kFailedPrecondition);
  fs::remove_all(dir.parent_path());
}

}  // namespace
}  // namespace tandem::rundir
