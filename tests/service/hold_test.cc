// The coordinator's fault hook for tests (`--test-hold-dir`, coordinator/step_hold.h) through the
// whole service: a held job stops before the step after the one its file names, says so, and goes
// on when the file goes; it never holds another job; a held job that is cancelled ends at once,
// though its file is still there.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rundir/run_log.h"
#include "tests/service/service_testing.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using testing::Outcome;
using testing::ProcessCluster;
using testing::WaitFor;

constexpr int kSteps = 10;

// A tiny fp32 job called `name` of kSteps steps, checkpointed every 5.
std::string Spec(const std::string& name) {
  return testing::TinyJobSpec({.name = name, .steps = kSteps, .checkpoint_every = 5});
}

class HoldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartCoordinator();
    ASSERT_FALSE(cluster_.address().empty());
  }

  // Submits the job `name` (with --wait when `wait`); returns the CLI's outcome.
  Outcome Submit(const std::string& name, bool wait = false) {
    return cluster_.Cli(absl::StrCat("submit ", cluster_.WriteFile(name + ".json", Spec(name)),
                                     " --threads 1", wait ? " --wait" : ""));
  }

  // The steps recorded in the job's metrics.jsonl.
  size_t RecordedSteps(const std::string& job) {
    std::vector<rundir::StepRecord> steps;
    std::vector<rundir::EvalRecord> evals;
    const absl::Status read = rundir::ReadMetrics(
        absl::StrCat(cluster_.dir(), "/state/jobs/", job, "/metrics.jsonl"), &steps, &evals);
    EXPECT_TRUE(read.ok()) << read;
    return steps.size();
  }

  ProcessCluster cluster_;
};

TEST_F(HoldTest, HeldJobWaitsAtItsStepWhileAnotherRunsAndGoesOnWhenReleased) {
  for (const char* pool : {"vision", "vision", "llm", "llm"}) cluster_.StartActor(pool);
  // Step 3 is neither an evaluation nor a checkpoint: the hold ends a segment of its own there.
  cluster_.Hold("held", 3);
  const Outcome submitted = Submit("held");
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const std::string job = submitted.output.substr(0, submitted.output.find('\n'));
  ASSERT_TRUE(cluster_.AwaitHeld(job, 3));
  EXPECT_THAT(cluster_.Cli(absl::StrCat("status ", job)).output,
              HasSubstr(absl::StrCat("RUNNING: held before step 4: ", cluster_.hold_dir(),
                                     "/held.hold exists")));

  // Another job, on the other actors, is not held: it runs to the end meanwhile.
  const Outcome other = Submit("other", /*wait=*/true);
  EXPECT_EQ(other.exit_code, 0) << other.output;
  EXPECT_THAT(other.output, HasSubstr("SUCCEEDED"));
  const Outcome status = cluster_.Cli(absl::StrCat("status ", job));
  EXPECT_THAT(status.output, HasSubstr("held before step 4"));
  EXPECT_THAT(status.output, HasSubstr("step 3 of 10"));
  EXPECT_EQ(RecordedSteps(job), 3u);

  cluster_.Release("held");
  const std::string log = cluster_.Cli(absl::StrCat("logs ", job, " -f")).output;
  EXPECT_THAT(log, HasSubstr("held before step 4: "));
  EXPECT_THAT(log, HasSubstr("released before step 4: "));
  EXPECT_THAT(log, HasSubstr("SUCCEEDED"));
  EXPECT_EQ(RecordedSteps(job), static_cast<size_t>(kSteps));
}

TEST_F(HoldTest, CancelledHeldJobEndsThoughItsFileIsStillThere) {
  cluster_.StartActor("vision");
  cluster_.StartActor("llm");
  cluster_.Hold("held", 5);
  const Outcome submitted = Submit("held");
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const std::string job = submitted.output.substr(0, submitted.output.find('\n'));
  ASSERT_TRUE(cluster_.AwaitHeld(job, 5));
  EXPECT_EQ(cluster_.Cli(absl::StrCat("cancel ", job)).exit_code, 0);
  EXPECT_TRUE(WaitFor([&] {
    return cluster_.Cli(absl::StrCat("status ", job))
               .output.find("CANCELLED: cancelled by request") != std::string::npos;
  })) << cluster_.Cli(absl::StrCat("logs ", job)).output;
  EXPECT_EQ(RecordedSteps(job), 5u);
  // Its actors are free again: the next job runs on them.
  const Outcome next = Submit("next", /*wait=*/true);
  EXPECT_EQ(next.exit_code, 0) << next.output;
}

TEST(HoldFlag, IsHiddenFromHelp) {
  EXPECT_THAT(testing::Tandem("coordinator --help").output,
              ::testing::Not(HasSubstr("test-hold-dir")));
  EXPECT_THAT(testing::Tandem("run --help").output, ::testing::Not(HasSubstr("test-hold-dir")));
}

}  // namespace
}  // namespace tandem
