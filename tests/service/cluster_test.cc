// The service as separate long-running processes, driven through the CLI: a coordinator and actors
// started by hand, jobs submitted with `tandem submit`, watched with `status`, `jobs`, `actors`,
// and a job whose actor dies mid-run with no restarts left failing with a message that names the
// actor instead of hanging. The coordinator has the service's default heartbeat timeout (10 s),
// so an actor killed mid-run is found by the next call to it ("lost contact with ..."), never
// first by its silence.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/service/service_testing.h"
#include "tests/testing/http.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using testing::Outcome;
using testing::ProcessCluster;

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartCoordinator("127.0.0.1:0",
                              {"--metrics-listen", "127.0.0.1:0", "--heartbeat-timeout", "10"});
    ASSERT_FALSE(cluster_.address().empty());
    ASSERT_FALSE(cluster_.metrics_address().empty());
  }

  // A tiny job; `extra` adds top-level spec fields (a leading comma and the pairs).
  std::string WriteJob(int steps, const std::string& extra = "") {
    return cluster_.WriteFile("job.json", absl::StrCat(R"({
  "name": "cluster",
  "data": {"shapes": {"train_samples": 256, "eval_samples": 8}, "max_text_tokens": 12},
  "vision": {"model": {"preset": "vit-tiny"}, "engine": {"optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}},
  "llm": {"model": {"preset": "llm-tiny"}, "engine": {"optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}},
  "schedule": {"global_batch": 8, "steps": )",
                                                       steps, "}", extra, "\n}"));
  }

  ProcessCluster cluster_;
};
TEST_F(ClusterTest, SubmittedJobWaitsForItsActorsThenSucceeds) {
  const std::string job = WriteJob(5);
  const Outcome submitted = cluster_.Cli(absl::StrCat("submit ", job, " --threads 1"));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const std::string id = submitted.output.substr(0, submitted.output.find('\n'));
  EXPECT_EQ(id, "job-000001");
  // No actor has registered yet: submit says so after the id, and so does the job's status.
  const std::string too_few =
      "waiting for more actors: pool 'llm' has 0 actors registered and the job needs 1; pool "
      "'vision' has 0 actors "
      "registered and the job needs 1 (it fails after 600 s without them, --unplaceable-timeout)";
  EXPECT_THAT(submitted.output, HasSubstr("job-000001: " + too_few));
  const Outcome waiting = cluster_.Cli(absl::StrCat("status ", id));
  EXPECT_THAT(waiting.output, HasSubstr("QUEUED: " + too_few));

  cluster_.StartActor("vision");
  cluster_.StartActor("llm");
  const Outcome actors = cluster_.Cli("actors");
  EXPECT_THAT(actors.output, HasSubstr("vision-0"));
  EXPECT_THAT(actors.output, HasSubstr("llm-0"));

  const Outcome followed = cluster_.Cli(absl::StrCat("logs ", id, " -f"));
  EXPECT_EQ(followed.exit_code, 0) << followed.output;
  EXPECT_THAT(followed.output, HasSubstr("SUCCEEDED"));
  // --output json: one tandem.v1.JobEvent a line, then (with -f) the job; no progress line.
  const Outcome as_json = cluster_.Cli(absl::StrCat("logs ", id, " -f --output json"));
  EXPECT_EQ(as_json.exit_code, 0) << as_json.output;
  std::vector<nlohmann::json> lines;
  std::istringstream text(as_json.output);
  for (std::string line; std::getline(text, line);) {
    if (line.empty() || line[0] == '[') continue;  // the CLI's own log lines
    lines.push_back(nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false));
    ASSERT_FALSE(lines.back().is_discarded()) << "not JSON: " << line;
  }
  ASSERT_GE(lines.size(), 3u) << as_json.output;
  EXPECT_EQ(lines.front()["sequence"], "1");  // int64 as a JSON string, as protobuf prints it
  EXPECT_EQ(lines.front()["text"], "submitted");
  EXPECT_TRUE(lines.front()["time"].is_number());
  EXPECT_EQ(lines.back()["job_id"], id);
  EXPECT_EQ(lines.back()["state"], "JOB_STATE_SUCCEEDED");
  const Outcome jobs = cluster_.Cli("jobs");
  EXPECT_THAT(jobs.output, HasSubstr("job-000001   cluster"));
  EXPECT_THAT(jobs.output, HasSubstr("SUCCEEDED"));
  EXPECT_TRUE(std::filesystem::exists(cluster_.dir() + "/state/jobs/" + id + "/summary.json"));

  // /metrics counts it: five steps of eight samples, and the embeddings' gradients are exactly as
  // many bytes as the embeddings.
  const std::string metrics = testing::HttpGet(cluster_.metrics_address(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("tandem_jobs{state=\"succeeded\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("tandem_actors_alive{pool=\"vision\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("tandem_actors_alive{pool=\"llm\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("tandem_steps_total 5\n"));
  EXPECT_THAT(metrics, HasSubstr("tandem_samples_total 40\n"));
  EXPECT_THAT(metrics, ::testing::Not(HasSubstr("tandem_job_step{")));  // it ended
  const auto bytes = [&](const std::string& direction) {
    const std::string key = "tandem_transfer_bytes_total{direction=\"" + direction + "\"} ";
    const size_t at = metrics.find(key);
    return at == std::string::npos ? -1 : std::stoll(metrics.substr(at + key.size()));
  };
  EXPECT_GT(bytes("vision_to_llm"), 0) << metrics;
  EXPECT_EQ(bytes("vision_to_llm"), bytes("llm_to_vision")) << metrics;
}

TEST_F(ClusterTest, BadSpecIsRejectedAtSubmitAndNothingIsQueued) {
  const std::string path = cluster_.WriteFile(
      "bad.json", R"({"name": "bad", "data": {"shapes": {}}, "schedule": {"global_batch": 0}})");
  const Outcome submitted = cluster_.Cli(absl::StrCat("submit ", path));
  EXPECT_EQ(submitted.exit_code, 2);
  EXPECT_THAT(submitted.output, HasSubstr("schedule.global_batch"));
  const Outcome jobs = cluster_.Cli("jobs --output json");
  EXPECT_THAT(jobs.output, ::testing::Not(HasSubstr("job-")));
}

// A failure message quotes a data file's image path, which may hold anything: the CLI prints its
// control characters escaped, so no escape sequence reaches the terminal; `tandem jobs --prune`
// then forgets the failed job.
TEST_F(ClusterTest, MessagesReachTheTerminalEscapedAndEndedJobsCanBePruned) {
  cluster_.StartActor("vision");
  cluster_.StartActor("llm");
  cluster_.WriteFile("train.jsonl", "{\"image\": \"\\u001b[2Jgone.png\", \"text\": \"x\"}\n");
  const std::string job = cluster_.WriteFile("escape.json", R"({
  "name": "escape", "data": {"jsonl": {"train": "train.jsonl"}},
  "vision": {"model": {"preset": "vit-tiny"}}, "llm": {"model": {"preset": "llm-tiny"}},
  "schedule": {"global_batch": 8, "steps": 2}})");
  const Outcome run = cluster_.Cli(absl::StrCat("submit ", job, " --wait --threads 1"));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("\\x1b[2Jgone.png does not exist"));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr("\x1b")));
  const Outcome status = cluster_.Cli("status job-000001");
  EXPECT_THAT(status.output, HasSubstr("FAILED: "));
  EXPECT_THAT(status.output, HasSubstr("\\x1b[2Jgone.png"));
  EXPECT_THAT(status.output, ::testing::Not(HasSubstr("\x1b")));

  const Outcome pruned = cluster_.Cli("jobs --prune 0");
  EXPECT_EQ(pruned.exit_code, 0) << pruned.output;
  EXPECT_THAT(pruned.output,
              HasSubstr("job-000001\npruned 1 ended job (their run directories stay)"));
  EXPECT_THAT(cluster_.Cli("jobs").output, ::testing::Not(HasSubstr("job-000001")));
  EXPECT_EQ(cluster_.Cli("jobs --prune soon").exit_code, 2);
}

TEST_F(ClusterTest, DeadActorWithoutRestartsLeftFailsTheJobNamingIt) {
  cluster_.StartActor("vision");
  const pid_t llm = cluster_.StartActor("llm");
  const std::string job = WriteJob(10, R"(, "failure": {"max_restarts": 0})");
  // Let it train a little, hold it there, then kill the LLM actor without warning.
  cluster_.Hold("cluster", 3);
  const Outcome submitted = cluster_.Cli(absl::StrCat("submit ", job, " --threads 1"));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  ASSERT_TRUE(cluster_.AwaitHeld("job-000001", 3));
  cluster_.Kill(llm);
  cluster_.Release("cluster");  // its next step finds the actor gone
  const Outcome followed = cluster_.Cli("logs job-000001 -f");
  EXPECT_THAT(followed.output, HasSubstr("FAILED: lost contact with llm-0 (llm rank 0"));
  EXPECT_THAT(followed.output, HasSubstr("gave up after 0 restarts (failure.max_restarts is 0)"));
}

}  // namespace
}  // namespace tandem
