// No process outlives its job: `tandem run`'s coordinator and actors are gone once it returns,
// whether the job succeeded or the run was interrupted (Ctrl-C, SIGTERM), and a cancelled job of
// a cluster hands its actors back free, able to run the next job. Jobs that are interrupted are
// held (ProcessCluster::Hold) so that they are still running when the test acts, however fast the
// machine trains.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/service/service_testing.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using testing::Outcome;
using testing::ProcessCluster;
using testing::WaitFor;

using testing::ChildrenOf;

// A tiny fp32 job called `name` of `steps` steps with a checkpoint every 5.
std::string Spec(int steps, const std::string& name = "cleanup") {
  return testing::TinyJobSpec({.name = name, .steps = steps, .checkpoint_every = 5});
}

bool Exists(pid_t pid) { return std::filesystem::exists(absl::StrCat("/proc/", pid)); }

class CleanupTest : public ::testing::Test {
 protected:
  // Starts `tandem run` on a job of `steps` steps (called "cleanup", held by cluster_'s hold
  // files); returns its pid once its coordinator and both actors run, with their pids in
  // `children`.
  pid_t StartRun(int steps, std::set<pid_t>* children) {
    const pid_t run = cluster_.Spawn({"run", cluster_.WriteFile("job.json", Spec(steps)),
                                      "--run-dir", cluster_.dir() + "/run", "--threads", "1",
                                      "--output", "json", "--test-hold-dir", cluster_.hold_dir()});
    EXPECT_TRUE(WaitFor([&] { return (*children = ChildrenOf(run)).size() == 3; }))
        << "tandem run did not start a coordinator and two actors";
    return run;
  }

  // Every one of `pids` is gone within a few seconds (its parent reaped it, or init did).
  void ExpectGone(const std::set<pid_t>& pids) {
    for (pid_t pid : pids) {
      EXPECT_TRUE(WaitFor([&] { return !Exists(pid); }, std::chrono::seconds(10)))
          << "process " << pid << " outlived tandem run";
    }
  }

  ProcessCluster cluster_;
};

TEST_F(CleanupTest, FinishedRunLeavesNoProcess) {
  std::set<pid_t> children;
  cluster_.Hold("cleanup", 0);  // until the test has seen the children
  const pid_t run = StartRun(5, &children);
  cluster_.Release("cleanup");
  const int status = cluster_.Wait(run);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ExpectGone(children);
}

TEST_F(CleanupTest, InterruptedRunCancelsItsJobAndLeavesNoProcess) {
  cluster_.Hold("cleanup", 5);  // the job never ends by itself
  for (int signal : {SIGINT, SIGTERM}) {
    std::set<pid_t> children;
    std::filesystem::remove_all(cluster_.dir() + "/run");
    const pid_t run = StartRun(10, &children);
    ASSERT_TRUE(WaitFor([&] {
      return std::filesystem::exists(cluster_.dir() + "/run/checkpoints/step-000005/complete");
    }));
    kill(run, signal);
    const int status = cluster_.Wait(run);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << strsignal(signal) << status;
    ExpectGone(children);
  }
}

TEST_F(CleanupTest, CancelledJobHandsItsActorsBackFree) {
  cluster_.StartCoordinator();
  cluster_.StartActor("vision");
  cluster_.StartActor("llm");
  cluster_.Hold("long", 5);
  const Outcome submitted = cluster_.Cli(
      absl::StrCat("submit ", cluster_.WriteFile("long.json", Spec(10, "long")), " --threads 1"));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const std::string job = submitted.output.substr(0, submitted.output.find('\n'));
  ASSERT_TRUE(cluster_.AwaitHeld(job, 5));
  EXPECT_EQ(cluster_.Cli(absl::StrCat("cancel ", job)).exit_code, 0);
  EXPECT_THAT(cluster_.Cli(absl::StrCat("logs ", job, " -f")).output,
              HasSubstr("CANCELLED: cancelled by request"));
  const Outcome next = cluster_.Cli(absl::StrCat(
      "submit ", cluster_.WriteFile("next.json", Spec(5, "next")), " --wait --threads 1"));
  EXPECT_EQ(next.exit_code, 0) << next.output;
  EXPECT_THAT(next.output, HasSubstr("SUCCEEDED"));
}

}  // namespace
}  // namespace tandem
