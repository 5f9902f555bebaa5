// Tests for actor/actor_service.cc's ordering of RunStep: the coordinator sends an actor's next
// step while the current one runs, so a step that arrives early waits for its turn, a step after a
// failed one is refused with ABORTED, and a Release ends a waiting step. A real gRPC server on
// 127.0.0.1 serves the service over a scripted Worker.
#include "actors/actor_service.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "actors/command_thread.h"
#include "jobspec/job_spec_proto.h"
#include "proto/tandem/v1/actor.grpc.pb.h"
#include "rpc/channel.h"
#include "transport/inbox.h"

namespace tandem::actors {
namespace {

constexpr char kJob[] = "job-000001";
constexpr char kRunDir[] = "/tmp/tandem-actor-service-test/run";
constexpr char kSpec[] =
    R"({"name": "t", "data": {"shapes": {}}, "vision": {"actors": 1}, "llm": {"actors": 1}})";

// Runs steps in order and records them; step `fail_at` fails. A step waits until the test lets it
// finish (Finish), so a test can hold step 1 while step 2 arrives.
class ScriptedWorker final : public Worker {
 public:
  absl::StatusOr<AssignResult> Assign(const Assignment& assignment, std::shared_ptr<KeyValueStore>,
                                      std::shared_ptr<transport::Transport>) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++assigns_;
    changed_.notify_all();
    if (hold_assign_) {
      // A stage still being built: it stops at its next check once the job is released.
      while (assignment.cancelled == nullptr || !assignment.cancelled->load()) {
        changed_.wait_for(lock, std::chrono::milliseconds(1));
      }
      return absl::CancelledError("stopped building");
    }
    job_ = assignment.job_id;
    step_ = 0;
    restore_ = assignment.restore;
    return AssignResult{};
  }
  absl::StatusOr<StepResult> RunStep(int64_t step) override {
    std::unique_lock<std::mutex> lock(mu_);
    started_.push_back(step);
    changed_.notify_all();
    changed_.wait(lock, [&] { return finishable_ >= step; });
    if (step != step_ + 1)
      return absl::FailedPreconditionError(absl::StrCat("step ", step, " out of order"));
    if (step == fail_at_) return absl::InternalError(absl::StrCat("step ", step, " broke"));
    step_ = step;
    return StepResult{};
  }
  absl::StatusOr<EvalCounts> Evaluate(int64_t) override { return EvalCounts{}; }
  absl::Status SaveCheckpoint(int64_t, const std::string& directory) override {
    std::lock_guard<std::mutex> lock(mu_);
    written_.push_back(directory);
    return absl::OkStatus();
  }
  absl::Status FinishCheckpoint(int64_t step, const std::string& directory) override {
    std::lock_guard<std::mutex> lock(mu_);
    written_.push_back(absl::StrCat("finish ", step, " ", directory));
    return absl::OkStatus();
  }
  absl::Status Export(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    written_.push_back(path);
    return absl::OkStatus();
  }
  // The directories and files SaveCheckpoint and Export were asked to write, in order (and
  // "finish STEP DIRECTORY" for FinishCheckpoint).
  std::vector<std::string> written() const {
    std::lock_guard<std::mutex> lock(mu_);
    return written_;
  }
  void Release() override {
    std::lock_guard<std::mutex> lock(mu_);
    job_.clear();
  }
  SnapshotHoldings HeldSnapshots(const std::string& job_id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return job_id == held_job_ ? held_ : SnapshotHoldings{};
  }
  void SetHeld(const std::string& job_id, SnapshotHoldings held) {
    std::lock_guard<std::mutex> lock(mu_);
    held_job_ = job_id;
    held_ = std::move(held);
  }
  MemoryRestore restore() const {
    std::lock_guard<std::mutex> lock(mu_);
    return restore_;
  }
  WorkerStatus status() const override {
    std::lock_guard<std::mutex> lock(mu_);
    WorkerStatus s;
    s.job_id = job_;
    s.step = step_;
    return s;
  }

  // Assign builds until its job is released (Assignment::cancelled).
  void HoldAssign() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_assign_ = true;
  }
  // Waits (10 s at most) until Assign was entered `count` times in all.
  bool AwaitAssigns(int count) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] { return assigns_ >= count; });
  }

  void FailAt(int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_at_ = step;
  }
  // Lets steps up to `step` finish.
  void Finish(int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    finishable_ = step;
    changed_.notify_all();
  }
  std::vector<int64_t> started() const {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::string job_;
  int64_t step_ = 0;
  int64_t fail_at_ = -1;
  int64_t finishable_ = 1 << 30;
  bool hold_assign_ = false;
  int assigns_ = 0;
  std::vector<int64_t> started_;
  std::vector<std::string> written_;
  MemoryRestore restore_;
  std::string held_job_;
  SnapshotHoldings held_;
};

class ActorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<ActorService>(&worker_, std::make_shared<transport::Inbox>(),
                                              "127.0.0.1:1",
                                              /*local_links=*/true, stuck_grace_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    stub_ = v1::Actor::NewStub(rpc::MakeChannel(absl::StrCat("127.0.0.1:", port)));
    const grpc::Status status = AssignJob(kJob);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  grpc::Status AssignJob(const std::string& job, const MemoryRestore& restore = {}) {
    v1::AssignJobRequest request;
    if (restore.step > 0) {
      request.mutable_restore()->set_step(restore.step);
      request.mutable_restore()->set_from_peer(restore.from_peer);
      for (const int peer : restore.send_to) request.mutable_restore()->add_send_to(peer);
    }
    request.set_job_id(job);
    *request.mutable_spec() = jobspec::ParseJobSpecProto(kSpec, "test spec").value();
    request.set_role(v1::ROLE_VISION);
    request.set_rank(0);
    request.set_group_size(1);
    request.mutable_peers()->add_addresses("127.0.0.1:2");
    request.set_run_dir(kRunDir);
    request.set_timeout_ms(command_timeout_ms_);
    v1::AssignJobResponse response;
    return stub_->AssignJob(Context(10000).get(), request, &response);
  }
  void TearDown() override { server_->Shutdown(std::chrono::system_clock::now()); }

  static std::unique_ptr<grpc::ClientContext> Context(int ms) {
    return rpc::ContextWithTimeout(std::chrono::milliseconds(ms));
  }
  grpc::Status RunStep(int64_t step, int timeout_ms = 10000) {
    v1::RunStepRequest request;
    request.set_job_id(kJob);
    request.set_step(step);
    v1::RunStepResponse response;
    return stub_->RunStep(Context(timeout_ms).get(), request, &response);
  }
  grpc::Status Release(const std::string& job = kJob, const std::string& reason = "test") {
    v1::ReleaseRequest request;
    request.set_job_id(job);
    request.set_reason(reason);
    v1::ReleaseResponse response;
    return stub_->Release(Context(10000).get(), request, &response);
  }
  // Waits until `count` RunStep calls wait for their predecessor.
  void AwaitWaiting(int count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (service_->steps_waiting_for_turn() < count &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    ASSERT_EQ(service_->steps_waiting_for_turn(), count);
  }
  // Waits until the worker started `count` steps.
  void AwaitStarted(size_t count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (worker_.started().size() < count && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    ASSERT_GE(worker_.started().size(), count);
  }

  int64_t command_timeout_ms_ = 10000;  // the assignment's
  std::chrono::milliseconds stuck_grace_{30000};
  ScriptedWorker worker_;
  std::unique_ptr<ActorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Actor::Stub> stub_;
};

TEST_F(ActorServiceTest, AStepSentAheadWaitsForItsPredecessor) {
  worker_.Finish(0);  // hold step 1 once it started
  auto first = std::async(std::launch::async, [&] { return RunStep(1); });
  AwaitStarted(1);
  // Step 3 comes before step 2: both wait while step 1 runs, then run in order.
  auto third = std::async(std::launch::async, [&] { return RunStep(3); });
  AwaitWaiting(1);  // step 3 arrived first and waits for step 2
  auto second = std::async(std::launch::async, [&] { return RunStep(2); });
  worker_.Finish(3);
  EXPECT_TRUE(first.get().ok());
  const grpc::Status s2 = second.get(), s3 = third.get();
  EXPECT_TRUE(s2.ok()) << s2.error_message();
  EXPECT_TRUE(s3.ok()) << s3.error_message();
  EXPECT_EQ(worker_.started(), (std::vector<int64_t>{1, 2, 3}));
}

// NOTE [Snapshots in memory]: what the worker holds of a job is answered, and a restart's restore
// reaches the worker as the coordinator sent it.
TEST_F(ActorServiceTest, ItAnswersWhatItHoldsOfAJobAndPassesARestoreOn) {
  SnapshotHoldings held;
  held.holds = true;
  held.role = Role::kLlm;
  held.rank = 1;
  held.group_size = 2;
  held.peer_group_size = 3;
  held.own_steps = {4, 6};
  held.copies = {{1, 6}};
  held.bytes = 1234;
  worker_.SetHeld("job-000009", held);
  v1::HeldSnapshotsRequest request;
  request.set_job_id("job-000009");
  v1::HeldSnapshotsResponse response;
  ASSERT_TRUE(stub_->HeldSnapshots(Context(10000).get(), request, &response).ok());
  EXPECT_TRUE(response.holds());
  EXPECT_EQ(response.role(), v1::ROLE_LLM);
  EXPECT_EQ(response.rank(), 1);
  EXPECT_EQ(response.group_size(), 2);
  EXPECT_EQ(response.peer_group_size(), 3);
  EXPECT_EQ(std::vector<int64_t>(response.own_steps().begin(), response.own_steps().end()),
            (std::vector<int64_t>{4, 6}));
  ASSERT_EQ(response.copies().size(), 1u);
  EXPECT_EQ(response.copies().at(1), 6);
  EXPECT_EQ(response.bytes(), 1234);
  request.set_job_id("job-000010");
  ASSERT_TRUE(stub_->HeldSnapshots(Context(10000).get(), request, &response).ok());
  EXPECT_FALSE(response.holds());

  ASSERT_TRUE(Release().ok());
  const MemoryRestore restore{6, 2, {0, 2}};
  ASSERT_TRUE(AssignJob(kJob, restore).ok());
  EXPECT_EQ(worker_.restore(), restore);
}

TEST_F(ActorServiceTest, AStepAfterAFailedOneIsAborted) {
  worker_.FailAt(1);
  worker_.Finish(0);
  auto first = std::async(std::launch::async, [&] { return RunStep(1); });
  AwaitStarted(1);
  auto second = std::async(std::launch::async, [&] { return RunStep(2); });
  worker_.Finish(2);
  const grpc::Status s1 = first.get(), s2 = second.get();
  EXPECT_EQ(s1.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(s1.error_message(), "step 1 broke");
  EXPECT_EQ(s2.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(s2.error_message(), "step 2 not run: an earlier step of job job-000001 failed");
  EXPECT_EQ(worker_.started(), (std::vector<int64_t>{1}));
}

TEST_F(ActorServiceTest, ReleaseEndsAStepWaitingForItsTurn) {
  // Step 2 without step 1: it waits until the job is released, then fails naming the job.
  auto waiting = std::async(std::launch::async, [&] { return RunStep(2, 60000); });
  AwaitWaiting(1);
  ASSERT_TRUE(Release().ok());
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const grpc::Status status = waiting.get();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(status.error_message(), "actor has no job (asked for job-000001)");
  EXPECT_TRUE(worker_.started().empty());
}

// `tandem cancel` while the actor still builds the job: the release answers at once, the building
// stops at its next check, AssignJob answers CANCELLED with the release's reason, and the actor is
// free for the next job.
TEST_F(ActorServiceTest, AReleaseStopsAnAssignmentBeingBuilt) {
  ASSERT_TRUE(Release().ok());
  worker_.HoldAssign();
  auto building = std::async(std::launch::async, [&] { return AssignJob("job-000002"); });
  ASSERT_TRUE(worker_.AwaitAssigns(2));
  ASSERT_TRUE(Release("job-000002", "cancelled by request").ok());
  ASSERT_EQ(building.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const grpc::Status status = building.get();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(status.error_message(),
            "job-000002 was released while this actor built it: cancelled by request");
  EXPECT_EQ(worker_.status().job_id, "");
  // A release of another job leaves an assignment alone.
  ASSERT_TRUE(Release("job-000009").ok());
}

TEST_F(ActorServiceTest, AStepWhosePredecessorNeverComesTimesOut) {
  const grpc::Status status = RunStep(2, 500);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  EXPECT_TRUE(worker_.started().empty());
}

TEST_F(ActorServiceTest, ItWritesOnlyInsideTheJobsRunDirectory) {
  auto save = [&](const std::string& directory) {
    v1::SaveCheckpointRequest request;
    request.set_job_id(kJob);
    request.set_directory(directory);
    v1::SaveCheckpointResponse response;
    return stub_->SaveCheckpoint(Context(10000).get(), request, &response);
  };
  auto export_to = [&](const std::string& path) {
    v1::ExportRequest request;
    request.set_job_id(kJob);
    request.set_path(path);
    v1::ExportResponse response;
    return stub_->Export(Context(10000).get(), request, &response);
  };
  const std::string run_dir = kRunDir;
  EXPECT_TRUE(save(run_dir + "/checkpoints/step-000004").ok());
  EXPECT_TRUE(export_to(run_dir + "/llm.safetensors").ok());
  const grpc::Status database = export_to("/var/lib/tandem/tandem.db");
  EXPECT_EQ(database.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(database.error_message(),
            "export path /var/lib/tandem/tandem.db is outside the job's run directory " + run_dir +
                ": an actor writes nowhere else");
  EXPECT_EQ(export_to(run_dir + "/../tandem.db").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(save("/etc").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // The second half of an asynchronous save reaches the worker with its step and directory.
  v1::FinishCheckpointRequest finish;
  finish.set_job_id(kJob);
  finish.set_step(4);
  finish.set_directory(run_dir + "/checkpoints/step-000004");
  v1::FinishCheckpointResponse finished;
  EXPECT_TRUE(stub_->FinishCheckpoint(Context(10000).get(), finish, &finished).ok());
  finish.set_job_id("another-job");
  EXPECT_EQ(stub_->FinishCheckpoint(Context(10000).get(), finish, &finished).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(
      worker_.written(),
      (std::vector<std::string>{run_dir + "/checkpoints/step-000004", run_dir + "/llm.safetensors",
                                "finish 4 " + run_dir + "/checkpoints/step-000004"}));
}

// A command timeout of 300 ms and no grace: a step that never returns makes the actor stuck.
class StuckActorTest : public ActorServiceTest {
 protected:
  StuckActorTest() {
    command_timeout_ms_ = 300;
    stuck_grace_ = std::chrono::milliseconds(0);
  }
};

TEST_F(StuckActorTest, ACommandRunningPastTheCommandTimeoutMakesTheActorStuckUntilItReturns) {
  EXPECT_EQ(service_->Stuck(), std::nullopt);
  worker_.Finish(0);  // step 1 starts and does not return
  std::thread step([&] { RunStep(1, 60000).error_code(); });
  AwaitStarted(1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!service_->Stuck() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::optional<std::string> stuck = service_->Stuck();
  ASSERT_TRUE(stuck.has_value());
  EXPECT_THAT(*stuck, ::testing::MatchesRegex("stuck: RunStep 1 has run for [0-9]+ s, past the "
                                              "command timeout \\(0 s with the grace\\)"));
  worker_.Finish(1);
  step.join();
  EXPECT_EQ(service_->Stuck(), std::nullopt);
}

TEST(CommandThread, RunsCommandsFromManyThreadsOnOneThreadEachToCompletion) {
  CommandThread commands;
  std::mutex mu;
  std::vector<std::thread::id> ran_on;
  int running = 0, most_at_once = 0;
  std::vector<std::thread> callers;
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&] {
      commands.Run([&] {
        {
          std::lock_guard<std::mutex> lock(mu);
          ran_on.push_back(std::this_thread::get_id());
          most_at_once = std::max(most_at_once, ++running);
        }
        std::this_thread::yield();
        std::lock_guard<std::mutex> lock(mu);
        --running;
      });
      // Run returned: this caller's command has finished.
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_FALSE(ran_on.empty());
    });
  }
  for (auto& t : callers) t.join();
  ASSERT_EQ(ran_on.size(), 8u);
  for (const auto& id : ran_on) EXPECT_EQ(id, ran_on.front());
  EXPECT_NE(ran_on.front(), std::this_thread::get_id());
  EXPECT_EQ(most_at_once, 1);
}

TEST(CommandThread, APostedCommandRunsAfterTheOneBeforeItOnTheSameThread) {
  CommandThread commands;
  std::mutex mu;
  std::condition_variable released;
  bool go = false;
  std::vector<std::pair<char, std::thread::id>> ran;
  const CommandThread::Ticket first = commands.Post([&] {
    std::unique_lock<std::mutex> lock(mu);
    released.wait(lock, [&] { return go; });
    ran.emplace_back('a', std::this_thread::get_id());
  });
  const CommandThread::Ticket second = commands.Post([&] {
    std::lock_guard<std::mutex> lock(mu);
    ran.emplace_back('b', std::this_thread::get_id());
  });
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  released.notify_all();
  commands.Wait(second);  // the second returns only after the first
  ASSERT_EQ(ran.size(), 2u);
  EXPECT_EQ(ran[0].first, 'a');
  EXPECT_EQ(ran[1].first, 'b');
  EXPECT_EQ(ran[0].second, ran[1].second);
  commands.Wait(first);  // already done: returns at once
}

}  // namespace
}  // namespace tandem::actors
