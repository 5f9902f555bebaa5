// The service under a stream of small jobs with faults, through one coordinator: in each round
// three plain jobs, a spec that is rejected, a job whose LLM actor is killed after a checkpoint
// (its supervisor starts it again and the job resumes), and a job cancelled while it runs; in the
// first round the coordinator is also killed and started again while a job waits. At the end
// every job is in the state it should be, no actor is left busy, and the coordinator's memory and
// threads, measured after the first round and at the end, stay bounded. Prints the measurements.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/service/service_testing.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using testing::Outcome;
using testing::ProcessCluster;

constexpr int kRounds = 4;

// VmRSS (KiB) and Threads of a process, from /proc/<pid>/status.
struct ProcessSize {
  int64_t rss_kib = 0;
  int64_t threads = 0;
};

ProcessSize SizeOf(pid_t pid) {
  ProcessSize size;
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    const std::vector<std::string> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.size() < 2) continue;
    if (words[0] == "VmRSS:") (void)absl::SimpleAtoi(words[1], &size.rss_kib);
    if (words[0] == "Threads:") (void)absl::SimpleAtoi(words[1], &size.threads);
  }
  return size;
}

class SoakTest : public ::testing::Test {
 protected:
  std::string Submit(const std::string& name, const std::string& spec) {
    const Outcome submitted = cluster_.Cli(
        absl::StrCat("submit ", cluster_.WriteFile(name + ".json", spec), " --threads 1"));
    EXPECT_EQ(submitted.exit_code, 0) << submitted.output;
    const std::string id = submitted.output.substr(0, submitted.output.find('\n'));
    expected_[id] = "SUCCEEDED";
    return id;
  }

  // The job's final line, once it ended.
  std::string Follow(const std::string& id) {
    return cluster_.Cli(absl::StrCat("logs ", id, " -f")).output;
  }

  // One round of faults; the coordinator is killed and started again in it when `restart`.
  void Round(int round, bool restart) {
    const std::string tag = absl::StrCat("r", round);
    for (int i = 0; i < 3; ++i)
      Submit(absl::StrCat(tag, "-plain", i), testing::TinyJobSpec({.name = "plain"}));

    // A spec the coordinator refuses: nothing is queued.
    const Outcome rejected = cluster_.Cli(absl::StrCat(
        "submit ",
        cluster_.WriteFile(tag + "-bad.json", testing::TinyJobSpec({.name = "bad", .steps = -3}))));
    EXPECT_EQ(rejected.exit_code, 2) << rejected.output;  // invalid input
    EXPECT_THAT(rejected.output, HasSubstr("schedule.steps"));

    // The LLM actor dies after a checkpoint; its supervisor starts it again and the job resumes.
    const std::string killed_name = tag + "-killed";
    cluster_.Hold(killed_name, 2);
    const std::string killed =
        Submit(killed_name, testing::TinyJobSpec({.name = killed_name, .checkpoint_every = 2}));
    EXPECT_TRUE(cluster_.AwaitHeld(killed, 2))
        << cluster_.Cli(absl::StrCat("logs ", killed)).output;
    const pid_t actor = testing::ChildWithArgument(llm_supervisor_, "llm");
    EXPECT_GT(actor, 0);
    if (actor > 0) kill(actor, SIGKILL);
    if (restart) {
      const std::string address = cluster_.address();
      cluster_.Kill(cluster_.coordinator());
      cluster_.StartCoordinator(address, {"--heartbeat-timeout", "10"});
      EXPECT_EQ(cluster_.address(), address);
    }
    cluster_.Release(killed_name);
    EXPECT_THAT(Follow(killed), HasSubstr("SUCCEEDED"));

    // Cancelled while it runs.
    const std::string cancelled_name = tag + "-cancelled";
    cluster_.Hold(cancelled_name, 1);
    const std::string cancelled =
        Submit(cancelled_name, testing::TinyJobSpec({.name = cancelled_name}));
    EXPECT_TRUE(cluster_.AwaitHeld(cancelled, 1));
    EXPECT_EQ(cluster_.Cli(absl::StrCat("cancel ", cancelled)).exit_code, 0);
    expected_[cancelled] = "CANCELLED";
    cluster_.Release(cancelled_name);
    EXPECT_THAT(Follow(cancelled), HasSubstr("CANCELLED"));
  }

  ProcessCluster cluster_;
  pid_t llm_supervisor_ = 0;
  std::map<std::string, std::string> expected_;  // job id -> its final state
};

TEST_F(SoakTest, ManyJobsWithFaultsLoseNothingLeaveNoActorBusyAndKeepTheCoordinatorBounded) {
  cluster_.StartCoordinator("127.0.0.1:0", {"--heartbeat-timeout", "10"});
  cluster_.StartActor("vision", {"--supervise"});
  llm_supervisor_ = cluster_.StartActor("llm", {"--supervise"});

  Round(0, /*restart=*/true);
  for (const auto& [id, state] : expected_) Follow(id);
  const ProcessSize start = SizeOf(cluster_.coordinator());
  for (int round = 1; round < kRounds; ++round) Round(round, /*restart=*/false);
  for (const auto& [id, state] : expected_) Follow(id);
  const ProcessSize end = SizeOf(cluster_.coordinator());

  // Every job is known, in its final state; nothing else was queued.
  const Outcome jobs = cluster_.Cli("jobs");
  int listed = 0;
  for (const std::string& line : std::vector<std::string>(absl::StrSplit(jobs.output, '\n'))) {
    if (!absl::StartsWith(line, "job-")) continue;
    ++listed;
    const std::string id = line.substr(0, line.find(' '));
    ASSERT_EQ(expected_.count(id), 1u) << line;
    EXPECT_THAT(line, HasSubstr(expected_[id])) << line;
  }
  EXPECT_EQ(listed, static_cast<int>(expected_.size())) << jobs.output;
  // No actor is left with a job, and both pools still serve.
  const Outcome actors = cluster_.Cli("actors");
  int free_actors = 0;
  for (const std::string& line : std::vector<std::string>(absl::StrSplit(actors.output, '\n'))) {
    if (!absl::StartsWith(line, "vision-") && !absl::StartsWith(line, "llm-")) continue;
    const std::vector<std::string> columns = absl::StrSplit(line, ' ', absl::SkipEmpty());
    ASSERT_GE(columns.size(), 6u) << line;
    EXPECT_EQ(columns[5], "-") << "still busy: " << line;
    free_actors += columns[4] == "yes" ? 1 : 0;
  }
  EXPECT_EQ(free_actors, 2) << actors.output;

  std::printf(
      "soak: %zu jobs in %d rounds; coordinator after round 1: %lld KiB, %lld threads; at the end: "
      "%lld KiB, %lld threads\n",
      expected_.size(), kRounds, static_cast<long long>(start.rss_kib),
      static_cast<long long>(start.threads), static_cast<long long>(end.rss_kib),
      static_cast<long long>(end.threads));
  EXPECT_GT(start.threads, 0);
  EXPECT_LE(end.threads, start.threads + 4);
  EXPECT_LE(end.rss_kib, start.rss_kib + 32 * 1024);
}

}  // namespace
}  // namespace tandem
