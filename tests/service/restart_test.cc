// Failures through the whole service, with real processes and real kills (docs/design.md §5): an
// actor killed with SIGKILL mid-job, the coordinator killed and started again on the same state
// dir, and a new job that starts from another job's checkpoint with other group sizes and ZeRO
// stage. With fp32 engines on CPU, the per-step losses after a restart equal an uninterrupted
// run's, and every step is recorded once.
//
// A job is killed mid-run at a known step however fast the machine trains: the coordinator holds it
// after a checkpoint (ProcessCluster::Hold, `--test-hold-dir`) until the test has acted, then the
// test releases it. Coordinators here have the service's default heartbeat timeout (10 s), so a
// killed actor is found by the next call to it ("lost contact with ..."), never first by its
// silence.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
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

constexpr int kSteps = 30;
constexpr int kCheckpointEvery = 5;

// A tiny fp32 job of kSteps steps with a checkpoint every kCheckpointEvery. `extra` adds top-level
// fields (a leading comma and the pairs).
std::string Spec(const std::string& name, int llm_actors, int stage,
                 const std::string& extra = "") {
  return testing::TinyJobSpec({name, kSteps, llm_actors, stage, kCheckpointEvery, extra});
}

// Steps and losses of a run directory's metrics.jsonl.
std::vector<rundir::StepRecord> Steps(const std::string& run_dir) {
  std::vector<rundir::StepRecord> steps;
  std::vector<rundir::EvalRecord> evals;
  const absl::Status read = rundir::ReadMetrics(run_dir + "/metrics.jsonl", &steps, &evals);
  EXPECT_TRUE(read.ok()) << read;
  return steps;
}

// Every step 1..kSteps once, in order, with the reference's loss (exactly, or within a relative
// `tolerance`), from step `from` on.
void ExpectSameSteps(const std::vector<rundir::StepRecord>& steps,
                     const std::vector<rundir::StepRecord>& reference, int from = 1,
                     double tolerance = 0) {
  ASSERT_EQ(reference.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps - from + 1));
  for (size_t i = 0; i < steps.size(); ++i) {
    const rundir::StepRecord& want = reference[from - 1 + i];
    EXPECT_EQ(steps[i].step, want.step);
    EXPECT_LE(std::abs(steps[i].loss - want.loss), tolerance * std::abs(want.loss))
        << "step " << want.step << ": " << steps[i].loss << " vs uninterrupted " << want.loss;
  }
}

class RestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartCoordinator("127.0.0.1:0", {"--heartbeat-timeout", "10"});
    ASSERT_FALSE(cluster_.address().empty());
  }

  std::string RunDir(const std::string& job) const { return cluster_.dir() + "/state/jobs/" + job; }

  // Submits `spec` (written as <name>.json); returns the job id.
  std::string Submit(const std::string& name, const std::string& spec) {
    const Outcome submitted = cluster_.Cli(
        absl::StrCat("submit ", cluster_.WriteFile(name + ".json", spec), " --threads 1"));
    EXPECT_EQ(submitted.exit_code, 0) << submitted.output;
    return submitted.output.substr(0, submitted.output.find('\n'));
  }

  // Follows the job's log to its end; returns it.
  std::string Follow(const std::string& job) {
    const Outcome followed = cluster_.Cli(absl::StrCat("logs ", job, " -f"));
    EXPECT_EQ(followed.exit_code, 0) << followed.output;
    return followed.output;
  }

  // Waits until the job's checkpoint of `step` is complete; when it never is, says so with the
  // job's log.
  ::testing::AssertionResult AwaitCheckpoint(const std::string& job, int step) {
    const std::string marker = absl::StrCat(RunDir(job), "/checkpoints/step-",
                                            absl::Dec(step, absl::kZeroPad6), "/complete");
    if (WaitFor([&] { return std::filesystem::exists(marker); })) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "no " << marker << " in time; the job's log:\n"
                                         << cluster_.Cli(absl::StrCat("logs ", job)).output;
  }

  // Waits until the job has a complete checkpoint of `step` and is held right after it (the test
  // held it there with cluster_.Hold); when it never is, says so with the job's log.
  ::testing::AssertionResult AwaitHeldAtCheckpoint(const std::string& job, int step) {
    ::testing::AssertionResult checkpoint = AwaitCheckpoint(job, step);
    if (!checkpoint) return checkpoint;
    if (cluster_.AwaitHeld(job, step)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "not held before step " << step + 1 << " in time; the job's log:\n"
           << cluster_.Cli(absl::StrCat("logs ", job)).output;
  }

  // Waits until the job's log holds `text`.
  bool AwaitLog(const std::string& job, const std::string& text) {
    return WaitFor([&] {
      return cluster_.Cli(absl::StrCat("logs ", job)).output.find(text) != std::string::npos;
    });
  }

  // `tandem run` of `spec` (job "killed"), held after its checkpoint of step 10, where its actor
  // of `group` is killed with SIGKILL; `tandem run` must start the actor again and finish. Returns
  // its output; its run directory is <dir>/killed.
  std::string RunKilledAtStep10(const std::string& spec, const std::string& group) {
    const std::string run_dir = cluster_.dir() + "/killed";
    const std::string log = cluster_.dir() + "/run.log";
    const auto read_log = [&] {
      std::ifstream in(log);
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    };
    // Held after its checkpoint of step 10: once that is complete the job cannot go past step 10.
    cluster_.Hold("killed", 2 * kCheckpointEvery);
    const pid_t run = cluster_.Spawn(
        {"run", cluster_.WriteFile("killed.json", spec), "--run-dir", run_dir, "--threads", "1",
         "--output", "json", "--test-hold-dir", cluster_.hold_dir()},
        log);
    EXPECT_TRUE(WaitFor([&] {
      return std::filesystem::exists(run_dir + "/checkpoints/step-000010/complete");
    })) << read_log();
    const pid_t actor = testing::ChildWithArgument(run, group);
    EXPECT_GT(actor, 0);
    if (actor > 0) kill(actor, SIGKILL);
    // `tandem run` reports the death (which ends the held attempt) and starts the actor again.
    EXPECT_TRUE(WaitFor([&] { return read_log().find("starting it again") != std::string::npos; }))
        << read_log();
    cluster_.Release("killed");
    const int status = cluster_.Wait(run);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_log();
    return read_log();
  }

  ProcessCluster cluster_;
};

TEST_F(RestartTest, KilledActorJobResumesFromItsLastCheckpointWithUninterruptedLosses) {
  cluster_.StartActor("vision");
  const pid_t llm = cluster_.StartActor("llm");
  cluster_.StartActor("llm");  // a free actor the job can move to
  const std::string reference = Submit("reference", Spec("reference", 1, 1));
  EXPECT_THAT(Follow(reference), HasSubstr("SUCCEEDED"));

  cluster_.Hold("killed", 2 * kCheckpointEvery);
  const std::string job = Submit("killed", Spec("killed", 1, 1));
  ASSERT_TRUE(AwaitHeldAtCheckpoint(job, 2 * kCheckpointEvery));
  cluster_.Kill(llm);
  cluster_.Release("killed");  // its next step finds the actor gone
  const std::string log = Follow(job);
  EXPECT_THAT(log, HasSubstr("RESTARTING: lost contact with llm-0 (llm rank 0"));
  EXPECT_THAT(log, HasSubstr("restart 1 of 3 (failure.max_restarts) from "));
  EXPECT_THAT(log, HasSubstr("resumed from "));
  EXPECT_THAT(log, HasSubstr("SUCCEEDED"));
  ExpectSameSteps(Steps(RunDir(job)), Steps(RunDir(reference)));
  const Outcome status = cluster_.Cli(absl::StrCat("status ", job, " --output json"));
  EXPECT_THAT(status.output, HasSubstr("\"restarts\":\"1\""));
}

// failure.snapshot_every: the LLM actor is killed after step 13 (the last checkpoint is step 10's,
// the last snapshot step 12's). The restart resumes at step 12 from memory: the vision actor
// restores its own snapshot and sends the LLM rank's copy it held to the spare LLM actor that
// takes the place; steps 13 to 30 take the uninterrupted run's losses exactly, and every step is
// recorded once.
TEST_F(RestartTest, KilledActorJobResumesFromSnapshotsInItsPeersMemory) {
  cluster_.StartActor("vision");
  const pid_t llm = cluster_.StartActor("llm");
  cluster_.StartActor("llm");  // the spare that takes the killed actor's place
  const std::string reference = Submit("reference", Spec("reference", 1, 1));
  EXPECT_THAT(Follow(reference), HasSubstr("SUCCEEDED"));

  const std::string snapshots = R"(, "failure": {"snapshot_every": 2})";
  cluster_.Hold("snapshots", 13);
  const std::string job = Submit("snapshots", Spec("snapshots", 1, 1, snapshots));
  ASSERT_TRUE(AwaitCheckpoint(job, 2 * kCheckpointEvery));
  ASSERT_TRUE(cluster_.AwaitHeld(job, 13)) << cluster_.Cli(absl::StrCat("logs ", job)).output;
  cluster_.Kill(llm);
  cluster_.Release("snapshots");  // its next step finds the actor gone
  const std::string log = Follow(job);
  EXPECT_THAT(log, HasSubstr("RESTARTING: lost contact with llm-0 (llm rank 0"));
  EXPECT_THAT(log, HasSubstr("restart 1 of 3 (failure.max_restarts) from the snapshots in memory "
                             "where every rank's state is held, else " +
                             RunDir(job) + "/checkpoints/step-000010"));
  EXPECT_THAT(log, HasSubstr("resumed from memory at step 12: llm rank 0 from vision rank 0's "
                             "copy, the others from their own snapshots"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("resumed from " + RunDir(job))));
  EXPECT_THAT(log, HasSubstr("SUCCEEDED"));
  ExpectSameSteps(Steps(RunDir(job)), Steps(RunDir(reference)));
}

TEST_F(RestartTest, SupervisedActorThatIsKilledIsReportedWithItsSignalAndTheJobResumes) {
  cluster_.StartActor("vision");
  const pid_t supervisor = cluster_.StartActor("llm", {"--supervise"});
  cluster_.Hold("supervised", kCheckpointEvery);
  const std::string job = Submit("supervised", Spec("supervised", 1, 1));
  ASSERT_TRUE(AwaitHeldAtCheckpoint(job, kCheckpointEvery));
  const pid_t actor = testing::ChildWithArgument(supervisor, "llm");
  ASSERT_GT(actor, 0);
  kill(actor, SIGKILL);
  // The supervisor's report ends the held attempt; the next one may go on.
  ASSERT_TRUE(AwaitLog(job, "RESTARTING: "));
  cluster_.Release("supervised");
  const std::string log = Follow(job);
  EXPECT_THAT(log, HasSubstr("RESTARTING: llm-0 (llm rank 0, "));
  EXPECT_THAT(log, HasSubstr(") died: killed by signal 9 (SIGKILL)"));
  EXPECT_THAT(log, HasSubstr("restart 1 of 3 (failure.max_restarts) from "));
  EXPECT_THAT(log, HasSubstr("SUCCEEDED"));
  EXPECT_EQ(Steps(RunDir(job)).size(), static_cast<size_t>(kSteps));
  const Outcome status = cluster_.Cli(absl::StrCat("status ", job));
  EXPECT_THAT(status.output, HasSubstr("restarted 1 times after failures"));
  EXPECT_THAT(status.output, HasSubstr("last restart: llm-0 (llm rank 0, "));
  EXPECT_THAT(status.output, HasSubstr(") died: killed by signal 9 (SIGKILL)"));
  // The supervisor started the actor again, and it registered anew.
  EXPECT_THAT(cluster_.Cli("actors").output, HasSubstr("llm-1"));
}

TEST_F(RestartTest, RestartedCoordinatorKnowsEveryJobAndResumesTheRunningOne) {
  cluster_.StartActor("vision");
  cluster_.StartActor("llm");
  const std::string reference = Submit("reference", Spec("reference", 1, 2));
  EXPECT_THAT(Follow(reference), HasSubstr("SUCCEEDED"));
  const std::vector<rundir::StepRecord> uninterrupted = Steps(RunDir(reference));
  cluster_.Hold("survivor", kCheckpointEvery);
  const std::string job = Submit("survivor", Spec("survivor", 1, 2));
  const std::string queued = Submit("queued", Spec("queued", 1, 2));
  ASSERT_TRUE(AwaitHeldAtCheckpoint(job, kCheckpointEvery));

  // The same address, so the actors find it again; they register anew and are free to resume.
  const std::string address = cluster_.address();
  cluster_.Kill(cluster_.coordinator());
  cluster_.StartCoordinator(address, {"--heartbeat-timeout", "10"});
  ASSERT_EQ(cluster_.address(), address);
  cluster_.Release("survivor");
  const std::string log = Follow(job);
  EXPECT_THAT(log, HasSubstr("RESTARTING: the coordinator restarted while the job ran"));
  EXPECT_THAT(log, HasSubstr("SUCCEEDED"));
  ExpectSameSteps(Steps(RunDir(job)), uninterrupted);
  EXPECT_THAT(Follow(queued), HasSubstr("SUCCEEDED"));
  // The job that had ended before the restart stays as it was: not run again, files untouched.
  const Outcome ended = cluster_.Cli(absl::StrCat("status ", reference));
  EXPECT_THAT(ended.output, HasSubstr("SUCCEEDED")) << ended.output;
  EXPECT_THAT(cluster_.Cli(absl::StrCat("logs ", reference)).output,
              ::testing::Not(HasSubstr("RESTARTING")));
  ExpectSameSteps(Steps(RunDir(reference)), uninterrupted);
}

// The coordinator killed and started again while a job with snapshots in memory is held after step
// 13: its actors kept their snapshots, so the job resumes at step 12 from memory, every rank from
// its own, with the uninterrupted losses.
TEST_F(RestartTest, RestartedCoordinatorResumesTheRunningJobFromTheActorsMemory) {
  cluster_.StartActor("vision");
  cluster_.StartActor("llm");
  const std::string reference = Submit("reference", Spec("reference", 1, 1));
  EXPECT_THAT(Follow(reference), HasSubstr("SUCCEEDED"));
  cluster_.Hold("kept", 13);
  const std::string job =
      Submit("kept", Spec("kept", 1, 1, R"(, "failure": {"snapshot_every": 2})"));
  ASSERT_TRUE(AwaitCheckpoint(job, 2 * kCheckpointEvery));
  ASSERT_TRUE(cluster_.AwaitHeld(job, 13)) << cluster_.Cli(absl::StrCat("logs ", job)).output;
  const std::string address = cluster_.address();
  cluster_.Kill(cluster_.coordinator());
  cluster_.StartCoordinator(address, {"--heartbeat-timeout", "10"});
  ASSERT_EQ(cluster_.address(), address);
  cluster_.Release("kept");
  const std::string log = Follow(job);
  EXPECT_THAT(log, HasSubstr("RESTARTING: the coordinator restarted while the job ran"));
  EXPECT_THAT(log, HasSubstr("resumed from memory at step 12: every rank from its own snapshot"));
  EXPECT_THAT(log, HasSubstr("SUCCEEDED"));
  ExpectSameSteps(Steps(RunDir(job)), Steps(RunDir(reference)));
}

TEST_F(RestartTest, JobKeepsFailingStopsAfterItsRestarts) {
  cluster_.StartActor("vision");
  const pid_t first = cluster_.StartActor("llm");
  cluster_.Hold("fragile", kCheckpointEvery);
  const std::string job =
      Submit("fragile", Spec("fragile", 1, 0, R"(, "failure": {"max_restarts": 1})"));
  ASSERT_TRUE(AwaitHeldAtCheckpoint(job, kCheckpointEvery));
  cluster_.Kill(first);
  cluster_.Release("fragile");  // its next step finds the actor gone
  ASSERT_TRUE(AwaitLog(job, "RESTARTING: "));
  // No LLM actor is left, so the job cannot resume before the second one registers: held again
  // at the same checkpoint, the resumed attempt is still running when its actor is killed.
  cluster_.Hold("fragile", kCheckpointEvery);
  const pid_t second = cluster_.StartActor("llm");
  ASSERT_TRUE(AwaitLog(job, "resumed from "));
  ASSERT_TRUE(AwaitHeldAtCheckpoint(job, kCheckpointEvery));
  cluster_.Kill(second);
  cluster_.Release("fragile");
  const std::string log = Follow(job);
  EXPECT_THAT(log, HasSubstr("restart 1 of 1"));
  EXPECT_THAT(log, HasSubstr("FAILED: lost contact with llm-1 (llm rank 0"));
  EXPECT_THAT(log, HasSubstr("gave up after 1 restarts (failure.max_restarts is 1)"));
}

TEST_F(RestartTest, NewJobStartsFromACheckpointOfOtherGroupSizesAndStage) {
  cluster_.StartActor("vision");
  cluster_.StartActor("llm");
  cluster_.StartActor("llm");
  const std::string reference = Submit("reference", Spec("reference", 1, 1));
  EXPECT_THAT(Follow(reference), HasSubstr("SUCCEEDED"));

  const std::string checkpoint = absl::StrCat(RunDir(reference), "/checkpoints/step-000010");
  const std::string job =
      Submit("continued",
             Spec("continued", 2, 3, absl::StrCat(R"(, "resume_from": ")", checkpoint, "\"")));
  const std::string log = Follow(job);
  EXPECT_THAT(log, HasSubstr(absl::StrCat("resumed from ", checkpoint,
                                          " at step 10 (written by vision 1 x llm 1 actors)")));
  EXPECT_THAT(log, HasSubstr("SUCCEEDED"));
  // Two LLM ranks sum their gradients in another order: equal within rounding.
  ExpectSameSteps(Steps(RunDir(job)), Steps(RunDir(reference)), 11, 1e-4);
}

TEST_F(RestartTest, TandemRunStartsAKilledActorAgainAndTellsWhyItDied) {
  const std::string reference = cluster_.dir() + "/reference";
  const Outcome uninterrupted = testing::Tandem(
      absl::StrCat("run ", cluster_.WriteFile("reference.json", Spec("reference", 1, 0)),
                   " --run-dir ", reference, " --threads 1 --output json"));
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;

  const std::string output = RunKilledAtStep10(Spec("killed", 1, 0), "llm");
  EXPECT_THAT(output, HasSubstr("actor llm-0 killed by signal 9 (SIGKILL); starting it again"));
  ExpectSameSteps(Steps(cluster_.dir() + "/killed"), Steps(reference));
}

// Shards `tandem data pack` made of 60 captioned images (examples/jsonl's eight, their captions in
// turn from `first_caption`) in shards of about three samples, shuffled in windows of 8: the 240
// samples a run draws cross four epochs and many windows. Packs anew over an earlier call's
// shards. Returns the job's "data" object.
std::string PackedShards(ProcessCluster& cluster, int first_caption = 0) {
  const std::filesystem::path dir = std::filesystem::path(cluster.dir()) / "pack";
  const std::filesystem::path examples(TANDEM_EXAMPLES_DIR);
  std::filesystem::create_directories(dir);
  std::filesystem::copy(
      examples / "jsonl/images", dir / "images",
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::skip_existing);
  std::ifstream captions(examples / "jsonl/train.jsonl");
  std::vector<std::string> lines;
  for (std::string line; std::getline(captions, line);) lines.push_back(line);
  std::ofstream many(dir / "many.jsonl", std::ios::trunc);
  for (int i = 0; i < 60; ++i) many << lines.at((first_caption + i) % lines.size()) << "\n";
  many.close();
  std::filesystem::remove_all(dir / "shards");
  const Outcome packed =
      testing::Tandem(absl::StrCat("data pack ", (dir / "many.jsonl").string(), " ",
                                   (dir / "shards").string(), " --shard-size 8KiB"));
  EXPECT_EQ(packed.exit_code, 0) << packed.output;
  return absl::StrCat(R"({"shards": {"train": ")", (dir / "shards").string(),
                      R"(", "shuffle_buffer": 8}, "max_text_tokens": 12})");
}

// Exact resume on streamed shards: `tandem run` whose vision actor (the one reading the shards) is
// killed mid-epoch resumes with the uninterrupted run's losses, step for step; and a run resumed
// from that run's checkpoint with two vision actors sees the same samples (its losses within
// rounding: two ranks sum the gradients in another order). The data position is a pure function of
// (seed, epoch, offset), so no sample of an epoch is repeated or skipped whatever the group sizes.
TEST_F(RestartTest, ShardedRunKilledMidEpochResumesExactlyAndAtOtherVisionActors) {
  const std::string data = PackedShards(cluster_);
  const auto spec = [&](const std::string& name, int vision_actors, const std::string& extra) {
    return testing::TinyJobSpec({name, kSteps, 1, 0, kCheckpointEvery, extra, data, vision_actors});
  };
  const std::string reference = cluster_.dir() + "/reference";
  const Outcome uninterrupted = testing::Tandem(
      absl::StrCat("run ", cluster_.WriteFile("reference.json", spec("reference", 1, "")),
                   " --run-dir ", reference, " --threads 1 --output json"));
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  EXPECT_TRUE(std::filesystem::exists(reference + "/checkpoints/step-000010/data.json"));

  const std::string output = RunKilledAtStep10(spec("killed", 1, ""), "vision");
  EXPECT_THAT(output, HasSubstr("actor vision-0 killed by signal 9 (SIGKILL); starting it again"));
  ExpectSameSteps(Steps(cluster_.dir() + "/killed"), Steps(reference));

  const std::string wider = cluster_.dir() + "/wider";
  const std::string from_step_10 =
      absl::StrCat(R"(, "resume_from": ")", reference, "/checkpoints/step-000010\"");
  const Outcome resumed = testing::Tandem(
      absl::StrCat("run ", cluster_.WriteFile("wider.json", spec("wider", 2, from_step_10)),
                   " --run-dir ", wider, " --threads 1 --output json"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ExpectSameSteps(Steps(wider), Steps(reference), 11, 1e-4);
}

// A checkpoint remembers its training shards: resumed on shards packed anew (other samples in
// them), the job is refused before it trains, naming the shard that changed.
TEST_F(RestartTest, ResumeOnChangedShardsIsRefusedNamingTheShard) {
  const std::string data = PackedShards(cluster_);
  const std::string reference = cluster_.dir() + "/reference";
  const Outcome first = testing::Tandem(
      absl::StrCat("run --colocated ",
                   cluster_.WriteFile("reference.json",
                                      testing::TinyJobSpec({"reference", 5, 1, 0, 5, "", data})),
                   " --run-dir ", reference, " --threads 1 --output json"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(PackedShards(cluster_, 1), data);  // packed again, the samples in another order
  const std::string from_step_5 =
      absl::StrCat(R"(, "resume_from": ")", reference, "/checkpoints/step-000005\"");
  const std::string continued = testing::TinyJobSpec({"continued", 10, 1, 0, 5, from_step_5, data});
  const Outcome resumed = testing::Tandem(
      absl::StrCat("run --colocated ", cluster_.WriteFile("continued.json", continued),
                   " --run-dir ", cluster_.dir() + "/continued", " --threads 1"));
  EXPECT_NE(resumed.exit_code, 0) << resumed.output;
  EXPECT_THAT(resumed.output,
              HasSubstr("/checkpoints/step-000005/data.json: shard 0 was train-000000.tar ("));
  EXPECT_THAT(resumed.output, HasSubstr("the training shards changed since this checkpoint"));
}

TEST_F(RestartTest, ColocatedRunResumesFromACheckpointBitForBit) {
  const std::string reference = cluster_.dir() + "/reference";
  const Outcome uninterrupted = testing::Tandem(absl::StrCat(
      "run --colocated ", cluster_.WriteFile("reference.json", Spec("reference", 1, 0)),
      " --run-dir ", reference, " --threads 1 --output json"));
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  const std::string continued = cluster_.dir() + "/continued";
  const Outcome resumed = testing::Tandem(absl::StrCat(
      "run --colocated ",
      cluster_.WriteFile(
          "continued.json",
          Spec("continued", 1, 0, R"(, "resume_from": "reference/checkpoints/step-000010")")),
      " --run-dir ", continued, " --threads 1 --output json"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("\"steps\":30,\"samples\":240"));
  ExpectSameSteps(Steps(continued), Steps(reference), 11);
}

TEST_F(RestartTest, ResumeFromAnIncompleteCheckpointIsRefusedAtSubmit) {
  const std::string incomplete = cluster_.dir() + "/checkpoints/step-000010";
  std::filesystem::create_directories(incomplete + "/vision");
  const Outcome submitted = cluster_.Cli(absl::StrCat(
      "submit ",
      cluster_.WriteFile(
          "bad.json", Spec("bad", 1, 1, absl::StrCat(R"(, "resume_from": ")", incomplete, "\"")))));
  EXPECT_EQ(submitted.exit_code, 2) << submitted.output;
  EXPECT_THAT(submitted.output, HasSubstr(absl::StrCat("resume_from: checkpoint ", incomplete,
                                                       " is incomplete (no 'complete' marker")));
}

}  // namespace
}  // namespace tandem
