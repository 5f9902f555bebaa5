// rundir/run_dir_lock.h: one holder at a time, released when the lock ends (or the process).
#include "rundir/run_dir_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

namespace tandem::rundir {
namespace {

using ::testing::MatchesRegex;

TEST(RunDirLock, OneHolderAtATime) {
  const auto dir =
      std::filesystem::path(::testing::TempDir()) / ("run_dir_lock_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    absl::StatusOr<RunDirLock> first = RunDirLock::Acquire(dir.string(), "job j-000007 (shapes)");
    ASSERT_TRUE(first.ok()) << first.status();
    const absl::Status second = RunDirLock::Acquire(dir.string()).status();
    EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition);
    // "... is in use by pid 123 on host h since 2026-11-26 08:13:14 UTC: job j-000007 (shapes) (it
    // holds ...)"
    EXPECT_THAT(
        std::string(second.message()),
        MatchesRegex(
            "run directory " + dir.string() + " is in use by pid " + std::to_string(::getpid()) +
            " on host .* since [0-9-]+ [0-9:]+ UTC: job j-000007 \\(shapes\\) \\(it holds " +
            (dir / ".lock").string() + "\\)"));
    RunDirLock moved = *std::move(first);  // the lock moves with its holder
    EXPECT_FALSE(RunDirLock::Acquire(dir.string()).ok());
  }
  EXPECT_TRUE(RunDirLock::Acquire(dir.string()).ok());
  EXPECT_EQ(RunDirLock::Acquire((dir / "missing").string()).status().code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

// A writer that died leaves "<name>.tmp.<pid>" files; the next holder removes them, at any depth,
// and nothing else.
TEST(RunDirLock, RemovesLeftoverTempFilesOnly) {
  const auto dir =
      std::filesystem::path(::testing::TempDir()) / ("run_dir_tmp_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "checkpoints" / "step-000002");
  for (const auto& name : {"metrics.jsonl.tmp.123", "checkpoints/step-000002/complete.tmp.77",
                           "job.json", "notes.tmp.txt", "metrics.jsonl"}) {
    std::ofstream(dir / name) << "x";
  }
  absl::StatusOr<RunDirLock> lock = RunDirLock::Acquire(dir.string());
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_EQ(lock->RemoveLeftoverTempFiles().value(), 2);
  EXPECT_FALSE(std::filesystem::exists(dir / "metrics.jsonl.tmp.123"));
  EXPECT_FALSE(std::filesystem::exists(dir / "checkpoints/step-000002/complete.tmp.77"));
  for (const auto& name : {"job.json", "notes.tmp.txt", "metrics.jsonl", ".lock"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / name)) << name;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::rundir
