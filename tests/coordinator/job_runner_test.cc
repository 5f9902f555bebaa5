// The job runner (coordinator/job_runner.h) over scripted actors (fake_actor_client.h): the steps
// it sends, the run directory and job record it writes, and how an attempt ends when a step fails,
// an actor is lost or the job is cancelled. No process and no server: the job store is a SQLite
// file in a temporary directory, and each test waits for the runner's `done` with a deadline.
#include "coordinator/job_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_proto.h"
#include "rundir/checkpoint_dir.h"
#include "rundir/run_dir_lock.h"
#include "rundir/run_log.h"
#include "rundir/summary.h"
#include "tests/coordinator/fake_actor_client.h"

namespace tandem::coordinator {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::chrono::minutes kDeadline{2};
constexpr int64_t kGlobalBatch = 8;

std::string MakeTempDir() {
  char pattern[] = "/tmp/tandem-job-runner-XXXXXX";
  return std::string(mkdtemp(pattern));
}

// A job of `vision` x `llm` actors; `extra` adds top-level keys (a leading comma and the pairs).
std::string Spec(int vision, int llm, int64_t steps, int64_t eval_every, int64_t checkpoint_every,
                 int64_t max_restarts, const std::string& resume_from = "",
                 int64_t snapshot_every = 0) {
  const std::string user = absl::StrCat(
      R"({"name": "runner-test", "data": {"shapes": {}}, "vision": {"actors": )", vision,
      R"(}, "llm": {"actors": )", llm, R"(}, "schedule": {"global_batch": )", kGlobalBatch,
      R"(, "steps": )", steps, R"(, "eval_every": )", eval_every, R"(, "checkpoint_every": )",
      checkpoint_every, R"(}, "failure": {"max_restarts": )", max_restarts,
      R"(, "snapshot_every": )", snapshot_every, "}",
      resume_from.empty() ? "" : absl::StrCat(R"(, "resume_from": ")", resume_from, R"(")"), "}");
  absl::StatusOr<jobspec::ResolvedJobSpec> resolved =
      jobspec::ResolveJobSpecJson(user, "test spec");
  EXPECT_TRUE(resolved.ok()) << resolved.status();
  return resolved.ok() ? resolved->json : "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class JobRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_dir_ = MakeTempDir();
    run_dir_ = state_dir_ + "/run";
    store_ = JobStore::Open(state_dir_).value();
  }
  void TearDown() override {
    store_.reset();
    std::error_code ignored;
    fs::remove_all(state_dir_, ignored);
  }

  // Registers `count` actors of `pool` at "<pool><n>:1" addresses (n from `first`).
  std::vector<std::string> AddActors(const std::string& pool, int count, int first = 0) {
    std::vector<std::string> addresses;
    for (int n = first; n < first + count; ++n) {
      addresses.push_back(absl::StrCat(pool, n, ":1"));
      EXPECT_TRUE(registry_.Register(pool, "cpu", addresses.back()).ok());
    }
    return addresses;
  }

  JobRecord CreateJob(const std::string& spec_json) {
    JobRecord job;
    job.name = "runner-test";
    job.spec_json = spec_json;
    job.run_dir = run_dir_;
    job.steps = jobspec::ParseJobSpecJson(spec_json, "spec").value().schedule.steps;
    return store_->CreateJob(job).value();
  }

  // Reserves the job's actors, runs one attempt and waits for it to end; the job as stored.
  // `while_running` runs on the test's thread once the runner started.
  JobRecord RunAttempt(const std::string& job_id, int vision, int llm,
                       const std::function<void(JobRunner&)>& while_running = nullptr) {
    JobRecord job = store_->GetJob(job_id).value();
    auto actors = registry_.Reserve(job_id, {{"vision", vision}, {"llm", llm}});
    EXPECT_TRUE(actors.ok()) << actors.status();
    bool done = false;
    std::mutex mu;
    std::condition_variable ended;
    RunnerOptions options;
    options.command_timeout = std::chrono::milliseconds(4321);
    absl::StatusOr<jobspec::ResolvedJobSpec> spec =
        jobspec::ResolveJobSpecJson(job.spec_json, job.id);
    EXPECT_TRUE(spec.ok()) << spec.status();
    auto runner = std::make_unique<JobRunner>(
        job, std::make_shared<const jobspec::ResolvedJobSpec>(*std::move(spec)), (*actors)[0],
        (*actors)[1], store_.get(), &feeds_, &rendezvous_, &registry_, &metrics_, &fake_, options,
        [&](const std::string&) {
          std::lock_guard<std::mutex> lock(mu);
          done = true;
          ended.notify_all();
        });
    runner->Start();
    if (while_running) while_running(*runner);
    {
      std::unique_lock<std::mutex> lock(mu);
      EXPECT_TRUE(ended.wait_for(lock, kDeadline, [&] { return done; }))
          << "the attempt did not end";
    }
    runner.reset();  // joins
    return store_->GetJob(job_id).value();
  }

  // One attempt of job `id` whose LLM actor at `address` is lost in step 6, once step 5 is
  // recorded; the job as stored.
  JobRecord RunLosingAfterStep5(const std::string& id, const std::string& address) {
    fake_.HoldStep(address, 6);
    return RunAttempt(id, 1, 1, [&](JobRunner&) {
      ASSERT_TRUE(fake_.WaitForStep(address, 6));
      const auto deadline = std::chrono::steady_clock::now() + kDeadline;
      while (store_->GetJob(id).value().step < 5 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      fake_.Lose(address);
    });
  }

  // What the vision rank of a 1 x 1 job holds: its own snapshots of `own_steps`, and `copies`.
  static SnapshotHoldings VisionHolding(std::vector<int64_t> own_steps,
                                        std::map<int, int64_t> copies) {
    SnapshotHoldings held;
    held.holds = true;
    held.role = Role::kVision;
    held.group_size = held.peer_group_size = 1;
    held.own_steps = std::move(own_steps);
    held.copies = std::move(copies);
    return held;
  }

  std::string ActorId(const std::string& address) const {
    for (const ActorEntry& a : registry_.List()) {
      if (a.address == address) return a.id;
    }
    return "";
  }

  // The releases each address got, as "address: reason".
  std::vector<std::string> Releases() const {
    std::vector<std::string> out;
    for (const FakeActors::Call& c : fake_.Calls("Release")) {
      out.push_back(absl::StrCat(c.address, ": ", c.argument));
    }
    return out;
  }

  std::vector<int64_t> StepsSent(const std::string& address) const {
    std::vector<int64_t> steps;
    for (const FakeActors::Call& c : fake_.Calls("RunStep")) {
      if (c.address == address) steps.push_back(c.step);
    }
    std::sort(steps.begin(), steps.end());
    return steps;
  }

  std::string state_dir_;
  std::string run_dir_;
  std::unique_ptr<JobStore> store_;
  JobFeeds feeds_;
  MemoryStore rendezvous_;
  Registry registry_{std::chrono::minutes(10)};
  Metrics metrics_;
  FakeActors fake_;
};

TEST_F(JobRunnerTest, RunsEveryStepInOrderOnEveryMemberAndWritesTheRunDirectory) {
  const std::vector<std::string> vision = AddActors("vision", 2);
  const std::vector<std::string> llm = AddActors("llm", 2);
  fake_.SetEvalReply(llm[0], ActorEvalReply{4, 1, 20, 15});
  const std::string spec = Spec(2, 2, /*steps=*/4, /*eval_every=*/2, /*checkpoint_every=*/0, 0);
  const JobRecord job = RunAttempt(CreateJob(spec).id, 2, 2);

  EXPECT_EQ(job.state, JobState::kSucceeded) << job.message;
  EXPECT_EQ(job.message, "");
  EXPECT_EQ(job.attempt, 1);
  EXPECT_EQ(job.step, 4);
  EXPECT_DOUBLE_EQ(job.loss, 3.0 / 4);  // both LLM ranks' shares: (1 + 2) / step
  for (const std::string& address : {vision[0], vision[1], llm[0], llm[1]}) {
    EXPECT_THAT(fake_.StepsDone(address), ElementsAre(1, 2, 3, 4)) << address;
    EXPECT_THAT(StepsSent(address), ElementsAre(1, 2, 3, 4)) << address;
  }

  // AssignJob: place in the groups, peers, rendezvous keys, the actors' timeout, no resume.
  const auto assignments = fake_.Assignments();
  ASSERT_EQ(assignments.size(), 4u);
  for (const auto& [address, a] : assignments) {
    const bool is_vision = address.rfind("vision", 0) == 0;
    EXPECT_EQ(a.job_id, job.id);
    EXPECT_EQ(jobspec::JobSpecToJson(*a.spec), spec);
    EXPECT_EQ(a.role, is_vision ? Role::kVision : Role::kLlm);
    EXPECT_EQ(a.rank, address == vision[1] || address == llm[1] ? 1 : 0);
    EXPECT_EQ(a.group_size, 2);
    EXPECT_EQ(a.peers, is_vision ? llm : vision);
    EXPECT_EQ(a.rendezvous_prefix, absl::StrCat(job.id, "/1/", is_vision ? "vision" : "llm"));
    EXPECT_EQ(a.run_dir, run_dir_);
    EXPECT_EQ(a.timeout, std::chrono::milliseconds(4321));
    EXPECT_EQ(a.attempt, 1);
    EXPECT_EQ(a.resume_from, "");
  }

  // Evaluations after steps 2 and 4, the only checkpoint after the last, then the export.
  std::vector<int64_t> evaluated;
  for (const auto& c : fake_.Calls("Evaluate")) evaluated.push_back(c.step);
  std::sort(evaluated.begin(), evaluated.end());
  EXPECT_THAT(evaluated, ElementsAre(2, 2, 2, 2, 4, 4, 4, 4));
  const std::string checkpoint = run_dir_ + "/checkpoints/step-000004";
  for (const auto& c : fake_.Calls("SaveCheckpoint")) {
    EXPECT_EQ(c.step, 4);
    EXPECT_EQ(c.argument, checkpoint);
  }
  EXPECT_EQ(fake_.Calls("SaveCheckpoint").size(), 4u);
  absl::StatusOr<rundir::CheckpointInfo> marker = rundir::ReadCheckpoint(checkpoint);
  ASSERT_TRUE(marker.ok()) << marker.status();
  EXPECT_EQ(marker->step, 4);
  EXPECT_EQ(marker->vision_actors, 2);
  EXPECT_EQ(marker->llm_actors, 2);
  std::vector<std::string> exports;
  for (const auto& c : fake_.Calls("Export")) exports.push_back(c.address + " " + c.argument);
  std::sort(exports.begin(), exports.end());
  EXPECT_THAT(exports, ElementsAre(llm[0] + " " + run_dir_ + "/llm.safetensors",
                                   llm[1] + " " + run_dir_ + "/llm.safetensors",
                                   vision[0] + " " + run_dir_ + "/vision.safetensors",
                                   vision[1] + " " + run_dir_ + "/vision.safetensors"));
  EXPECT_THAT(Releases(), ::testing::UnorderedElementsAre(
                              vision[0] + ": job succeeded", vision[1] + ": job succeeded",
                              llm[0] + ": job succeeded", llm[1] + ": job succeeded"));

  // metrics.jsonl: a record per step from the members' answers, and the evaluations.
  EXPECT_EQ(ReadFile(run_dir_ + "/job.json"), spec + "\n");
  std::vector<rundir::StepRecord> steps;
  std::vector<rundir::EvalRecord> evals;
  ASSERT_TRUE(rundir::ReadMetrics(run_dir_ + "/metrics.jsonl", &steps, &evals).ok());
  ASSERT_EQ(steps.size(), 4u);
  for (int64_t s = 1; s <= 4; ++s) {
    const rundir::StepRecord& r = steps[s - 1];
    EXPECT_EQ(r.step, s);
    EXPECT_DOUBLE_EQ(r.loss, 3.0 / s);
    EXPECT_DOUBLE_EQ(r.lr, 0.01 / s);
    EXPECT_DOUBLE_EQ(r.vision_lr, 0.02 / s);
    EXPECT_DOUBLE_EQ(r.vision_grad_norm, 0.3);
    EXPECT_DOUBLE_EQ(r.llm_grad_norm, 0.4);
    EXPECT_DOUBLE_EQ(r.grad_norm, 0.5);
    EXPECT_GT(r.samples_per_s, 0);
    // Each rank's compute in rank order, the slowest over the mean, and the padding's share.
    EXPECT_THAT(r.llm_compute_s, ElementsAre(1.0, 2.0));
    EXPECT_THAT(r.vision_compute_s, ElementsAre(2.0, 4.0));
    EXPECT_DOUBLE_EQ(r.llm_imbalance, 2.0 / 1.5);
    EXPECT_DOUBLE_EQ(r.vision_imbalance, 4.0 / 3.0);
    // The planned work's, which each rank reports for its replica.
    EXPECT_DOUBLE_EQ(r.llm_planned_imbalance, 3.0 / 2.5);
    EXPECT_DOUBLE_EQ(r.vision_planned_imbalance, 1.0);
    EXPECT_DOUBLE_EQ(r.padding_waste, 30.0 / 200.0);
  }
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0].step, 2);
  EXPECT_EQ(evals[1].step, 4);
  EXPECT_DOUBLE_EQ(evals[1].caption_exact_match, 0.25);
  EXPECT_DOUBLE_EQ(evals[1].token_accuracy, 0.75);
  EXPECT_THAT(ReadFile(run_dir_ + "/loss.svg"), HasSubstr("<svg"));

  // summary.json, also in the job record.
  const std::string summary_json = ReadFile(run_dir_ + "/summary.json");
  EXPECT_EQ(summary_json, job.summary_json + "\n");
  absl::StatusOr<rundir::RunSummary> summary = rundir::ParseSummaryJson(summary_json);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->job_name, "runner-test");
  EXPECT_EQ(summary->run_dir, run_dir_);
  EXPECT_EQ(summary->steps, 4);
  EXPECT_EQ(summary->samples, 4 * kGlobalBatch);
  EXPECT_DOUBLE_EQ(summary->final_loss, 0.75);
  EXPECT_TRUE(summary->evaluated);
  EXPECT_DOUBLE_EQ(summary->caption_exact_match, 0.25);
  EXPECT_DOUBLE_EQ(summary->token_accuracy, 0.75);
  EXPECT_EQ(summary->vision_parameters, kVisionParameters);
  EXPECT_EQ(summary->llm_parameters, kLlmParameters);
  EXPECT_EQ(summary->vocab_size, kVocabSize);
  EXPECT_EQ(summary->last_checkpoint, checkpoint);

  // The event log, in order.
  std::vector<std::string> events;
  const std::vector<JobEventRecord> records = store_->Events(job.id).value();
  for (const JobEventRecord& e : records) events.push_back(e.text);
  ASSERT_GE(events.size(), 7u);
  EXPECT_EQ(events[0], "submitted");
  EXPECT_EQ(events[1], "RUNNING");
  EXPECT_THAT(events[2], HasSubstr("assigned: vision 2 x llm 2 actors; setup took "));
  EXPECT_EQ(events[3], "step 2: held-out exact match 0.250, token accuracy 0.750");
  EXPECT_EQ(events[4], "step 4: held-out exact match 0.250, token accuracy 0.750");
  EXPECT_EQ(events[5], "checkpoint " + checkpoint);
  EXPECT_EQ(events[6], "SUCCEEDED");
}

TEST_F(JobRunnerTest, WithoutAHeldOutSetNothingIsEvaluatedOrRecorded) {
  AddActors("vision", 1);
  AddActors("llm", 1);
  const JobRecord job = RunAttempt(CreateJob(Spec(1, 1, 3, 1, 0, 0)).id, 1, 1);
  EXPECT_EQ(job.state, JobState::kSucceeded) << job.message;
  EXPECT_EQ(fake_.Calls("Evaluate").size(), 6u);  // asked after every step; no samples answered
  std::vector<rundir::StepRecord> steps;
  std::vector<rundir::EvalRecord> evals;
  ASSERT_TRUE(rundir::ReadMetrics(run_dir_ + "/metrics.jsonl", &steps, &evals).ok());
  EXPECT_EQ(steps.size(), 3u);
  EXPECT_TRUE(evals.empty());
  EXPECT_FALSE(rundir::ParseSummaryJson(job.summary_json).value().evaluated);
}

TEST_F(JobRunnerTest, FailedStepFailsTheJobNamingItsMemberAndReleasesEveryone) {
  const std::vector<std::string> vision = AddActors("vision", 1);
  const std::vector<std::string> llm = AddActors("llm", 2);
  const std::string failing = ActorId(llm[1]);
  fake_.FailStep(llm[1], 3, absl::ResourceExhaustedError("CUDA out of memory"));
  const JobRecord job = RunAttempt(CreateJob(Spec(1, 2, 6, 0, 0, 3)).id, 1, 2);

  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_EQ(job.message, absl::StrCat("step failed on ", failing, " (llm rank 1, ", llm[1],
                                      "): step 3: CUDA out of memory"));
  EXPECT_EQ(job.restarts, 0);  // no actor was lost: restarts do not apply
  EXPECT_LE(job.step, 2);      // step 2 is recorded once every member answered it
  for (const std::string& address : {vision[0], llm[0], llm[1]}) {
    EXPECT_THAT(Releases(), ::testing::Contains(address + ": job failed")) << address;
  }
  EXPECT_TRUE(fake_.Calls("Export").empty());
  EXPECT_FALSE(fs::exists(run_dir_ + "/summary.json"));
  for (const ActorEntry& a : registry_.List()) EXPECT_EQ(a.job_id, "") << a.id;
}

TEST_F(JobRunnerTest, DivergedLossFailsTheJobWithTheRunLoopsMessage) {
  AddActors("vision", 1);
  const std::vector<std::string> llm = AddActors("llm", 1);
  fake_.SetStepReply(llm[0], [](int64_t step) {
    ActorStepReply reply;
    reply.loss = step == 2 ? std::numeric_limits<double>::infinity() : 1.0;
    return reply;
  });
  const JobRecord job = RunAttempt(CreateJob(Spec(1, 1, 5, 0, 0, 0)).id, 1, 1);
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_EQ(job.message,
            "loss is inf at step 2: training diverged (lower the learning rate or enable "
            "gradient_clipping)");
  EXPECT_EQ(job.step, 1);
}

TEST_F(JobRunnerTest, LostActorWithRestartsLeftRestartsTheJob) {
  AddActors("vision", 1);
  const std::vector<std::string> llm = AddActors("llm", 1);
  const std::string lost = ActorId(llm[0]);
  fake_.HoldStep(llm[0], 3);
  const JobRecord job = RunAttempt(CreateJob(Spec(1, 1, 6, 0, 2, 2)).id, 1, 1, [&](JobRunner& r) {
    ASSERT_TRUE(fake_.WaitForStep(llm[0], 3));
    r.ActorLost(lost, "stopped sending heartbeats");
    fake_.Lose(llm[0]);  // its step ends as a dead actor's would, at its deadline
  });
  EXPECT_EQ(job.state, JobState::kRestarting);
  EXPECT_EQ(job.restarts, 1);
  EXPECT_EQ(job.message,
            absl::StrCat(lost, " (llm rank 0, ", llm[0],
                         ") stopped sending heartbeats; cancelled; restart 1 of 2 "
                         "(failure.max_restarts) from ",
                         run_dir_, "/checkpoints/step-000002 once its actors are free"));
  // The lost actor is not released (it is gone); the others are.
  for (const std::string& release : Releases()) EXPECT_THAT(release, HasSubstr("vision0:1"));
  EXPECT_FALSE(Releases().empty());
}

TEST_F(JobRunnerTest, LostActorWithoutRestartsFailsTheJob) {
  AddActors("vision", 1);
  const std::vector<std::string> llm = AddActors("llm", 1);
  const std::string lost = ActorId(llm[0]);
  fake_.HoldStep(llm[0], 2);
  const JobRecord job = RunAttempt(CreateJob(Spec(1, 1, 4, 0, 0, 0)).id, 1, 1, [&](JobRunner& r) {
    ASSERT_TRUE(fake_.WaitForStep(llm[0], 2));
    r.ActorLost(lost, "died: killed by signal 9 (SIGKILL)");
    fake_.Lose(llm[0]);
  });
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_EQ(job.restarts, 0);
  EXPECT_EQ(job.message,
            absl::StrCat(lost, " (llm rank 0, ", llm[0],
                         ") died: killed by signal 9 (SIGKILL); cancelled; gave up after 0 "
                         "restarts (failure.max_restarts is 0)"));
}

TEST_F(JobRunnerTest, RestartResumesFromTheLastCompleteCheckpoint) {
  const std::vector<std::string> vision = AddActors("vision", 1);
  const std::vector<std::string> llm = AddActors("llm", 1);
  const std::string name = absl::StrCat(ActorId(llm[0]), " (llm rank 0, ", llm[0], ")");
  // The LLM actor dies when it starts step 3: its release fails too, so the runner finds it gone.
  fake_.LoseAt(llm[0], 3);
  const std::string id = CreateJob(Spec(1, 1, 6, 0, 2, 1)).id;
  const JobRecord first = RunAttempt(id, 1, 1);
  const size_t vision_steps_before = fake_.StepsDone(vision[0]).size();
  const std::string checkpoint = run_dir_ + "/checkpoints/step-000002";
  EXPECT_EQ(first.state, JobState::kRestarting);
  // Steps 3 and 4 were both sent (two lanes); the gone actor fails both, and the runner names
  // whichever answer reached it first.
  auto message = [&](int step) {
    return absl::StrCat("lost contact with ", name, " (", kUnreachable, "); step failed on ", name,
                        ": step ", step, ": ", kUnreachable,
                        "; restart 1 of 1 (failure.max_restarts) from ", checkpoint,
                        " once its actors are free");
  };
  EXPECT_THAT(first.message, ::testing::AnyOf(message(3), message(4)));
  EXPECT_EQ(ActorId(llm[0]), "") << "an unreachable actor leaves the registry";

  // A new LLM actor registers; the second attempt resumes after step 2.
  const std::vector<std::string> llm2 = AddActors("llm", 1, /*first=*/1);
  const JobRecord second = RunAttempt(id, 1, 1);
  EXPECT_EQ(second.state, JobState::kSucceeded) << second.message;
  EXPECT_EQ(second.attempt, 2);
  const auto assignments = fake_.Assignments();
  ASSERT_EQ(assignments.size(), 4u);
  for (size_t i = 2; i < 4; ++i) {
    EXPECT_EQ(assignments[i].second.resume_from, checkpoint);
    EXPECT_EQ(assignments[i].second.attempt, 2);
    EXPECT_EQ(assignments[i].second.rendezvous_prefix.rfind(id + "/2/", 0), 0u);
  }
  const std::vector<int64_t> vision_steps = fake_.StepsDone(vision[0]);
  ASSERT_GE(vision_steps_before, 2u);
  EXPECT_EQ(vision_steps[0], 1);
  EXPECT_EQ(vision_steps[1], 2);
  EXPECT_THAT(std::vector<int64_t>(vision_steps.begin() + vision_steps_before, vision_steps.end()),
              ElementsAre(3, 4, 5, 6));
  EXPECT_THAT(fake_.StepsDone(llm2[0]), ElementsAre(3, 4, 5, 6));

  std::vector<rundir::StepRecord> steps;
  std::vector<rundir::EvalRecord> evals;
  ASSERT_TRUE(rundir::ReadMetrics(run_dir_ + "/metrics.jsonl", &steps, &evals).ok());
  std::vector<int64_t> recorded;
  for (const rundir::StepRecord& r : steps) recorded.push_back(r.step);
  EXPECT_THAT(recorded, ElementsAre(1, 2, 3, 4, 5, 6));
  const rundir::RunSummary summary = rundir::ParseSummaryJson(second.summary_json).value();
  EXPECT_EQ(summary.steps, 6);
  EXPECT_EQ(summary.samples, 6 * kGlobalBatch);  // the job's, not only the second attempt's
  EXPECT_EQ(summary.last_checkpoint, run_dir_ + "/checkpoints/step-000006");
  bool resumed_event = false;
  const std::vector<JobEventRecord> records = store_->Events(id).value();
  for (const JobEventRecord& e : records) {
    resumed_event |= e.text == absl::StrCat("resumed from ", checkpoint,
                                            " at step 2 (written by vision 1 x llm 1 actors)");
  }
  EXPECT_TRUE(resumed_event);
}

// failure.snapshot_every 2, a checkpoint every 3 steps: the LLM actor is lost at step 6. The
// restart asks the actors what they hold; the vision actor kept its own state of steps 2 and 4 and
// the LLM rank's copy of step 4, the new LLM actor nothing: the attempt resumes at step 4 from
// memory (newer than the checkpoint of step 3), the vision actor restoring its own and sending the
// copy, the new one receiving it; metrics.jsonl is cut back to step 4 and every step is recorded
// once. Without the copy the next restart resumes from the checkpoint, saying why.
TEST_F(JobRunnerTest, RestartResumesFromMemoryWhereEveryRanksStateIsHeldElseFromDisk) {
  const std::vector<std::string> vision = AddActors("vision", 1);
  const std::vector<std::string> llm = AddActors("llm", 1);
  const std::string id = CreateJob(Spec(1, 1, 8, 0, 3, 2, "", /*snapshot_every=*/2)).id;
  const std::string checkpoint = run_dir_ + "/checkpoints/step-000003";
  const JobRecord first = RunLosingAfterStep5(id, llm[0]);
  EXPECT_EQ(first.state, JobState::kRestarting);
  EXPECT_THAT(first.message, HasSubstr("restart 1 of 2 (failure.max_restarts) from the snapshots "
                                       "in memory where every rank's state is held, else " +
                                       checkpoint));
  SnapshotHoldings held = VisionHolding({2, 4}, {{0, 4}});
  fake_.SetHeldSnapshots(vision[0], held);
  const std::vector<std::string> llm2 = AddActors("llm", 1, /*first=*/1);
  fake_.HoldStep(llm2[0], 7);
  const JobRecord second = RunAttempt(id, 1, 1, [&](JobRunner&) {
    ASSERT_TRUE(fake_.WaitForStep(llm2[0], 7));
    fake_.Lose(llm2[0]);
  });
  EXPECT_EQ(second.state, JobState::kRestarting);
  auto assignments = fake_.Assignments();
  ASSERT_EQ(assignments.size(), 4u);
  for (size_t i = 2; i < 4; ++i) {
    const ActorAssignment& a = assignments[i].second;
    EXPECT_EQ(a.resume_from, checkpoint);  // for the data's tokenizer alone
    if (a.role == Role::kVision) {
      EXPECT_EQ(a.restore, (MemoryRestore{4, -1, {0}}));
    } else {
      EXPECT_EQ(a.restore, (MemoryRestore{4, 0, {}}));
    }
  }
  EXPECT_THAT(fake_.StepsDone(llm2[0]), ElementsAre(5, 6));
  std::vector<std::string> events;
  const auto texts = [&] {
    std::vector<std::string> out;
    const std::vector<JobEventRecord> records = store_->Events(id).value();
    for (const JobEventRecord& e : records) out.push_back(e.text);
    return out;
  };
  events = texts();
  EXPECT_EQ(fake_.Calls("HeldSnapshots").size(), 2u);
  EXPECT_THAT(events, ::testing::Contains("resumed from memory at step 4: llm rank 0 from vision "
                                          "rank 0's copy, the others from their own snapshots "
                                          "(failure.snapshot_every)"));

  // The third attempt: the vision actor holds no copy of the lost rank's state.
  held.copies.clear();
  fake_.SetHeldSnapshots(vision[0], held);
  const std::vector<std::string> llm3 = AddActors("llm", 1, /*first=*/2);
  const JobRecord third = RunAttempt(id, 1, 1);
  EXPECT_EQ(third.state, JobState::kSucceeded) << third.message;
  assignments = fake_.Assignments();
  ASSERT_EQ(assignments.size(), 6u);
  const std::string newest = run_dir_ + "/checkpoints/step-000006";
  for (size_t i = 4; i < 6; ++i) {
    EXPECT_EQ(assignments[i].second.restore.step, 0);
    EXPECT_EQ(assignments[i].second.resume_from, newest);
  }
  events = texts();
  EXPECT_THAT(events, ::testing::Contains("no step's state is whole in the actors' memory: the "
                                          "restart resumes from disk"));
  std::vector<rundir::StepRecord> steps;
  std::vector<rundir::EvalRecord> evals;
  ASSERT_TRUE(rundir::ReadMetrics(run_dir_ + "/metrics.jsonl", &steps, &evals).ok());
  std::vector<int64_t> recorded;
  for (const rundir::StepRecord& r : steps) recorded.push_back(r.step);
  EXPECT_THAT(recorded, ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
}

// A restore from memory that fails in the first step (the actors then hold nothing): no actor was
// lost, yet the job restarts, from its checkpoint, saying why.
TEST_F(JobRunnerTest, ARestoreFromMemoryThatFailsRestartsFromTheCheckpoint) {
  const std::vector<std::string> vision = AddActors("vision", 1);
  const std::vector<std::string> llm = AddActors("llm", 1);
  const std::string id = CreateJob(Spec(1, 1, 8, 0, 3, 2, "", /*snapshot_every=*/2)).id;
  const std::string checkpoint = run_dir_ + "/checkpoints/step-000003";
  const JobRecord first = RunLosingAfterStep5(id, llm[0]);
  ASSERT_EQ(first.state, JobState::kRestarting);
  const SnapshotHoldings held = VisionHolding({4}, {{0, 4}});
  fake_.SetHeldSnapshots(vision[0], held);
  const std::vector<std::string> llm2 = AddActors("llm", 1, /*first=*/1);
  fake_.FailStep(llm2[0], 5, absl::DataLossError("the copy of its state of step 4: bad CRC"));
  const JobRecord second = RunAttempt(id, 1, 1);
  EXPECT_EQ(second.state, JobState::kRestarting);
  EXPECT_THAT(second.message,
              HasSubstr("; the restore from memory at step 4 failed; restart 2 of 2 "
                        "(failure.max_restarts) from " +
                        checkpoint));
  fake_.SetHeldSnapshots(vision[0], SnapshotHoldings{});  // the actors dropped them
  const JobRecord third = RunAttempt(id, 1, 1);
  EXPECT_EQ(third.state, JobState::kSucceeded) << third.message;
  EXPECT_EQ(fake_.Assignments().back().second.resume_from, checkpoint);
  EXPECT_EQ(fake_.Assignments().back().second.restore.step, 0);
}

// The newest checkpoint turns out damaged (an actor cannot load it): the attempt marks it, says so,
// and the next resumes from the newest intact checkpoint instead of failing the job.
TEST_F(JobRunnerTest, ADamagedNewestCheckpointFallsBackToTheNewestIntactOne) {
  const std::vector<std::string> vision = AddActors("vision", 1);
  const std::vector<std::string> llm = AddActors("llm", 1);
  fake_.LoseAt(llm[0], 5);
  const std::string id = CreateJob(Spec(1, 1, 6, 0, 2, 2)).id;
  EXPECT_EQ(RunAttempt(id, 1, 1).state, JobState::kRestarting);

  // The actor that replaces the lost one cannot read step 4's shards.
  const std::string newest = run_dir_ + "/checkpoints/step-000004";
  const std::string intact = run_dir_ + "/checkpoints/step-000002";
  const std::vector<std::string> llm2 = AddActors("llm", 1, /*first=*/1);
  const std::string error =
      absl::StrCat("checkpoint: ", newest, "/llm/rank-0.safetensors: cannot read the header");
  fake_.FailLoading(llm2[0], newest, absl::DataLossError(error));
  const JobRecord second = RunAttempt(id, 1, 1);
  EXPECT_EQ(second.state, JobState::kRestarting);
  EXPECT_THAT(second.message, HasSubstr(error));
  EXPECT_THAT(second.message,
              HasSubstr(absl::StrCat(
                  newest, " is marked damaged; restart 2 of 2 (failure.max_restarts) from ", intact,
                  " once its actors are free")));
  EXPECT_THAT(ReadFile(newest + "/damaged"), HasSubstr(error));
  EXPECT_EQ(rundir::LatestCheckpoint(run_dir_)->directory, intact);

  const JobRecord third = RunAttempt(id, 1, 1);
  EXPECT_EQ(third.state, JobState::kSucceeded) << third.message;
  EXPECT_THAT(fake_.StepsDone(llm2[0]), ElementsAre(3, 4, 5, 6));
  std::vector<std::string> events;
  const std::vector<JobEventRecord> records = store_->Events(id).value();
  for (const JobEventRecord& e : records) events.push_back(e.text);
  EXPECT_THAT(events, ::testing::Contains(absl::StrCat("checkpoint ", newest,
                                                       " cannot be loaded: marked damaged")));
  EXPECT_THAT(events,
              ::testing::Contains(HasSubstr(absl::StrCat("resumed from ", intact, " at step 2"))));
}

// A checkpoint the spec's resume_from names is the user's, not the job's: a failure to load it
// fails the job and marks nothing.
TEST_F(JobRunnerTest, AResumeFromCheckpointThatCannotBeLoadedFailsTheJob) {
  const std::string other = MakeTempDir() + "/checkpoints/step-000002";
  std::filesystem::create_directories(other);
  ASSERT_TRUE(rundir::MarkCheckpointComplete({other, 2, 1, 1}).ok());
  const std::vector<std::string> vision = AddActors("vision", 1);
  const std::vector<std::string> llm = AddActors("llm", 1);
  const std::string error = absl::StrCat("checkpoint: ", other, "/llm: missing");
  fake_.FailLoading(llm[0], other, absl::DataLossError(error));
  const std::string id = CreateJob(Spec(1, 1, 6, 0, 2, 2, other)).id;
  const JobRecord job = RunAttempt(id, 1, 1);
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_THAT(job.message, HasSubstr(error));
  EXPECT_FALSE(std::filesystem::exists(other + "/damaged"));
}

// A billion steps with no evaluation or checkpoint before the end is one segment of the run: its
// answers are kept only until each step is recorded, not reserved up front (which once ended the
// coordinator with std::bad_alloc, and again after every restart).
TEST_F(JobRunnerTest, ABillionStepSegmentRunsWithoutReservingItsSteps) {
  const std::vector<std::string> vision = AddActors("vision", 1);
  const std::vector<std::string> llm = AddActors("llm", 1);
  fake_.HoldStep(vision[0], 3);
  const JobRecord job =
      RunAttempt(CreateJob(Spec(1, 1, 1000000000, 0, 0, 3)).id, 1, 1, [&](JobRunner& r) {
        ASSERT_TRUE(fake_.WaitForStep(vision[0], 3));
        r.Cancel("enough");
      });
  EXPECT_EQ(job.state, JobState::kCancelled);
  EXPECT_EQ(job.steps, 1000000000);
  EXPECT_THAT(StepsSent(vision[0]), ::testing::IsSupersetOf({1, 2, 3}));
}

// A run directory another job or process writes (its lock is held) is never written by a second:
// the attempt fails, naming it, before it touches a file there.
TEST_F(JobRunnerTest, ARunDirectoryInUseFailsTheAttemptAndIsLeftAlone) {
  AddActors("vision", 1);
  AddActors("llm", 1);
  fs::create_directories(run_dir_);
  absl::StatusOr<rundir::RunDirLock> other =
      rundir::RunDirLock::Acquire(run_dir_, "tandem run --colocated (other)");
  ASSERT_TRUE(other.ok()) << other.status();
  const JobRecord job = RunAttempt(CreateJob(Spec(1, 1, 4, 0, 0, 0)).id, 1, 1);
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_THAT(job.message, HasSubstr("run directory " + run_dir_ + " is in use by pid "));
  EXPECT_THAT(job.message,
              HasSubstr(": tandem run --colocated (other) (it holds " + run_dir_ + "/.lock)"));
  EXPECT_FALSE(fs::exists(run_dir_ + "/job.json"));
  EXPECT_TRUE(fake_.Calls("RunStep").empty());
}

TEST_F(JobRunnerTest, CancelStopsTheJobAndReleasesEveryMember) {
  const std::vector<std::string> vision = AddActors("vision", 1);
  const std::vector<std::string> llm = AddActors("llm", 1);
  fake_.HoldStep(vision[0], 2);
  const JobRecord job = RunAttempt(CreateJob(Spec(1, 1, 10, 0, 0, 3)).id, 1, 1, [&](JobRunner& r) {
    ASSERT_TRUE(fake_.WaitForStep(vision[0], 2));
    r.Cancel("cancelled by request");
  });
  EXPECT_EQ(job.state, JobState::kCancelled);
  EXPECT_EQ(job.message, "cancelled by request");
  EXPECT_EQ(job.restarts, 0);
  for (const std::string& address : {vision[0], llm[0]}) {
    EXPECT_THAT(Releases(), ::testing::Contains(address + ": cancelled by request")) << address;
  }
  EXPECT_LT(fake_.StepsDone(vision[0]).size(), 10u);
  EXPECT_TRUE(fake_.Calls("Export").empty());
  EXPECT_FALSE(fs::exists(run_dir_ + "/summary.json"));
}

}  // namespace
}  // namespace tandem::coordinator
