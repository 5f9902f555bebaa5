// The service as separate long-running processes, driven through the CLI: a coordinator and actors
// started by hand, jobs submitted with `tandem submit`, watched with `status`, `jobs`, `actors`, and
// a job whose actor dies mid-run failing with a message that names the actor instead of hanging.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

struct Outcome {
  int exit_code = -1;
  std::string output;
};

Outcome Tandem(const std::string& args) {
  FILE* pipe = popen(absl::StrCat(TANDEM_BINARY, " --log-level warning ", args, " 2>&1").c_str(), "r");
  Outcome outcome;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) outcome.output.append(buffer, n);
  const int status = pclose(pipe);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

// Waits for a file's first line (a ready file), up to 60 s.
std::string AwaitLine(const std::string& path) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    std::ifstream in(path);
    std::string line;
    if (in && std::getline(in, line) && !line.empty()) return line;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "";
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tandem-cluster-XXXXXX";
    dir_ = mkdtemp(pattern);
    coordinator_ = Spawn({"coordinator", "--listen", "127.0.0.1:0", "--state-dir", dir_ + "/state",
                          "--heartbeat-timeout", "2", "--ready-file", dir_ + "/coordinator"});
    address_ = AwaitLine(dir_ + "/coordinator");
    ASSERT_FALSE(address_.empty());
  }

  void TearDown() override {
    for (pid_t pid : children_) kill(pid, SIGKILL);
    for (pid_t pid : children_) waitpid(pid, nullptr, 0);
    fs::remove_all(dir_);
  }

  pid_t Spawn(std::vector<std::string> args) {
    args.insert(args.begin(), {"tandem", "--log-level", "warning"});
    const pid_t pid = fork();
    if (pid == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      freopen("/dev/null", "w", stderr);
      execv(TANDEM_BINARY, argv.data());
      _exit(127);
    }
    children_.push_back(pid);
    return pid;
  }

  pid_t StartActor(const std::string& pool, int index) {
    const std::string ready = absl::StrCat(dir_, "/", pool, index);
    const pid_t pid = Spawn({"actor", "--pool", pool, "--coordinator", address_, "--ready-file", ready});
    EXPECT_FALSE(AwaitLine(ready).empty());
    return pid;
  }

  std::string WriteJob(int steps) {
    const std::string path = dir_ + "/job.json";
    std::ofstream(path) << absl::StrCat(R"({
  "name": "cluster",
  "data": {"shapes": {"train_samples": 256, "eval_samples": 8}, "max_text_tokens": 12},
  "vision": {"model": {"preset": "vit-tiny"}, "engine": {"optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}},
  "llm": {"model": {"preset": "llm-tiny"}, "engine": {"optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}},
  "schedule": {"global_batch": 8, "steps": )", steps, R"(}
})");
    return path;
  }

  std::string dir_;
  std::string address_;
  pid_t coordinator_ = -1;
  std::vector<pid_t> children_;
};

TEST_F(ClusterTest, SubmittedJobWaitsForItsActorsThenSucceeds) {
  const std::string job = WriteJob(5);
  const Outcome submitted = Tandem(absl::StrCat("submit ", job, " --coordinator ", address_, " --threads 1"));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const std::string id = submitted.output.substr(0, submitted.output.find('\n'));
  EXPECT_EQ(id, "job-000001");
  const Outcome waiting = Tandem(absl::StrCat("status ", id, " --coordinator ", address_));
  EXPECT_THAT(waiting.output, HasSubstr("QUEUED: waiting for 1 actors of pool 'vision' (0 free of 0 registered)"));

  StartActor("vision", 0);
  StartActor("llm", 0);
  const Outcome actors = Tandem(absl::StrCat("actors --coordinator ", address_));
  EXPECT_THAT(actors.output, HasSubstr("vision-0"));
  EXPECT_THAT(actors.output, HasSubstr("llm-0"));

  const Outcome followed = Tandem(absl::StrCat("logs ", id, " -f --coordinator ", address_));
  EXPECT_EQ(followed.exit_code, 0) << followed.output;
  EXPECT_THAT(followed.output, HasSubstr("SUCCEEDED"));
  const Outcome jobs = Tandem(absl::StrCat("jobs --coordinator ", address_));
  EXPECT_THAT(jobs.output, HasSubstr("job-000001   cluster"));
  EXPECT_THAT(jobs.output, HasSubstr("SUCCEEDED"));
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "state/jobs" / id / "summary.json"));
}

TEST_F(ClusterTest, BadSpecIsRejectedAtSubmitAndNothingIsQueued) {
  const std::string path = dir_ + "/bad.json";
  std::ofstream(path) << R"({"name": "bad", "data": {"shapes": {}}, "schedule": {"global_batch": 0}})";
  const Outcome submitted = Tandem(absl::StrCat("submit ", path, " --coordinator ", address_));
  EXPECT_EQ(submitted.exit_code, 2);
  EXPECT_THAT(submitted.output, HasSubstr("schedule.global_batch"));
  const Outcome jobs = Tandem(absl::StrCat("jobs --coordinator ", address_, " --output json"));
  EXPECT_THAT(jobs.output, ::testing::Not(HasSubstr("job-")));
}

TEST_F(ClusterTest, DeadActorFailsTheJobNamingIt) {
  StartActor("vision", 0);
  const pid_t llm = StartActor("llm", 0);
  const std::string job = WriteJob(100000);
  const Outcome submitted = Tandem(absl::StrCat("submit ", job, " --coordinator ", address_, " --threads 1"));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  // Let it train a little, then kill the LLM actor without warning.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline && Tandem(absl::StrCat("status job-000001 --coordinator ", address_)).output.find(
                                        "RUNNING") == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(llm, SIGKILL);
  const Outcome followed = Tandem(absl::StrCat("logs job-000001 -f --coordinator ", address_));
  EXPECT_THAT(followed.output, HasSubstr("FAILED"));
  EXPECT_THAT(followed.output, HasSubstr("llm-0"));
}

}  // namespace
}  // namespace tandem
