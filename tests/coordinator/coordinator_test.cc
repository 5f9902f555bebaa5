// The coordinator (coordinator/coordinator.h) over scripted actors (fake_actor_client.h): what it
// refuses at submit, one coordinator per state directory, a job whose pools are too small, and no
// call to an actor while the scheduling lock is held. No process and no server.
#include "coordinator/coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_proto.h"
#include "tests/coordinator/fake_actor_client.h"

namespace tandem::coordinator {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// Hands the coordinator clients of a FakeActors that the test keeps.
class SharedFakes final : public ActorClientFactory {
 public:
  explicit SharedFakes(FakeActors* fakes) : fakes_(fakes) {}
  std::unique_ptr<ActorClient> Connect(const std::string& address,
                                       const std::string& name) override {
    return fakes_->Connect(address, name);
  }

 private:
  FakeActors* fakes_;
};

v1::SubmitJobRequest Request(int vision, int llm, int64_t steps,
                             const std::string& name = "coordinator-test",
                             const std::string& vision_pool = "vision",
                             const std::string& llm_pool = "llm") {
  const std::string json = absl::StrCat(
      R"({"name": ")", name, R"(", "data": {"shapes": {}}, "vision": {"actors": )", vision,
      R"(, "pool": ")", vision_pool, R"("}, "llm": {"actors": )", llm, R"(, "pool": ")", llm_pool,
      R"("}, "schedule": {"global_batch": 8, "steps": )", steps, "}}");
  v1::SubmitJobRequest request;
  *request.mutable_spec() = jobspec::ParseJobSpecProto(json, "test spec").value();
  return request;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tandem-coordinator-XXXXXX";
    state_dir_ = mkdtemp(pattern);
  }
  void TearDown() override {
    coordinator_.reset();
    std::error_code ignored;
    fs::remove_all(state_dir_, ignored);
  }

  absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      std::chrono::milliseconds unplaceable_timeout = std::chrono::minutes(10),
      const std::string& holder = "coordinator under test") {
    CoordinatorOptions options;
    options.state_dir = state_dir_;
    options.heartbeat_interval = std::chrono::milliseconds(20);
    options.heartbeat_timeout = std::chrono::minutes(10);
    options.unplaceable_timeout = unplaceable_timeout;
    options.holder = holder;
    options.runner.command_timeout = std::chrono::seconds(30);
    return Coordinator::Create(options, std::make_unique<SharedFakes>(&fakes_));
  }

  void Start(std::chrono::milliseconds unplaceable_timeout = std::chrono::minutes(10)) {
    absl::StatusOr<std::unique_ptr<Coordinator>> created = Create(unplaceable_timeout);
    ASSERT_TRUE(created.ok()) << created.status();
    coordinator_ = *std::move(created);
  }

  void AddActors(const std::string& pool, int count) {
    for (int n = 0; n < count; ++n) {
      ASSERT_TRUE(coordinator_->registry().Register(pool, "cpu", absl::StrCat(pool, n, ":1")).ok());
    }
  }

  // Waits (2 minutes at most) until the job is in `state`.
  bool WaitForState(const std::string& job_id, JobState state) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (std::chrono::steady_clock::now() < deadline) {
      if (coordinator_->store().GetJob(job_id).value().state == state) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // One vision and one LLM actor, and a job of `steps` steps on them held in its first step.
  JobRecord StartHeldJob(std::chrono::milliseconds unplaceable_timeout, const std::string& name,
                         int64_t steps) {
    Start(unplaceable_timeout);
    AddActors("vision", 1);
    AddActors("llm", 1);
    fakes_.HoldStep("llm0:1", 1);
    absl::StatusOr<JobRecord> job = coordinator_->Submit(Request(1, 1, steps, name));
    EXPECT_TRUE(job.ok()) << job.status();
    EXPECT_TRUE(fakes_.WaitForStep("llm0:1", 1));
    return job.value_or(JobRecord{});
  }

  std::string state_dir_;
  FakeActors fakes_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(CoordinatorTest, ThreadsBeyondTheBoundAreRefusedAtSubmit) {
  Start();
  v1::SubmitJobRequest request = Request(1, 1, 4);
  request.set_threads(5000);
  absl::StatusOr<JobRecord> job = coordinator_->Submit(request);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(), "threads: 5000 is not between 0 (each actor's own) and 1024");
  request.set_threads(-1);
  EXPECT_EQ(coordinator_->Submit(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_threads(1024);
  EXPECT_TRUE(coordinator_->Submit(request).ok());
}

// A group whose estimated memory (jobspec/memory_estimate.h) no registered actor of its pool offers
// is refused at submit, naming where the bytes come from, and nothing is recorded; with room, or
// with no actor registered yet (each then checks at assignment), it is taken.
TEST_F(CoordinatorTest, AJobWhoseGroupCannotFitItsPoolsMemoryIsRefusedAtSubmit) {
  Start();
  const int64_t gib = int64_t{1} << 30;
  v1::SubmitJobRequest request = Request(2, 1, 4, "big-order");
  request.mutable_spec()->mutable_data()->mutable_shapes()->set_train_samples(
      300000000);  // 2.4 GB of order
  EXPECT_TRUE(coordinator_->Submit(request).ok()) << "no actors registered: not checked at submit";
  ASSERT_TRUE(coordinator_->registry().Register("vision", "cpu", "v0:1", gib).ok());
  ASSERT_TRUE(coordinator_->registry().Register("llm", "cpu", "l0:1", 4 * gib).ok());
  absl::StatusOr<JobRecord> job = coordinator_->Submit(request);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(job.status().message());
  EXPECT_THAT(message, ::testing::StartsWith(
                           "vision: needs an estimated 2.2 GiB on each actor: model states "));
  EXPECT_THAT(
      message,
      HasSubstr("data 2.2 GiB (data.shapes.train_samples: the order of 300000000 samples)"));
  EXPECT_THAT(
      message,
      HasSubstr("more than the 1.0 GiB of the largest of pool 'vision''s 1 registered actors"));
  ASSERT_EQ(coordinator_->store().ListJobs().value().size(), 1u);
  // One actor with room: the job may run (it waits for a second; an actor without room refuses
  // its part at assignment).
  ASSERT_TRUE(coordinator_->registry().Register("vision", "cpu", "v1:1", 4 * gib).ok());
  EXPECT_TRUE(coordinator_->Submit(request).ok());
  // A pool whose actors state no memory is not checked here.
  ASSERT_TRUE(coordinator_->registry().Register("small", "cpu", "s0:1", 0).ok());
  request.mutable_spec()->mutable_vision()->set_pool("small");
  EXPECT_TRUE(coordinator_->Submit(request).ok());
  EXPECT_EQ(coordinator_->registry().Register("vision", "cpu", "v3:1", -1).status().message(),
            "RegisterActor: memory_bytes must be >= 0, got -1");
}

// A submitted spec's paths are opened by actors wherever they run: a relative one is refused,
// naming the field, and nothing is recorded.
TEST_F(CoordinatorTest, ASpecWithARelativePathIsRefusedAtSubmit) {
  Start();
  v1::SubmitJobRequest request = Request(1, 1, 4, "relative");
  request.mutable_spec()->set_resume_from("runs/a/checkpoints/step-000002");
  absl::StatusOr<JobRecord> job = coordinator_->Submit(request);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()),
              ::testing::StartsWith(
                  "job spec: resume_from: \"runs/a/checkpoints/step-000002\" is relative; the "
                  "actors open it wherever they run"));
  EXPECT_TRUE(coordinator_->store().ListJobs().value().empty());
}

// `tandem cancel` of a job whose actors are still building it (a large model, a slow load) ends it
// at once: the coordinator stops waiting for the assignment and releases the actors, which stop
// building at their next check (tests/actors/actor_service_test.cc).
TEST_F(CoordinatorTest, CancelEndsAJobWhoseActorsAreStillBuildingIt) {
  Start();
  AddActors("vision", 1);
  AddActors("llm", 1);
  fakes_.HoldAssign("llm0:1");
  absl::StatusOr<JobRecord> job = coordinator_->Submit(Request(1, 1, 4, "slow-build"));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(fakes_.WaitForAssign("llm0:1", std::chrono::minutes(1)));
  ASSERT_TRUE(coordinator_->Cancel(job->id).ok());
  const bool cancelled = WaitForState(job->id, JobState::kCancelled);
  fakes_.UnholdAssign("llm0:1");  // so that a failure here ends the test instead of hanging it
  ASSERT_TRUE(cancelled) << coordinator_->store().GetJob(job->id).value().message;
  EXPECT_EQ(coordinator_->store().GetJob(job->id).value().message, "cancelled by request");
  bool released = false;
  for (const FakeActors::Call& call : fakes_.Calls("Release"))
    released = released || call.address == "llm0:1";
  EXPECT_TRUE(released) << "the actor building the job is told to stop";
}

TEST_F(CoordinatorTest, ASecondCoordinatorOnTheStateDirectoryRefusesNamingTheFirst) {
  Start();
  absl::StatusOr<std::unique_ptr<Coordinator>> second =
      Create(std::chrono::minutes(10), "the second");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()),
              MatchesRegex("state directory " + state_dir_ + " is in use by pid " +
                           std::to_string(::getpid()) +
                           " on host .* since .* UTC: coordinator under test \\(it holds " +
                           state_dir_ + "/coordinator.lock\\)"));
  coordinator_.reset();  // the lock goes with the first
  EXPECT_TRUE(Create().ok());
}

// <state>/jobs/job-000002 is the run directory the second job will get by default.
TEST_F(CoordinatorTest, ARunDirectoryInsideTheStateDirectoryIsRefusedAtSubmit) {
  Start();
  for (const std::string& inside :
       {state_dir_ + "/jobs/job-000002",
        state_dir_ + "/../" + fs::path(state_dir_).filename().string() + "/elsewhere",
        state_dir_}) {
    v1::SubmitJobRequest request = Request(1, 1, 4);
    request.set_run_dir(inside);
    absl::StatusOr<JobRecord> job = coordinator_->Submit(request);
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << inside;
    EXPECT_EQ(job.status().message(),
              absl::StrCat("run_dir: '", inside, "' is inside the coordinator's state directory ",
                           state_dir_, "; choose a directory outside it"));
  }
  v1::SubmitJobRequest beside = Request(1, 1, 4);
  beside.set_run_dir(state_dir_ +
                     "-run");  // a sibling whose name starts with the state directory's
  absl::StatusOr<JobRecord> job = coordinator_->Submit(beside);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->run_dir, state_dir_ + "-run");
  EXPECT_EQ(coordinator_->store().ListJobs().value().size(), 1u);
}

// The rendezvous store serves running jobs' keys, and drops them when the job ends.
TEST_F(CoordinatorTest, TheRendezvousStoreTakesOnlyKeysOfARunningJob) {
  const JobRecord running = StartHeldJob(std::chrono::minutes(10), "running", 2);
  const std::string key = running.id + "/1/vision/rank0";
  EXPECT_TRUE(coordinator_->CheckStoreKey(key).ok());
  ASSERT_TRUE(coordinator_->rendezvous().Set(key, "10.0.0.1:1").ok());
  const absl::Status stray = coordinator_->CheckStoreKey("job-999999/1/x");
  EXPECT_EQ(stray.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(stray.message(),
            "rendezvous store: key \"job-999999/1/x\" names no running job (keys are <job "
            "id>/<attempt>/...)");
  EXPECT_EQ(coordinator_->CheckStoreKey("no-slash\x1b[2J").message(),
            "rendezvous store: key \"no-slash\\x1b[2J\" names no running job (keys are <job "
            "id>/<attempt>/...)");
  EXPECT_EQ(coordinator_->CheckStoreKey(running.id + "/1/" + std::string(2000, 'k')).code(),
            absl::StatusCode::kOk)
      << "the store itself bounds a key's length";
  EXPECT_EQ(coordinator_->rendezvous().Set(running.id + "/1/" + std::string(2000, 'k'), "v").code(),
            absl::StatusCode::kInvalidArgument);
  fakes_.Unhold("llm0:1");
  ASSERT_TRUE(WaitForState(running.id, JobState::kSucceeded));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (coordinator_->CheckStoreKey(key).ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(coordinator_->CheckStoreKey(key).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(coordinator_->rendezvous().Check(key).value()) << "the job's keys went with it";
}

// A job whose pool nobody serves waits, saying why, while a later job on served pools runs.
TEST_F(CoordinatorTest, AJobForAnUnservedPoolDoesNotHoldLaterJobsOnOtherPools) {
  Start(std::chrono::minutes(10));
  AddActors("vision", 1);
  AddActors("llm", 1);
  absl::StatusOr<JobRecord> ghost =
      coordinator_->Submit(Request(1, 1, 4, "ghost", "vision", "ghost-llm"));
  ASSERT_TRUE(ghost.ok()) << ghost.status();
  absl::StatusOr<JobRecord> later = coordinator_->Submit(Request(1, 1, 2, "later"));
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_TRUE(WaitForState(later->id, JobState::kSucceeded));
  const JobRecord waiting = coordinator_->store().GetJob(ghost->id).value();
  EXPECT_EQ(waiting.state, JobState::kQueued);
  EXPECT_EQ(waiting.message,
            "waiting for more actors: pool 'ghost-llm' has 0 actors registered and the job needs 1 "
            "(it fails after "
            "600 s without them, --unplaceable-timeout)");
}

// Within a pool jobs start in submission order: a job waiting for busy actors holds its pools
// against later jobs, and only those pools.
TEST_F(CoordinatorTest, AJobWaitingForBusyActorsHoldsItsPoolsAndNoOthers) {
  const JobRecord first = StartHeldJob(std::chrono::minutes(10), "first", 2);
  AddActors("other-vision", 1);
  AddActors("other-llm", 1);
  AddActors("free-vision", 1);
  AddActors("free-llm", 1);
  absl::StatusOr<JobRecord> second = coordinator_->Submit(Request(1, 1, 2, "second"));
  // Behind the second for 'llm'; waiting, it holds 'other-vision' too, so the fourth waits behind
  // it.
  absl::StatusOr<JobRecord> third =
      coordinator_->Submit(Request(1, 1, 2, "third", "other-vision", "llm"));
  absl::StatusOr<JobRecord> fourth =
      coordinator_->Submit(Request(1, 1, 2, "fourth", "other-vision", "other-llm"));
  absl::StatusOr<JobRecord> fifth =
      coordinator_->Submit(Request(1, 1, 2, "fifth", "free-vision", "free-llm"));
  ASSERT_TRUE(second.ok() && third.ok() && fourth.ok() && fifth.ok());
  EXPECT_TRUE(WaitForState(fifth->id, JobState::kSucceeded));
  EXPECT_EQ(coordinator_->store().GetJob(fourth->id).value().message,
            absl::StrCat("queued behind ", third->id, " for pool 'other-vision'"));
  EXPECT_EQ(coordinator_->store().GetJob(second->id).value().message,
            "waiting for 1 actors of pool 'vision' (0 free of 1 registered) and 1 actors of pool "
            "'llm' (0 free of 1 "
            "registered)");
  const JobRecord behind = coordinator_->store().GetJob(third->id).value();
  EXPECT_EQ(behind.state, JobState::kQueued);
  EXPECT_EQ(behind.message, absl::StrCat("queued behind ", second->id, " for pool 'llm'"));
  fakes_.Unhold("llm0:1");
  EXPECT_TRUE(WaitForState(third->id, JobState::kSucceeded));
  EXPECT_TRUE(WaitForState(second->id, JobState::kSucceeded));
  EXPECT_TRUE(WaitForState(fourth->id, JobState::kSucceeded));
  EXPECT_LE(coordinator_->store().GetJob(second->id).value().started_at,
            coordinator_->store().GetJob(third->id).value().started_at)
      << "the second job started first";
  EXPECT_TRUE(WaitForState(first.id, JobState::kSucceeded));
}

TEST_F(CoordinatorTest, AJobForMoreActorsThanThePoolHasWaitsSayingSoThenFailsAndTheQueueMovesOn) {
  Start(std::chrono::milliseconds(300));
  AddActors("vision", 1);
  AddActors("llm", 1);
  absl::StatusOr<JobRecord> big = coordinator_->Submit(Request(1, 3, 4, "big"));
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->state, JobState::kQueued);
  EXPECT_EQ(big->message,
            "waiting for more actors: pool 'llm' has 1 actors registered and the job needs 3 (it "
            "fails after 0.3 s "
            "without them, --unplaceable-timeout)");
  absl::StatusOr<JobRecord> small = coordinator_->Submit(Request(1, 1, 2, "small"));
  ASSERT_TRUE(small.ok()) << small.status();
  ASSERT_TRUE(WaitForState(big->id, JobState::kFailed));
  EXPECT_THAT(coordinator_->store().GetJob(big->id).value().message,
              HasSubstr("pool 'llm' has 1 actors registered and the job needs 3, for 0.3 s "
                        "(--unplaceable-timeout)"));
  EXPECT_TRUE(WaitForState(small->id, JobState::kSucceeded));
}

// A job that ran before (a node pool being replaced took its actors) waits for them however long.
TEST_F(CoordinatorTest, ARestartingJobIsNeverTimedOutForWantOfActors) {
  std::string id;
  {
    std::unique_ptr<JobStore> store = JobStore::Open(state_dir_).value();
    JobRecord job;
    job.name = "interrupted";
    job.spec_json =
        jobspec::ResolveJobSpecJson(
            R"({"name": "interrupted", "data": {"shapes": {}}, "llm": {"actors": 2}, "schedule": {"global_batch": 8, "steps": 4}})",
            "spec")
            .value()
            .json;
    job.steps = 4;
    job = store->CreateJob(job).value();
    job.state = JobState::kRestarting;
    ASSERT_TRUE(store->UpdateJob(job).ok());
    id = job.id;
  }
  Start(std::chrono::milliseconds(0));
  AddActors("vision", 1);
  AddActors("llm", 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // many scheduling rounds
  const JobRecord job = coordinator_->store().GetJob(id).value();
  EXPECT_EQ(job.state, JobState::kRestarting);
  EXPECT_EQ(job.message,
            "waiting for more actors: pool 'llm' has 1 actors registered and the job needs 2");
}

TEST_F(CoordinatorTest, AJobWaitingForBusyActorsIsNeverTimedOut) {
  StartHeldJob(std::chrono::milliseconds(0), "first", 2);
  absl::StatusOr<JobRecord> second = coordinator_->Submit(Request(1, 1, 2, "second"));
  ASSERT_TRUE(second.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // many scheduling rounds
  EXPECT_EQ(coordinator_->store().GetJob(second->id).value().state, JobState::kQueued);
  fakes_.Unhold("llm0:1");
  EXPECT_TRUE(WaitForState(second->id, JobState::kSucceeded));
}

// A cancel whose Release calls hang (an actor that does not answer) must not hold the scheduling
// lock: a submit meanwhile returns at once.
TEST_F(CoordinatorTest, NoCallToAnActorIsMadeUnderTheSchedulingLock) {
  const JobRecord running = StartHeldJob(std::chrono::minutes(10), "running", 4);
  fakes_.HoldRelease("vision0:1");
  std::future<absl::StatusOr<JobRecord>> cancel =
      std::async(std::launch::async, [&] { return coordinator_->Cancel(running.id); });
  ASSERT_TRUE(fakes_.WaitForRelease("vision0:1", std::chrono::minutes(1)));
  std::future<absl::StatusOr<JobRecord>> submit = std::async(
      std::launch::async, [&] { return coordinator_->Submit(Request(1, 1, 2, "meanwhile")); });
  const bool submitted = submit.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  fakes_.UnholdRelease("vision0:1");
  fakes_.Unhold("llm0:1");
  ASSERT_TRUE(submitted) << "Submit waited for a Release";
  EXPECT_TRUE(submit.get().ok());
  EXPECT_TRUE(cancel.get().ok());
  EXPECT_TRUE(WaitForState(running.id, JobState::kCancelled));
}

}  // namespace
}  // namespace tandem::coordinator
