// The central equivalence of docs/design.md §2 inside one process: the vision and LLM stages with
// Nv x Nl ranks as threads (FakeGroup collectives, an in-process transport) give the per-step
// losses of one rank each, at every ZeRO stage, with gradient accumulation and whole-model
// clipping. The same stages run as actors in tests/service/disaggregated_test.cc; this one runs in
// seconds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/image.h"
#include "data/shapes.h"
#include "data/tar_shard.h"
#include "engine/counting_communicator.h"
#include "engine/engine.h"
#include "engine/fake_communicator.h"
#include "engine/safetensors.h"
#include "hf/pretrained_job.h"
#include "jobspec/job_spec.h"
#include "jobspec/memory_estimate.h"
#include "nlohmann/json.hpp"
#include "parallel/layout.h"
#include "step/stage.h"
#include "transport/in_process.h"

namespace tandem::step {
namespace {

using ::testing::HasSubstr;
constexpr int kSteps = 4;
constexpr std::chrono::milliseconds kTimeout{120000};

// A tiny shapes job: 2 micro-batches of 6 samples per step, fp32 engines at ZeRO stage `stage`.
// `vision_freeze` is the vision group's freeze list as JSON ("" for none).
// `precision` adds keys to both engines' configs (e.g. a "bf16" block), after a comma.
jobspec::JobConfig TinyJob(int stage, double clipping = 0, const std::string& vision_freeze = "",
                           const std::string& precision = "") {
  const std::string engine = absl::StrCat(
      R"({"zero_optimization": {"stage": )", stage,
      R"(, "reduce_bucket_size": 20000}, "optimizer": {"type": "AdamW", "params": {"lr": 0.002}})",
      precision.empty() ? "" : absl::StrCat(", ", precision), "}");
  const std::string spec = absl::StrCat(
      R"({
  "name": "stages",
  "data": {"shapes": {"seed": 5, "train_samples": 512, "eval_samples": 12}, "max_text_tokens": 12},
  "vision": {"model": {"preset": "vit-tiny"}, "engine": )",
      engine, vision_freeze.empty() ? "" : absl::StrCat(R"(, "freeze": )", vision_freeze),
      R"(},
  "llm": {"model": {"preset": "llm-tiny"}, "engine": )",
      engine, R"(},
  "schedule": {"global_batch": 12, "micro_batches": 2, "steps": )",
      kSteps, R"(, "seed": 11)",
      clipping > 0 ? absl::StrCat(R"(, "gradient_clipping": )", clipping) : "",
      R"(}
})");
  absl::StatusOr<jobspec::JobConfig> job = jobspec::ParseJobSpecJson(spec, "stages.json");
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

struct Outcome {
  std::vector<double> losses;          // per step, summed over the LLM ranks
  std::vector<double> llm_grad_norms;  // per step, LLM rank 0's (its group's gradient norm)
  int64_t llm_parameters = 0;          // the LLM stage's count, the same on every rank
  int64_t llm_bytes_sent = 0;          // gradients sent back to the vision ranks, all steps
  int64_t vision_bytes_sent = 0;       // embeddings sent to the LLM ranks, all steps
  int64_t llm_positions = 0;           // of the LLM's rows, all steps (StepResult::positions)
  int64_t llm_padding = 0;
  // Per step, each rank's planned work (StepResult::planned): tiles, and rows' cost.
  std::vector<std::vector<double>> vision_planned, llm_planned;
  // Per step, samples left out as bad (StepResult::skipped_samples): vision rank 0's and LLM rank
  // 0's.
  std::vector<int64_t> vision_skipped, llm_skipped;
  int64_t tensor_broadcast_bytes = 0;  // handed to broadcasts of the LLM replicas, all ranks
  EvalCounts eval;                     // after the last step, summed over the LLM ranks
  std::map<std::string, at::Tensor> vision_weights;  // vision rank 0's after the last step
  std::vector<std::map<std::string, at::Tensor>>
      llm_weights;  // each LLM rank's, after the last step
  std::vector<absl::Status> errors;
};

// Communicators as actors/worker.cc makes them (NOTE [Parallel sets] in step/stage.h): the vision
// engine's over the whole group and one per sequence-parallel replica; the LLM engine's one per
// tensor index over the replicas, and one per tensor-parallel replica.
struct Groups {
  Groups(int nv, int sv, int nl, int tl) : vision(nv, "vision") {
    for (int r = 0; r < nv / sv; ++r) {
      sequence.push_back(
          std::make_unique<engine::FakeGroup>(sv, parallel::ParallelGroupName(Role::kVision, r)));
    }
    for (int t = 0; t < tl; ++t) {
      data.push_back(std::make_unique<engine::FakeGroup>(
          nl / tl, parallel::EngineGroupName(Role::kLlm, tl, t)));
    }
    for (int r = 0; r < nl / tl; ++r) {
      tensor.push_back(
          std::make_unique<engine::FakeGroup>(tl, parallel::ParallelGroupName(Role::kLlm, r)));
    }
  }
  engine::FakeGroup vision;
  std::vector<std::unique_ptr<engine::FakeGroup>> sequence, data, tensor;
};

// Rank `rank` of the vision (nv ranks, sequence-parallel sv) or LLM group (nl, tensor-parallel tl).
Placement PlacementOf(const std::string& transfer_key, bool vision, int rank, int nv, int sv,
                      int nl, int tl) {
  Placement placement;
  placement.transfer_key = transfer_key;
  placement.rank = rank;
  placement.group_size = vision ? nv : nl;
  placement.peer_group_size = vision ? nl : nv;
  placement.parallel = vision ? sv : tl;
  placement.peer_parallel = vision ? tl : sv;
  placement.timeout = kTimeout;
  return placement;
}

// Runs `steps` steps and one evaluation with nv vision and nl LLM ranks, each on a thread; sv and
// tl are the sequence- and tensor-parallel degrees. At `fail_step` (0: never) vision rank 0 fails
// before its step, to see a failure end every rank promptly.
// `save_step` (0: none) saves a checkpoint of both groups into `checkpoint` after that step;
// `resume` starts from a checkpoint. `shared` is the job's data when given (else opened).
Outcome RunStages(const jobspec::JobConfig& job, int nv, int nl, int64_t fail_step = 0, int sv = 1,
                  int tl = 1, int64_t save_step = 0, const std::string& checkpoint = "",
                  const std::string& resume = "", std::shared_ptr<const JobData> shared = nullptr) {
  absl::StatusOr<std::shared_ptr<const JobData>> data =
      shared != nullptr ? std::move(shared) : OpenJobData(job);
  EXPECT_TRUE(data.ok()) << data.status();
  Groups groups(nv, sv, nl, tl);
  transport::InProcessFabric fabric("stages#1", nv, nl, kTimeout);
  Outcome outcome;
  outcome.losses.assign(job.schedule.steps, 0.0);
  outcome.llm_grad_norms.assign(job.schedule.steps, 0.0);
  outcome.llm_weights.resize(nl);
  outcome.vision_planned.assign(job.schedule.steps, std::vector<double>(nv, 0.0));
  outcome.llm_planned.assign(job.schedule.steps, std::vector<double>(nl, 0.0));
  outcome.vision_skipped.assign(job.schedule.steps, -1);
  outcome.llm_skipped.assign(job.schedule.steps, -1);
  std::mutex mu;
  auto rank_main = [&](bool vision, int rank) {
    Placement placement = PlacementOf("stages#1", vision, rank, nv, sv, nl, tl);
    const int replica = rank / placement.parallel, index = rank % placement.parallel;
    std::shared_ptr<engine::CountingCommunicator> counted;
    if (placement.parallel > 1) {
      counted = std::make_shared<engine::CountingCommunicator>(
          (vision ? groups.sequence : groups.tensor)[replica]->rank(index));
      placement.parallel_communicator = counted;
    }
    auto create = vision ? CreateVisionStage : CreateLlmStage;
    absl::Status status;
    absl::StatusOr<std::unique_ptr<Stage>> stage =
        create(job, *data, placement,
               vision ? groups.vision.rank(rank) : groups.data[index]->rank(replica),
               fabric.Endpoint(vision ? 0 : 1, rank), nullptr);
    status = stage.status();
    if (status.ok() && !vision) {
      std::lock_guard<std::mutex> lock(mu);
      if (outcome.llm_parameters != 0 && outcome.llm_parameters != (*stage)->parameters())
        outcome.llm_parameters = -1;
      if (outcome.llm_parameters == 0) outcome.llm_parameters = (*stage)->parameters();
    }
    int64_t first_step = 1;
    if (status.ok() && !resume.empty()) {
      absl::StatusOr<ResumePoint> point = (*stage)->Resume(resume);
      status = point.status();
      if (status.ok()) first_step = point->step + 1;
    }
    for (int64_t step = first_step; status.ok() && step <= job.schedule.steps; ++step) {
      if (vision && rank == 0 && step == fail_step) {
        status = absl::DataLossError("vision rank 0 lost its data");
        break;
      }
      absl::StatusOr<StepResult> result = (*stage)->RunStep(step);
      status = result.status();
      if (status.ok() && !vision) {
        std::lock_guard<std::mutex> lock(mu);
        outcome.losses[step - 1] += result->loss;
        if (rank == 0) outcome.llm_grad_norms[step - 1] = result->grad_norm;
        outcome.llm_bytes_sent += result->bytes_sent;
        outcome.llm_positions += result->positions;
        outcome.llm_padding += result->padding;
        outcome.llm_planned[step - 1][rank] = result->planned;
        if (rank == 0) outcome.llm_skipped[step - 1] = result->skipped_samples;
      }
      if (status.ok() && vision) {
        std::lock_guard<std::mutex> lock(mu);
        outcome.vision_bytes_sent += result->bytes_sent;
        outcome.vision_planned[step - 1][rank] = result->planned;
        if (rank == 0) outcome.vision_skipped[step - 1] = result->skipped_samples;
      }
      if (status.ok() && step == save_step) status = (*stage)->SaveCheckpoint(step, checkpoint);
    }
    if (status.ok() && vision) {
      // Collective at stages 1-3: every vision rank takes part, rank 0 keeps the values.
      absl::StatusOr<engine::NamedTensors> params = (*stage)->engine().GatherParameters();
      absl::StatusOr<engine::NamedTensors> frozen = (*stage)->engine().GatherFrozenParameters();
      status = params.ok() ? frozen.status() : params.status();
      if (status.ok() && rank == 0) {
        std::lock_guard<std::mutex> lock(mu);
        for (const auto& [name, value] : *params) outcome.vision_weights[name] = value;
        for (const auto& [name, value] : *frozen) outcome.vision_weights[name] = value;
      }
    }
    if (status.ok() && !vision) {
      // Collective over the rank's data-parallel group; each rank keeps its own shards' values.
      absl::StatusOr<engine::NamedTensors> params = (*stage)->engine().GatherParameters();
      status = params.status();
      if (status.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        for (const auto& [name, value] : *params) outcome.llm_weights[rank][name] = value;
      }
    }
    if (status.ok()) {
      absl::StatusOr<EvalCounts> counts = (*stage)->Evaluate(job.schedule.steps);
      status = counts.status();
      if (status.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        outcome.eval += *counts;
      }
    }
    if (counted != nullptr && !vision) {
      std::lock_guard<std::mutex> lock(mu);
      outcome.tensor_broadcast_bytes += counted->counts().broadcast_bytes;
    }
    if (!status.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu);
        outcome.errors.push_back(status);
      }
      fabric.Abort();  // as the coordinator releases every actor after a failure
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < nv; ++r) threads.emplace_back(rank_main, true, r);
  for (int r = 0; r < nl; ++r) threads.emplace_back(rank_main, false, r);
  for (auto& t : threads) t.join();
  return outcome;
}

void ExpectLossesMatch(const std::vector<double>& losses, const std::vector<double>& reference) {
  ASSERT_EQ(losses.size(), reference.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    EXPECT_LE(std::abs(losses[i] - reference[i]), 1e-4 * std::abs(reference[i]))
        << "step " << i + 1 << ": " << losses[i] << " vs one rank each " << reference[i];
  }
}

class StagesTest : public ::testing::TestWithParam<int> {};

TEST_P(StagesTest, LossesEqualOneRankEachForEveryGroupShape) {
  const jobspec::JobConfig job = TinyJob(GetParam());
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  ASSERT_EQ(reference.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_GT(reference.losses.front(), 1.0);  // a real cross-entropy, not zeros
  EXPECT_EQ(reference.eval.samples, 12);
  for (auto [nv, nl] : std::vector<std::pair<int, int>>{{2, 3}, {3, 2}, {2, 2}}) {
    SCOPED_TRACE(absl::StrCat(nv, " x ", nl, " at ZeRO stage ", GetParam()));
    const Outcome run = RunStages(job, nv, nl);
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    ExpectLossesMatch(run.losses, reference.losses);
    // Every held-out sample is scored once, by the LLM rank that owns it.
    EXPECT_EQ(run.eval.samples, 12);
    EXPECT_EQ(run.eval.tokens, reference.eval.tokens);
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, StagesTest, ::testing::Values(0, 1, 2, 3));

// Tensor parallelism in the LLM group and sequence parallelism in the vision group, alone and
// together, with ZeRO over the replicas: the losses of one rank each (fp32), and every held-out
// sample scored once.
class StagesParallelTest : public ::testing::TestWithParam<int> {};

TEST_P(StagesParallelTest, TensorAndSequenceParallelLossesEqualOneRankEach) {
  const jobspec::JobConfig job = TinyJob(GetParam());
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  struct Layout {
    int nv, sv, nl, tl;
  };
  for (const Layout& l :
       std::vector<Layout>{{1, 1, 2, 2}, {2, 2, 1, 1}, {2, 2, 4, 2}, {4, 2, 2, 2}}) {
    SCOPED_TRACE(absl::StrCat("vision ", l.nv, " ranks (sequence ", l.sv, ") x llm ", l.nl,
                              " ranks (tensor ", l.tl, ") at ZeRO stage ", GetParam()));
    const Outcome run = RunStages(job, l.nv, l.nl, 0, l.sv, l.tl);
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    ExpectLossesMatch(run.losses, reference.losses);
    EXPECT_EQ(run.eval.samples, 12);
    EXPECT_EQ(run.eval.tokens, reference.eval.tokens);
    EXPECT_EQ(run.llm_parameters, reference.llm_parameters);  // the whole model's, on every rank
    for (const auto& [name, value] : reference.vision_weights) {
      ASSERT_TRUE(run.vision_weights.count(name)) << name;
      EXPECT_TRUE(at::allclose(run.vision_weights.at(name), value, 1e-4, 1e-5)) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, StagesParallelTest, ::testing::Values(1, 3));

// llm.parallel.embeddings "broadcast": one copy of each embedding slice crosses to an LLM replica,
// whose first rank broadcasts the assembled micro-batch; the losses are those of "each_rank" to the
// bit, and every held-out sample is still scored once.
TEST(StagesEmbeddingRouteTest, BroadcastInsideTheReplicaSendsOneCopyAndGivesTheSameLosses) {
  jobspec::JobConfig job = TinyJob(1);
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  // 2 vision replicas of 2 sequence ranks, 2 LLM replicas of 2 tensor ranks.
  const Outcome each = RunStages(job, 4, 4, 0, 2, 2);
  ASSERT_TRUE(each.errors.empty()) << each.errors.front();
  job.llm.embeddings = jobspec::EmbeddingRoute::kBroadcast;
  const Outcome broadcast = RunStages(job, 4, 4, 0, 2, 2);
  ASSERT_TRUE(broadcast.errors.empty()) << broadcast.errors.front();
  ExpectLossesMatch(broadcast.losses, reference.losses);
  EXPECT_EQ(broadcast.losses, each.losses);
  EXPECT_EQ(broadcast.eval.samples, 12);
  EXPECT_EQ(broadcast.eval.tokens, each.eval.tokens);
  EXPECT_EQ(broadcast.eval.correct_tokens, each.eval.correct_tokens);
  // fp32 [samples, 16 patches, 64 wide]: 4 steps of 12 samples train, 12 are evaluated.
  const int64_t sample_bytes = 16 * 64 * 4;
  EXPECT_EQ(each.vision_bytes_sent, 2 * kSteps * 12 * sample_bytes);  // to both tensor ranks
  EXPECT_EQ(broadcast.vision_bytes_sent, kSteps * 12 * sample_bytes);
  EXPECT_EQ(each.tensor_broadcast_bytes, 0);
  // Each of a replica's 2 ranks hands the micro-batch's embeddings to the broadcast.
  EXPECT_EQ(broadcast.tensor_broadcast_bytes, 2 * (kSteps * 12 + 12) * sample_bytes);
  // The gradients still come back from each replica's first rank alone.
  EXPECT_EQ(broadcast.llm_bytes_sent, each.llm_bytes_sent);
  EXPECT_EQ(broadcast.llm_bytes_sent, kSteps * 12 * sample_bytes);
}

// Stochastic rounding under tensor parallelism (NOTE [Random streams] in engine/engine_step.cc):
// the shapes vocabulary is odd, so the first rank's vocabulary shard has a row more and every later
// parameter sits elsewhere in its engine's buffers than on the second rank; the parameters both
// ranks hold whole (the norms' weights) must still round alike and stay bit-identical.
TEST(StagesParallelRoundingTest, ReplicatedParametersStayBitIdenticalUnderStochasticRounding) {
  const jobspec::JobConfig job = TinyJob(
      1, 0, "",
      R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true},
         "tandem": {"bf16_update": "stochastic", "bf16_optimizer_states_rounding": "stochastic"})");
  absl::StatusOr<std::shared_ptr<const JobData>> data = OpenJobData(job);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ((*data)->text->vocab_size() % 2, 1) << "the case needs an odd vocabulary";
  const Outcome outcome = RunStages(job, 1, 2, 0, 1, /*tl=*/2);
  ASSERT_TRUE(outcome.errors.empty()) << outcome.errors[0];
  const auto& first = outcome.llm_weights[0];
  const auto& second = outcome.llm_weights[1];
  ASSERT_EQ(first.size(), second.size());
  int replicated = 0;
  for (const auto& [name, value] : first) {
    if (name.find("norm") == std::string::npos) continue;  // shards: each rank's own values
    ++replicated;
    EXPECT_TRUE(at::equal(value, second.at(name)))
        << name << " differs between the tensor-parallel ranks";
  }
  EXPECT_EQ(replicated,
            2 * 2 + 1);  // two norms in each of llm-tiny's two blocks, and the final one
}

// A checkpoint saved at one tensor-parallel degree resumes at another with the losses of the run
// that never stopped: TP 2 to 1, 1 to 2, and TP 2 over two replicas at ZeRO 3 to TP 4.
TEST(StagesParallelResumeTest, ACheckpointResumesAtAnotherTensorParallelDegree) {
  struct Move {
    int stage, nl_from, tl_from, nl_to, tl_to;
  };
  for (const Move& m : std::vector<Move>{{1, 2, 2, 1, 1}, {1, 1, 1, 2, 2}, {3, 4, 2, 4, 4}}) {
    SCOPED_TRACE(absl::StrCat("ZeRO ", m.stage, ": ", m.nl_from, " LLM ranks at TP ", m.tl_from,
                              " to ", m.nl_to, " at TP ", m.tl_to));
    const jobspec::JobConfig job = TinyJob(m.stage);
    const std::string dir = absl::StrCat(::testing::TempDir(), "/tp-resume-", ::getpid());
    std::filesystem::remove_all(dir);
    const Outcome whole = RunStages(job, 1, m.nl_from, 0, 1, m.tl_from, /*save_step=*/2, dir);
    ASSERT_TRUE(whole.errors.empty()) << whole.errors.front();
    ASSERT_TRUE(std::filesystem::exists(dir + "/llm")) << dir;
    const Outcome resumed = RunStages(job, 1, m.nl_to, 0, 1, m.tl_to, 0, "", dir);
    ASSERT_TRUE(resumed.errors.empty()) << resumed.errors.front();
    EXPECT_EQ(resumed.losses[0], 0.0);  // steps 1 and 2 did not run again
    ExpectLossesMatch({resumed.losses[2], resumed.losses[3]}, {whole.losses[2], whole.losses[3]});
    std::filesystem::remove_all(dir);
  }
}

TEST(StagesParallelResumeTest, AMissingTensorIndexIsNamed) {
  const jobspec::JobConfig job = TinyJob(1);
  const std::string dir = absl::StrCat(::testing::TempDir(), "/tp-missing-", ::getpid());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(RunStages(job, 1, 2, 0, 1, 2, /*save_step=*/2, dir).errors.empty());
  std::filesystem::remove(dir + "/llm/tensor-1-of-2/complete");
  const Outcome resumed = RunStages(job, 1, 1, 0, 1, 1, 0, "", dir);
  ASSERT_FALSE(resumed.errors.empty());
  EXPECT_THAT(resumed.errors.front().message(),
              HasSubstr("saved at llm.parallel.tensor 2 at 1: checkpoint: " + dir +
                        "/llm/tensor-1-of-2 is incomplete or missing"));
  std::filesystem::remove_all(dir);
}

TEST(StagesParallelClippingTest, WholeModelClippingCountsEachParameterOnceUnderTensorParallelism) {
  const Outcome reference = RunStages(TinyJob(1, 0.05), 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  const Outcome run = RunStages(TinyJob(1, 0.05), 2, 4, 0, 2, 2);
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  ExpectLossesMatch(run.losses, reference.losses);
  // The LLM's gradient norm counts the norms' weights once, not once per tensor-parallel rank.
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_NEAR(run.llm_grad_norms[step], reference.llm_grad_norms[step],
                1e-5 * reference.llm_grad_norms[step])
        << "step " << step + 1;
  }
}

// Whole-model clipping: the groups exchange their squared norms over the transport, and a 2 x 3
// run takes the one-rank run's clipped steps; the clip scales every step, so the losses move away
// from an unclipped run's.
TEST(StagesClippingTest, WholeModelClippingEqualsOneRankEach) {
  const Outcome unclipped = RunStages(TinyJob(1), 1, 1);
  const Outcome reference = RunStages(TinyJob(1, 0.05), 1, 1);
  ASSERT_TRUE(unclipped.errors.empty() && reference.errors.empty());
  EXPECT_GT(std::abs(reference.losses.back() - unclipped.losses.back()),
            1e-3 * std::abs(unclipped.losses.back()));
  const Outcome run = RunStages(TinyJob(1, 0.05), 2, 3);
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  ExpectLossesMatch(run.losses, reference.losses);
}

// Each rank's engine::MemoryReport after building its stage (no steps): model states plus frozen
// weights, by group and rank.
struct StageMemory {
  std::vector<int64_t> vision, llm;
  std::vector<absl::Status> errors;
};

StageMemory BuildStagesAndMeasure(const jobspec::JobConfig& job,
                                  const std::shared_ptr<const JobData>& data, int nv, int nl,
                                  int tl) {
  Groups groups(nv, 1, nl, tl);
  transport::InProcessFabric fabric("memory#1", nv, nl, kTimeout);
  StageMemory memory;
  memory.vision.assign(nv, 0);
  memory.llm.assign(nl, 0);
  std::mutex mu;
  auto rank_main = [&](bool vision, int rank) {
    Placement placement = PlacementOf("memory#1", vision, rank, nv, 1, nl, tl);
    const int replica = rank / placement.parallel, index = rank % placement.parallel;
    if (placement.parallel > 1)
      placement.parallel_communicator = groups.tensor[replica]->rank(index);
    auto create = vision ? CreateVisionStage : CreateLlmStage;
    absl::StatusOr<std::unique_ptr<Stage>> stage = create(
        job, data, placement, vision ? groups.vision.rank(rank) : groups.data[index]->rank(replica),
        fabric.Endpoint(vision ? 0 : 1, rank), nullptr);
    std::lock_guard<std::mutex> lock(mu);
    if (!stage.ok()) {
      memory.errors.push_back(stage.status());
      return;
    }
    const engine::MemoryReport report = (*stage)->engine().Memory();
    (vision ? memory.vision : memory.llm)[rank] = report.model_state_bytes() + report.frozen_bytes;
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < nv; ++r) threads.emplace_back(rank_main, true, r);
  for (int r = 0; r < nl; ++r) threads.emplace_back(rank_main, false, r);
  for (auto& t : threads) t.join();
  return memory;
}

// The memory estimate the coordinator checks at submit (jobspec/memory_estimate.h) counts the model
// states each rank's engine holds, at every ZeRO stage and precision, with frozen parameters and
// tensor-parallel shards: equal but for the padding of uneven partitions (under 64 elements of a
// unit per rank here).
TEST(StagesMemoryTest, TheEstimatesModelStatesAreWhatEachEngineHolds) {
  const std::string bf16 = R"("bf16": {"enabled": true})";
  const std::string bf16_full =
      R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true},
         "tandem": {"bf16_update": "kahan"})";
  struct Case {
    int stage;
    std::string precision, vision_freeze;
    int nv, nl, tl;
  };
  for (const Case& c : std::vector<Case>{{0, "", "", 1, 1, 1},
                                         {1, bf16, R"(["blocks.0.*"])", 2, 2, 1},
                                         {2, bf16_full, "", 2, 2, 2},
                                         {3, bf16, R"(["patch_embed.*", "blocks.1.*"])", 2, 4, 2},
                                         {3, bf16_full, "", 3, 2, 1}}) {
    SCOPED_TRACE(absl::StrCat("ZeRO ", c.stage, " ", c.precision, " freeze ", c.vision_freeze, " ",
                              c.nv, "x", c.nl, " TP ", c.tl));
    jobspec::JobConfig job = TinyJob(c.stage, 0, c.vision_freeze, c.precision);
    job.vision.actors = c.nv;
    job.llm.actors = c.nl;
    job.llm.tensor_parallel = c.tl;
    absl::StatusOr<std::shared_ptr<const JobData>> data = OpenJobData(job);
    ASSERT_TRUE(data.ok()) << data.status();
    const StageMemory measured = BuildStagesAndMeasure(job, *data, c.nv, c.nl, c.tl);
    ASSERT_TRUE(measured.errors.empty()) << measured.errors.front();
    job.llm.model.vocab_size = (*data)->text->vocab_size();
    for (const Role group : {Role::kVision, Role::kLlm}) {
      absl::StatusOr<jobspec::MemoryEstimate> estimate = jobspec::EstimateGroupMemory(job, group);
      ASSERT_TRUE(estimate.ok()) << estimate.status();
      const std::vector<int64_t>& ranks = group == Role::kVision ? measured.vision : measured.llm;
      const int64_t most = *std::max_element(ranks.begin(), ranks.end());
      // Padding: fewer than `ranks` elements of each unit, at most 16 bytes each, 40 units.
      EXPECT_LE(std::abs(estimate->model_state_bytes - most), 40 * 16 * std::max(c.nv, c.nl))
          << RoleName(group);
      if (c.nv == 1 && c.nl == 1) {
        EXPECT_EQ(estimate->model_state_bytes, most) << RoleName(group);
      }
    }
  }
}

// A frozen vision group (vision.freeze ["*"]) trains nothing and gets no gradients back; the LLM
// still trains, and 2 x 2 ranks take the steps of one rank each. Freezing changes the losses (the
// encoder no longer learns), so the comparison is not with an unfrozen run.
TEST(StagesFreezeTest, AWhollyFrozenVisionGroupGetsNoGradientsAndStaysFixed) {
  const jobspec::JobConfig job = TinyJob(1, 0, R"(["*"])");
  const Outcome trained = RunStages(TinyJob(1), 1, 1);
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  EXPECT_EQ(reference.llm_bytes_sent, 0);
  EXPECT_GT(trained.llm_bytes_sent, 0);
  const Outcome run = RunStages(job, 2, 2);
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  EXPECT_EQ(run.llm_bytes_sent, 0);
  ExpectLossesMatch(run.losses, reference.losses);
  EXPECT_GT(std::abs(reference.losses.back() - trained.losses.back()),
            1e-4 * std::abs(trained.losses.back()));
  // The encoder after four steps is the untrained one: it moved in the unfrozen run only.
  ASSERT_FALSE(run.vision_weights.empty());
  for (const auto& [name, value] : run.vision_weights) {
    EXPECT_TRUE(at::equal(value, reference.vision_weights.at(name))) << name;
    if (name == "projector.linear_2.weight") {
      EXPECT_FALSE(at::equal(value, trained.vision_weights.at(name)));
    }
  }
}

// Freezing part of the encoder: only the projector trains.
TEST(StagesFreezeTest, APartlyFrozenVisionGroupTrainsTheRestAsOneRankDoes) {
  const jobspec::JobConfig job = TinyJob(3, 0, R"(["patch_embed.*", "blocks.*"])");
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  EXPECT_GT(reference.llm_bytes_sent, 0);
  const Outcome run = RunStages(job, 2, 2);
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  ExpectLossesMatch(run.losses, reference.losses);
  const Outcome initial = RunStages(TinyJob(3, 0, R"(["*"])"), 1, 1);
  for (const auto& [name, value] : run.vision_weights) {
    const bool frozen = name.rfind("patch_embed.", 0) == 0 || name.rfind("blocks.", 0) == 0;
    EXPECT_EQ(at::equal(value, initial.vision_weights.at(name)), frozen) << name;
  }
}

// A pretrained CLIP tower (tests/fixtures/hf/clip_vision: 30 px, a class token LLaVA drops, the
// last block unused) frozen, a new projector and the LLM training: two ranks of each group take the
// steps one rank does, and the tower ends as the checkpoint has it.
TEST(StagesPretrainedTest, AFrozenClipTowerWithANewProjectorTrainsAsOneRankDoes) {
  jobspec::JobConfig job =
      TinyJob(1, 0, R"(["patch_embed.*", "class_token", "positions", "pre_norm.*", "blocks.*"])");
  job.vision.pretrained = std::string(TANDEM_HF_FIXTURES) + "/clip_vision";
  ASSERT_TRUE(hf::ResolvePretrainedModels(job).ok());
  EXPECT_EQ(job.vision.model.image_size, 30);
  EXPECT_EQ(job.vision.model.num_features(), 25);
  EXPECT_DOUBLE_EQ(job.vision.model.image_mean[0], 0.48145466);
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  const Outcome run = RunStages(job, 2, 2);
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  ExpectLossesMatch(run.losses, reference.losses);
  auto tower =
      engine::ReadSafetensors(std::string(TANDEM_HF_FIXTURES) + "/clip_vision/model.safetensors");
  ASSERT_TRUE(tower.ok()) << tower.status();
  std::map<std::string, at::Tensor> theirs(tower->begin(), tower->end());
  EXPECT_TRUE(at::equal(run.vision_weights.at("blocks.1.mlp.fc1.weight"),
                        theirs.at("encoder.layers.1.mlp.fc1.weight")));
  EXPECT_TRUE(at::equal(run.vision_weights.at("class_token").flatten(),
                        theirs.at("embeddings.class_embedding")));
  EXPECT_TRUE(at::equal(run.vision_weights.at("blocks.2.attn.qkv.weight").narrow(0, 0, 32),
                        theirs.at("encoder.layers.2.self_attn.q_proj.weight")));
}

// A LLaVA job of fixture `name` (tests/fixtures/hf) trained on the conversations of `train`: one
// micro-batch of `batch` samples a step, two steps, fp32 ZeRO-1.
jobspec::JobConfig FixtureConversationJob(const std::string& name, const std::string& train,
                                          int64_t max_text_tokens, int64_t batch,
                                          int64_t max_images = 1) {
  jobspec::JobConfig job = TinyJob(1);
  job.data.kind = data::DataConfig::Kind::kConversations;
  job.data.conversations.train_path = train;
  job.data.max_text_tokens = max_text_tokens;
  job.data.max_images_per_sample = max_images;
  job.vision.pretrained = job.llm.pretrained = std::string(TANDEM_HF_FIXTURES) + "/" + name;
  job.schedule.global_batch = batch;
  job.schedule.micro_batches = 1;
  job.schedule.steps = 2;
  const absl::Status resolved = hf::ResolvePretrainedModels(job);
  EXPECT_TRUE(resolved.ok()) << resolved;
  return job;
}

// The first step's loss is the one transformers computed (tests/fixtures/hf/reference/<file>,
// under the fixture's name), and the second step's is lower.
void ExpectTransformersFirstLoss(const Outcome& run, const std::string& file,
                                 const std::string& name) {
  const nlohmann::json expected = nlohmann::json::parse(
      std::ifstream(std::string(TANDEM_HF_FIXTURES) + "/reference/" + file))[name];
  EXPECT_NEAR(run.losses[0], expected["loss"].get<double>(), 1e-4 * expected["loss"].get<double>());
  EXPECT_LT(run.losses[1], run.losses[0]);
}

// A whole LLaVA checkpoint trained on conversations (the fixture's two with an image, one batch):
// the first step's loss is the one transformers' LlavaForConditionalGeneration computes in fp32 for
// the same batch (tests/fixtures/hf/reference/training_loss.json), 2 x 2 ranks take the steps one
// rank each does, and evaluation generates every held-out answer.
class StagesLlavaTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StagesLlavaTest, FirstLossEqualsTransformersAndRanksAgree) {
  const std::string fixtures = TANDEM_HF_FIXTURES;
  const auto dir = std::filesystem::path(::testing::TempDir()) /
                   absl::StrCat("llava_", GetParam(), "_", ::getpid());
  std::filesystem::create_directories(dir);
  {
    nlohmann::json all =
        nlohmann::json::parse(std::ifstream(fixtures + "/reference/conversations.json"));
    nlohmann::json with_images = nlohmann::json::array();
    for (auto& c : all) {
      if (!c.contains("image")) continue;
      c["image"] = "image.png";  // beside the file, as a dataset keeps its images
      with_images.push_back(c);
    }
    ASSERT_EQ(with_images.size(), 2u);
    std::ofstream(dir / "train.json") << with_images.dump();
    std::filesystem::copy_file(fixtures + "/reference/image.png", dir / "image.png",
                               std::filesystem::copy_options::overwrite_existing);
  }
  jobspec::JobConfig job = FixtureConversationJob(GetParam(), (dir / "train.json").string(),
                                                  /*max_text_tokens=*/96, /*batch=*/2);
  job.data.conversations.eval_path = (dir / "train.json").string();
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  ExpectTransformersFirstLoss(reference, "training_loss.json", GetParam());
  EXPECT_EQ(reference.eval.samples, 2);
  const Outcome run = RunStages(job, 2, 2);
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  ExpectLossesMatch(run.losses, reference.losses);
  EXPECT_EQ(run.eval.samples, 2);
  EXPECT_EQ(run.eval.exact, reference.eval.exact);
  EXPECT_EQ(run.eval.correct_tokens, reference.eval.correct_tokens);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StagesLlavaTest,
                         ::testing::Values("clip_llama", "siglip_qwen2"));

// Conversations holding no image, one, or two (different shapes images), as LLaVA-OneVision's files
// mix them, written into `dir`: sample i has images[i % images.size()] images.
std::string WriteMixedConversations(const std::filesystem::path& dir,
                                    const std::vector<int>& images, int samples) {
  std::filesystem::create_directories(dir);
  const data::ShapesDataset shapes(3, 30, data::Split::kTrain, 16);
  for (int i = 0; i < 4; ++i) {
    const absl::Status written =
        data::WritePng(shapes.Render(i).image, (dir / absl::StrCat("s", i, ".png")).string());
    EXPECT_TRUE(written.ok()) << written;
  }
  const char* colours[] = {"Red.", "Blue.", "Green.", "Yellow."};
  nlohmann::json all = nlohmann::json::array();
  for (int i = 0; i < samples; ++i) {
    const int n = images[i % images.size()];
    nlohmann::json c;
    std::string question;
    if (n > 0) c["image"] = nlohmann::json::array();
    for (int k = 0; k < n; ++k) {
      c["image"].push_back(absl::StrCat("s", (i + k) % 4, ".png"));
      question += "<image>";
    }
    question += n == 0 ? absl::StrCat("Say ", i % 7, ".") : "Colour?";
    c["conversations"] = {{{"from", "human"}, {"value", question}},
                          {{"from", "gpt"}, {"value", colours[(i * 3 + n) % 4]}}};
    all.push_back(c);
  }
  std::ofstream(dir / "train.json") << all.dump();
  return (dir / "train.json").string();
}

// A LLaVA job on mixed conversations: 2 micro-batches of 6 samples, at most two images a sample.
jobspec::JobConfig MixedLlavaJob(int stage, const std::string& train) {
  jobspec::JobConfig job = TinyJob(stage);
  job.data.kind = data::DataConfig::Kind::kConversations;
  job.data.conversations.train_path = train;
  job.data.conversations.eval_path = train;
  job.data.max_text_tokens = 56;
  job.data.max_images_per_sample = 2;
  job.vision.pretrained = job.llm.pretrained = std::string(TANDEM_HF_FIXTURES) + "/clip_llama";
  job.schedule.global_batch = 12;
  job.schedule.micro_batches = 2;
  job.schedule.steps = 3;
  job.schedule.eval_samples = 6;
  const absl::Status resolved = hf::ResolvePretrainedModels(job);
  EXPECT_TRUE(resolved.ok()) << resolved;
  return job;
}

// Samples with 0, 1 and 2 images: the vision group encodes images, not samples, and sends each
// one to the LLM replica that owns its sample; 2x2, 1x3 and 3x1 ranks, balanced or not, take the
// steps one rank each does, and evaluate the same answers.
class StagesMixedTest : public ::testing::TestWithParam<int> {};

TEST_P(StagesMixedTest, MixedSamplesTrainAsOneRankEachAtAnyRatio) {
  const auto dir = std::filesystem::path(::testing::TempDir()) /
                   absl::StrCat("mixed_", GetParam(), "_", ::getpid());
  const jobspec::JobConfig job =
      MixedLlavaJob(GetParam(), WriteMixedConversations(dir, {0, 1, 2, 1, 0, 2, 1}, 24));
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  EXPECT_EQ(reference.eval.samples, 6);
  for (const auto& [nv, nl] : std::vector<std::pair<int, int>>{{2, 2}, {1, 3}, {3, 1}}) {
    SCOPED_TRACE(absl::StrCat(nv, "x", nl));
    const Outcome run = RunStages(job, nv, nl);
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    ExpectLossesMatch(run.losses, reference.losses);
    EXPECT_EQ(run.eval.samples, 6);
    EXPECT_EQ(run.eval.correct_tokens, reference.eval.correct_tokens);
    // Planned work: every step's images once over the vision ranks, within one image of each
    // other (two micro-batches: two); unpacked rows of one length, as many on every LLM rank.
    for (size_t s = 0; s < run.vision_planned.size(); ++s) {
      const std::vector<double>& tiles = run.vision_planned[s];
      EXPECT_GT(reference.vision_planned[s][0], 0);
      EXPECT_EQ(std::accumulate(tiles.begin(), tiles.end(), 0.0), reference.vision_planned[s][0]);
      EXPECT_LE(*std::max_element(tiles.begin(), tiles.end()) -
                    *std::min_element(tiles.begin(), tiles.end()),
                2);
      const std::vector<double>& rows = run.llm_planned[s];
      EXPECT_GT(rows[0], 0);
      EXPECT_THAT(rows, ::testing::Each(rows[0]));
      EXPECT_DOUBLE_EQ(rows[0] * nl, reference.llm_planned[s][0]);
    }
  }
  jobspec::JobConfig contiguous = job;
  contiguous.schedule.balance = false;
  const Outcome unbalanced = RunStages(contiguous, 2, 2);
  ASSERT_TRUE(unbalanced.errors.empty()) << unbalanced.errors.front();
  ExpectLossesMatch(unbalanced.losses, reference.losses);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, StagesMixedTest, ::testing::Values(1, 3));

// Sequence packing (data.pack_tokens): the same samples packed into rows of 128 positions take the
// steps they take a row each (fp32, 1e-5 at one rank each), at 2x2 ranks, with the LLM
// tensor-parallel, and at ZeRO-3, where each decoder block is recomputed with its mask.
TEST(StagesPackingTest, PackedRowsTakeTheStepsOfARowEachAtAnyLayout) {
  const auto dir =
      std::filesystem::path(::testing::TempDir()) / absl::StrCat("packed_", ::getpid());
  const std::string train = WriteMixedConversations(dir, {0, 1, 2, 1, 0, 2, 1}, 24);
  for (const int stage : {1, 3}) {
    SCOPED_TRACE(absl::StrCat("ZeRO ", stage));
    const jobspec::JobConfig job = MixedLlavaJob(stage, train);
    const Outcome reference = RunStages(job, 1, 1);
    ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
    jobspec::JobConfig packed = job;
    packed.data.pack_tokens = 128;
    const Outcome one = RunStages(packed, 1, 1);
    ASSERT_TRUE(one.errors.empty()) << one.errors.front();
    for (size_t i = 0; i < reference.losses.size(); ++i) {
      EXPECT_NEAR(one.losses[i], reference.losses[i], 1e-5 * std::abs(reference.losses[i]))
          << "step " << i + 1;
    }
    EXPECT_EQ(one.eval.correct_tokens, reference.eval.correct_tokens);
    // Every row a sample padded to two images and 56 text tokens wastes most positions; packed
    // rows of 128 waste few. Both count every sample's positions once.
    ASSERT_GT(reference.llm_positions, 0);
    ASSERT_GT(one.llm_positions, 0);
    const double padded = static_cast<double>(reference.llm_padding) / reference.llm_positions;
    const double packed_waste = static_cast<double>(one.llm_padding) / one.llm_positions;
    EXPECT_EQ(reference.llm_positions - reference.llm_padding, one.llm_positions - one.llm_padding);
    EXPECT_GT(padded, 0.3);
    EXPECT_LT(packed_waste, padded / 2);
    const Outcome four = RunStages(packed, 2, 2);
    ASSERT_TRUE(four.errors.empty()) << four.errors.front();
    ExpectLossesMatch(four.losses, reference.losses);
    const Outcome tensor = RunStages(packed, 1, 2, /*fail_step=*/0, /*sv=*/1, /*tl=*/2);
    ASSERT_TRUE(tensor.errors.empty()) << tensor.errors.front();
    ExpectLossesMatch(tensor.losses, reference.losses);
  }
  // A sample longer than a packed row is named with both numbers.
  jobspec::JobConfig narrow = MixedLlavaJob(1, train);
  narrow.data.pack_tokens = 40;
  const Outcome refused = RunStages(narrow, 1, 1);
  ASSERT_FALSE(refused.errors.empty());
  EXPECT_THAT(std::string(refused.errors.front().message()),
              HasSubstr("positions (images and text), more than data.pack_tokens = 40"));
  std::filesystem::remove_all(dir);
}

// Mostly text: in every step some vision replica encodes no image (a whole micro-batch may have
// none), yet it takes part in every collective: no hang at ZeRO-3 or with sequence parallelism,
// and the losses are one rank each's.
TEST(StagesMixedTest, AVisionRankWithNoImageStillTakesPartInEveryCollective) {
  const auto dir =
      std::filesystem::path(::testing::TempDir()) / absl::StrCat("text_mostly_", ::getpid());
  const jobspec::JobConfig job =
      MixedLlavaJob(3, WriteMixedConversations(dir, {1, 0, 0, 0, 0, 0, 0, 0}, 24));
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  const Outcome three = RunStages(job, 3, 1);
  ASSERT_TRUE(three.errors.empty()) << three.errors.front();
  ExpectLossesMatch(three.losses, reference.losses);
  // Two sequence-parallel replicas of two ranks each.
  const Outcome sequence = RunStages(job, 4, 2, /*fail_step=*/0, /*sv=*/2);
  ASSERT_TRUE(sequence.errors.empty()) << sequence.errors.front();
  ExpectLossesMatch(sequence.losses, reference.losses);
  std::filesystem::remove_all(dir);
}

// Samples holding two, none, one and two images in one batch (LLaVA-OneVision's lists and a text
// turn): the first loss is the one transformers' LLaVA computes in fp32 for the same batch
// (tests/fixtures/hf/reference/multi_image.json), and 2x2, 1x4 and 4x1 ranks take the same steps
// (at 1x4 the text-only sample's LLM rank receives no image).
TEST_P(StagesLlavaTest, SeveralImagesASampleOrNoneGiveTransformersLoss) {
  const std::string fixtures = TANDEM_HF_FIXTURES;
  const auto dir = std::filesystem::path(::testing::TempDir()) /
                   absl::StrCat("llava_multi_", GetParam(), "_", ::getpid());
  std::filesystem::create_directories(dir);
  for (const char* file : {"multi_image_conversations.json", "image.png", "image2.png"}) {
    std::filesystem::copy_file(fixtures + "/reference/" + file, dir / file,
                               std::filesystem::copy_options::overwrite_existing);
  }
  jobspec::JobConfig job =
      FixtureConversationJob(GetParam(), (dir / "multi_image_conversations.json").string(),
                             /*max_text_tokens=*/78, /*batch=*/4, /*max_images=*/2);
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  ExpectTransformersFirstLoss(reference, "multi_image.json", GetParam());
  for (const auto& [nv, nl] : std::vector<std::pair<int, int>>{{2, 2}, {1, 4}, {4, 1}}) {
    SCOPED_TRACE(absl::StrCat(nv, "x", nl));
    const Outcome run = RunStages(job, nv, nl);
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    ExpectLossesMatch(run.losses, reference.losses);
  }
  std::filesystem::remove_all(dir);
}

// LLaVA-NeXT checkpoints (any-resolution tiles, the newline embedding) trained on conversations
// with images of three sizes, a text-only sample and two images a sample: the first step's loss
// is the one transformers' LlavaNextForConditionalGeneration computes in fp32 for the batch
// (tests/fixtures/hf/reference/<fixture>.json), and over 20 steps the vision ranks, splitting the
// tiles by count, and the LLM ranks take the steps one rank each does (the colocated placement),
// balanced, and packed too; 4x1 and 1x4 over the first two steps.
class StagesLlavaNextTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StagesLlavaNextTest, TilesGiveTransformersLossAndRanksAgree) {
  const std::string fixtures = TANDEM_HF_FIXTURES;
  const auto dir = std::filesystem::path(::testing::TempDir()) /
                   absl::StrCat("llava_next_", GetParam(), "_", ::getpid());
  std::filesystem::create_directories(dir);
  for (const char* file : {"next_conversations.json", "image.png", "image2.png", "tall.png"}) {
    std::filesystem::copy_file(fixtures + "/reference/" + file, dir / file,
                               std::filesystem::copy_options::overwrite_existing);
  }
  jobspec::JobConfig job =
      FixtureConversationJob(GetParam(), (dir / "next_conversations.json").string(),
                             /*max_text_tokens=*/78, /*batch=*/4, /*max_images=*/2);
  ASSERT_TRUE(job.vision.model.any_res());
  ASSERT_TRUE(job.llm.model.image_newline);
  job.schedule.steps = 20;  // the same batch 20 times: the losses fall through a wide range
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  const nlohmann::json expected = nlohmann::json::parse(
      std::ifstream(fixtures + "/reference/" + GetParam() + ".json"))["training"];
  EXPECT_NEAR(reference.losses[0], expected["loss"].get<double>(),
              1e-4 * expected["loss"].get<double>());
  EXPECT_LT(reference.losses[1], reference.losses[0]);
  const Outcome two_by_two = RunStages(job, 2, 2);
  ASSERT_TRUE(two_by_two.errors.empty()) << two_by_two.errors.front();
  ExpectLossesMatch(two_by_two.losses, reference.losses);
  // The other shapes over the first two steps.
  jobspec::JobConfig short_job = job;
  short_job.schedule.steps = 2;
  const std::vector<double> first_two(reference.losses.begin(), reference.losses.begin() + 2);
  for (const auto& [nv, nl] : std::vector<std::pair<int, int>>{{4, 1}, {1, 4}}) {
    SCOPED_TRACE(absl::StrCat(nv, "x", nl));
    const Outcome run = RunStages(short_job, nv, nl);
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    ExpectLossesMatch(run.losses, first_two);
  }
  job.data.pack_tokens = 400;
  const Outcome packed = RunStages(job, 2, 2);
  ASSERT_TRUE(packed.errors.empty()) << packed.errors.front();
  ExpectLossesMatch(packed.losses, reference.losses);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StagesLlavaNextTest,
                         ::testing::Values("clip_llama_next", "siglip_qwen2_next"));

// Conversations for Tandem's own models with LLaVA-NeXT's tiles, written into `dir`: shapes images
// of 32 x 32, 32 x 64 and 64 x 32 pixels (two, three and three tiles), none, one or two a sample.
std::string WriteAnyResConversations(const std::filesystem::path& dir, int samples) {
  std::filesystem::create_directories(dir);
  const data::ShapesDataset shapes(3, 32, data::Split::kTrain, 16);
  const auto joined = [&shapes](int first, bool wide) {
    const data::Image a = shapes.Render(first).image, b = shapes.Render(first + 1).image;
    data::Image out;
    out.height = wide ? 32 : 64;
    out.width = wide ? 64 : 32;
    out.pixels.resize(3 * 64 * 32);
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t y = 0; y < out.height; ++y) {
        for (int64_t x = 0; x < out.width; ++x) {
          const bool second = wide ? x >= 32 : y >= 32;
          out.at(c, y, x) = (second ? b : a).at(c, y % 32, x % 32);
        }
      }
    }
    return out;
  };
  const std::vector<data::Image> images = {shapes.Render(0).image, joined(1, true),
                                           joined(3, false), shapes.Render(5).image};
  for (size_t i = 0; i < images.size(); ++i) {
    const absl::Status written =
        data::WritePng(images[i], (dir / absl::StrCat("a", i, ".png")).string());
    EXPECT_TRUE(written.ok()) << written;
  }
  const char* colours[] = {"red", "blue", "green", "yellow"};
  const int counts[] = {0, 1, 2, 1, 2, 1};
  nlohmann::json all = nlohmann::json::array();
  for (int i = 0; i < samples; ++i) {
    const int n = counts[i % 6];
    nlohmann::json c;
    std::string question = n == 0 ? absl::StrCat("Say ", i % 5, ".") : "Which colour?";
    for (int k = 0; k < n; ++k) {
      c["image"].push_back(absl::StrCat("a", (i + k) % images.size(), ".png"));
      question = (k == 0 ? "<image>\n" : "<image> ") + question;
    }
    c["conversations"] = {{{"from", "human"}, {"value", question}},
                          {{"from", "gpt"}, {"value", colours[(i * 3 + n) % 4]}}};
    all.push_back(c);
  }
  std::ofstream(dir / "train.json") << all.dump();
  return (dir / "train.json").string();
}

// Tandem's own tower and LLM from scratch on conversations with LLaVA-NeXT's tiles
// (vision.model.grid_pinpoints): the word tokenizer places each image's positions at its mark, so
// over 20 steps 2x2 ranks, balanced and packed, take the steps of one rank each, and evaluate the
// same answers; the vision ranks split the tiles by count.
TEST(StagesOwnModelsTest, MixedAnyResConversationsTrainAsOneRankEach) {
  const auto dir =
      std::filesystem::path(::testing::TempDir()) / absl::StrCat("own_next_", ::getpid());
  const std::string train = WriteAnyResConversations(dir, 24);
  const std::string engine =
      R"({"zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 0.002}}})";
  const std::string spec = absl::StrCat(R"({
    "name": "own-next",
    "data": {"conversations": {"train": ")",
                                        train, R"(", "eval": ")", train, R"("},
             "max_text_tokens": 16, "max_images_per_sample": 2},
    "vision": {"model": {"preset": "vit-tiny", "grid_pinpoints": [[32, 32], [32, 64], [64, 32]]},
               "engine": )",
                                        engine, R"(},
    "llm": {"model": {"preset": "llm-tiny", "max_seq_len": 128}, "engine": )",
                                        engine, R"(},
    "schedule": {"global_batch": 12, "micro_batches": 2, "steps": 20, "seed": 11,
                 "eval_samples": 6}})");
  absl::StatusOr<jobspec::JobConfig> job = jobspec::ParseJobSpecJson(spec, "own_next.json");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(job->llm.model.image_newline);
  const Outcome reference = RunStages(*job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  EXPECT_LT(reference.losses.back(), reference.losses.front() / 2);
  EXPECT_EQ(reference.eval.samples, 6);
  const Outcome four = RunStages(*job, 2, 2);
  ASSERT_TRUE(four.errors.empty()) << four.errors.front();
  ExpectLossesMatch(four.losses, reference.losses);
  EXPECT_EQ(four.eval.correct_tokens, reference.eval.correct_tokens);
  job->data.pack_tokens = 128;
  const Outcome packed = RunStages(*job, 2, 2);
  ASSERT_TRUE(packed.errors.empty()) << packed.errors.front();
  ExpectLossesMatch(packed.losses, reference.losses);
  EXPECT_LT(static_cast<double>(packed.llm_padding) / packed.llm_positions,
            static_cast<double>(reference.llm_padding) / reference.llm_positions / 2);
  std::filesystem::remove_all(dir);
}

// NOTE [Snapshots in memory]: each rank of nv x nl runs steps [first, last] of `job` in attempt
// `attempt`, after restoring `restore` (its rank's snapshot bytes, by role and rank; none: from
// scratch), and hands back what it holds of its snapshots. Adds the LLM ranks' losses to `losses`.
struct Attempt {
  std::map<std::pair<bool, int>, HeldSnapshots> held;  // by (vision, rank)
  std::vector<absl::Status> errors;
};
Attempt RunAttempt(const jobspec::JobConfig& job, int nv, int nl, int attempt, int64_t first,
                   int64_t last, const std::map<std::pair<bool, int>, std::string>& restore,
                   std::vector<double>& losses, int tl = 1) {
  absl::StatusOr<std::shared_ptr<const JobData>> data = OpenJobData(job);
  EXPECT_TRUE(data.ok()) << data.status();
  Groups groups(nv, 1, nl, tl);
  const std::string key = absl::StrCat("snapshots#", attempt);
  transport::InProcessFabric fabric(key, nv, nl, kTimeout);
  Attempt out;
  std::mutex mu;
  auto rank_main = [&](bool vision, int rank) {
    auto create = vision ? CreateVisionStage : CreateLlmStage;
    Placement placement = PlacementOf(key, vision, rank, nv, 1, nl, tl);
    const int replica = rank / placement.parallel, index = rank % placement.parallel;
    if (!vision && tl > 1) placement.parallel_communicator = groups.tensor[replica]->rank(index);
    absl::StatusOr<std::unique_ptr<Stage>> stage =
        create(job, *data, placement,
               vision ? groups.vision.rank(rank) : groups.data[index]->rank(replica),
               fabric.Endpoint(vision ? 0 : 1, rank), nullptr);
    absl::Status status = stage.status();
    if (status.ok() && !restore.empty()) {
      absl::StatusOr<ResumePoint> point =
          (*stage)->RestoreSnapshot(restore.at({vision, rank}), "a snapshot");
      status = point.status();
      if (status.ok()) {
        EXPECT_EQ(point->step, first - 1);
      }
    }
    for (int64_t step = first; status.ok() && step <= last; ++step) {
      absl::StatusOr<StepResult> result = (*stage)->RunStep(step);
      status = result.status();
      if (status.ok() && !vision) {
        std::lock_guard<std::mutex> lock(mu);
        losses[step - 1] += result->loss;
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    if (!status.ok()) {
      out.errors.push_back(status);
      fabric.Abort();
      return;
    }
    out.held[{vision, rank}] = (*stage)->TakeHeldSnapshots();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < nv; ++r) threads.emplace_back(rank_main, true, r);
  for (int r = 0; r < nl; ++r) threads.emplace_back(rank_main, false, r);
  for (auto& t : threads) t.join();
  return out;
}

// A restart after a lost rank resumes from memory: with a snapshot every 2 steps, 2 vision and 3
// LLM ranks run 5 steps and one rank is lost (every stage is built again, as a restarted job's
// are); the others restore their own state of step 4 and the lost one the copy its buddy holds;
// steps 5 and 6 then take exactly the losses of the run that never stopped, whichever rank was
// lost. Each rank kept its last two snapshots (steps 2 and 4) and one copy a rank it is the buddy
// of (vision rank 0 holds LLM ranks 0 and 2's).
TEST(StagesSnapshotTest, ALostRankRestoresFromItsBuddysCopyAndTheRunGoesOnExactly) {
  for (const int stage : {1, 3}) {
    SCOPED_TRACE(absl::StrCat("ZeRO ", stage));
    jobspec::JobConfig job = TinyJob(stage);
    job.schedule.steps = 6;
    const Outcome reference = RunStages(job, 2, 3);
    ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
    job.snapshot_every = 2;
    std::vector<double> losses(6, 0.0);
    Attempt first = RunAttempt(job, 2, 3, 1, 1, 5, {}, losses);
    ASSERT_TRUE(first.errors.empty()) << first.errors.front();
    for (int s = 0; s < 5; ++s) EXPECT_EQ(losses[s], reference.losses[s]) << "step " << s + 1;
    const HeldSnapshots& vision0 = first.held.at({true, 0});
    EXPECT_EQ(vision0.own.size(), 2u);
    EXPECT_EQ(vision0.own.begin()->first, 2);
    ASSERT_EQ(vision0.copies.size(), 2u);
    EXPECT_EQ(vision0.copies.at(0).first, 4);
    EXPECT_EQ(vision0.copies.at(2).first, 4);
    EXPECT_EQ(first.held.at({false, 1}).copies.at(1).first, 4);  // vision rank 1's
    EXPECT_EQ(vision0.bytes(),
              static_cast<int64_t>(vision0.own.at(2).size() + vision0.own.at(4).size() +
                                   vision0.copies.at(0).second.size() +
                                   vision0.copies.at(2).second.size()));
    for (const auto& [vision, rank] : {std::pair{true, 1}, std::pair{false, 2}}) {
      SCOPED_TRACE(absl::StrCat(vision ? "vision" : "llm", " rank ", rank, " lost"));
      std::map<std::pair<bool, int>, std::string> restore;
      for (const auto& [who, held] : first.held) restore[who] = held.own.at(4);
      // The lost rank's own memory is gone: its buddy's copy stands in.
      const int buddy = vision ? rank % 3 : rank % 2;
      const auto& [step, copy] = first.held.at({!vision, buddy}).copies.at(rank);
      ASSERT_EQ(step, 4);
      restore[{vision, rank}] = copy;
      std::vector<double> resumed(6, 0.0);
      Attempt second = RunAttempt(job, 2, 3, 2, 5, 6, restore, resumed);
      ASSERT_TRUE(second.errors.empty()) << second.errors.front();
      EXPECT_EQ(resumed[4], reference.losses[4]);
      EXPECT_EQ(resumed[5], reference.losses[5]);
    }
  }
}

// With the LLM tensor-parallel (2 replicas of 2 ranks), each rank's snapshot is its engine
// group's shard: LLM rank 3 (replica 1, second half of each matrix) lost and restored from vision
// rank 1's copy, the run goes on with the uninterrupted losses.
TEST(StagesSnapshotTest, ATensorParallelRankRestoresItsOwnShardFromItsBuddysCopy) {
  jobspec::JobConfig job = TinyJob(1);
  job.schedule.steps = 6;
  const Outcome reference = RunStages(job, 2, 4, 0, 1, /*tl=*/2);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  job.snapshot_every = 2;
  std::vector<double> losses(6, 0.0);
  Attempt first = RunAttempt(job, 2, 4, 1, 1, 5, {}, losses, /*tl=*/2);
  ASSERT_TRUE(first.errors.empty()) << first.errors.front();
  std::map<std::pair<bool, int>, std::string> restore;
  for (const auto& [who, held] : first.held) restore[who] = held.own.at(4);
  restore[{false, 3}] = first.held.at({true, 1}).copies.at(3).second;
  std::vector<double> resumed(6, 0.0);
  Attempt second = RunAttempt(job, 2, 4, 2, 5, 6, restore, resumed, /*tl=*/2);
  ASSERT_TRUE(second.errors.empty()) << second.errors.front();
  EXPECT_EQ(resumed[4], reference.losses[4]);
  EXPECT_EQ(resumed[5], reference.losses[5]);
}

// A job resuming from a checkpoint keeps the word tokenizer saved there: the shapes conversations
// count their words differently from the captions, so a vocabulary built again would number them
// differently from the weights.
// A data set's samples with each call for a sample's text counted: what encodes it.
class CountingDataset final : public data::Dataset {
 public:
  explicit CountingDataset(const data::Dataset& inner) : inner_(inner) {}
  int64_t size() const override { return inner_.size(); }
  absl::Status Check(int64_t index) const override { return inner_.Check(index); }
  absl::StatusOr<data::Example> Get(int64_t index) const override { return inner_.Get(index); }
  int64_t ImageCount(int64_t index) const override { return inner_.ImageCount(index); }
  absl::StatusOr<data::Image> GetImage(int64_t index, int64_t image) const override {
    return inner_.GetImage(index, image);
  }
  absl::StatusOr<std::vector<data::Image>> GetTiles(int64_t index, int64_t image) const override {
    return inner_.GetTiles(index, image);
  }
  absl::StatusOr<data::Resolution> ImageSize(int64_t index, int64_t image) const override {
    return inner_.ImageSize(index, image);
  }
  std::string Text(int64_t index) const override { return inner_.Text(index); }
  std::vector<tokenizer::ChatMessage> Messages(int64_t index) const override {
    ++encoded_;
    return inner_.Messages(index);
  }
  std::string Describe(int64_t index) const override { return inner_.Describe(index); }
  int64_t encoded() const { return encoded_; }

 private:
  const data::Dataset& inner_;
  mutable std::atomic<int64_t> encoded_{0};
};

// RunStages over `data` with its training set's texts counted: the outcome and the count.
std::pair<Outcome, int64_t> CountedRun(const jobspec::JobConfig& job, const JobData& data, int nv,
                                       int nl) {
  auto counted = std::make_shared<JobData>();
  auto counting = std::make_unique<CountingDataset>(*data.datasets.train);
  const CountingDataset& counter = *counting;
  counted->datasets.train = std::move(counting);
  counted->text = data.text;
  counted->train_order = data.train_order;
  Outcome run = RunStages(job, nv, nl, 0, 1, 1, 0, "", "", counted);
  return {std::move(run), counter.encoded()};
}

// A row a sample, each sample's text is encoded once, by the LLM replica that trains on it (the
// replicas sum their target counts), not by every LLM rank: 2x2 ranks encode the step's samples
// once, as one rank does, and take its steps.
TEST(StagesTextTest, EachSampleIsEncodedOnceByTheReplicaThatTrainsOnIt) {
  const jobspec::JobConfig job = TinyJob(1);
  absl::StatusOr<std::shared_ptr<const JobData>> opened = OpenJobData(job);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  for (const int nl : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("2x", nl));
    const auto [run, encoded] = CountedRun(job, **opened, 2, nl);
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    ExpectLossesMatch(run.losses, reference.losses);
    EXPECT_EQ(encoded, kSteps * job.schedule.global_batch);
  }
}

// Packed (NOTE [Packed text] in step/stage.h): each vision rank counts the step's samples' tokens
// ahead of the step and sends the counts; the LLM replica that trains on a sample encodes it, no
// other LLM rank: V + 1 encodings a sample, whatever the LLM ranks, and one rank's steps.
TEST(StagesTextTest, PackedEachSampleIsCountedByTheVisionRanksAndEncodedByItsReplica) {
  const auto dir =
      std::filesystem::path(::testing::TempDir()) / absl::StrCat("packed_text_", ::getpid());
  const std::string train = WriteMixedConversations(dir, {0, 1, 2, 1, 0, 2, 1}, 24);
  jobspec::JobConfig job = MixedLlavaJob(1, train);
  job.data.pack_tokens = 128;
  absl::StatusOr<std::shared_ptr<const JobData>> opened = OpenJobData(job);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  for (const auto& [nv, nl] : {std::pair{1, 2}, std::pair{2, 2}, std::pair{1, 1}}) {
    SCOPED_TRACE(absl::StrCat(nv, "x", nl));
    const auto [run, encoded] = CountedRun(job, **opened, nv, nl);
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    ExpectLossesMatch(run.losses, reference.losses);
    EXPECT_EQ(encoded, job.schedule.steps * job.schedule.global_batch * (nv + 1));
  }
  std::filesystem::remove_all(dir);
}

// One sample of a shard of shapes captions: shapes train sample `shape`'s image and caption, good,
// or bad: its image not an image, or without its text.
struct ShardSample {
  int shape = 0;
  enum Kind { kGood, kCorruptImage, kNoText } kind = kGood;
};

// A tar shard of `samples` (keys "000000", "000001", ...) in `dir`; returns its path.
std::string WriteShapesShard(const std::filesystem::path& dir, const std::string& name,
                             const std::vector<ShardSample>& samples) {
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  const data::ShapesDataset shapes(3, 32, data::Split::kTrain, 64);
  absl::StatusOr<data::TarWriter> tar = data::TarWriter::Create(path);
  EXPECT_TRUE(tar.ok()) << tar.status();
  for (size_t i = 0; i < samples.size(); ++i) {
    const std::string key = absl::StrFormat("%06d", i);
    absl::StatusOr<data::Example> example = shapes.Get(samples[i].shape);
    absl::StatusOr<std::string> png = data::EncodePng(example->image);
    EXPECT_TRUE(png.ok()) << png.status();
    if (samples[i].kind != ShardSample::kNoText) {
      EXPECT_TRUE(tar->Add(key + ".json", nlohmann::json{{"caption", example->text}}.dump()).ok());
    }
    EXPECT_TRUE(
        tar->Add(key + ".png", samples[i].kind == ShardSample::kCorruptImage ? "not a png" : *png)
            .ok());
  }
  EXPECT_TRUE(tar->Close().ok());
  return path;
}

// A tiny captioning job on shards: fp32 engines at ZeRO 1, `global_batch` samples a step in two
// micro-batches, bad samples skipped or not.
jobspec::JobConfig ShardJob(const std::string& shards, int64_t global_batch,
                            const std::string& on_bad_sample) {
  const std::string engine =
      R"({"zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 0.002}}})";
  const std::string spec =
      absl::StrCat(R"({"name": "skip", "data": {"shards": {"train": ")", shards,
                   R"("}, "max_text_tokens": 12, "on_bad_sample": ")", on_bad_sample, R"("},
  "vision": {"model": {"preset": "vit-tiny"}, "engine": )",
                   engine, R"(},
  "llm": {"model": {"preset": "llm-tiny"}, "engine": )",
                   engine, R"(},
  "schedule": {"global_batch": )",
                   global_batch, R"(, "micro_batches": 2, "steps": )", kSteps, R"(, "seed": 11}})");
  absl::StatusOr<jobspec::JobConfig> job = jobspec::ParseJobSpecJson(spec, "skip.json");
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

// NOTE [Bad samples] in step/stage.h: a step whose bad samples are left out trains as a step of
// its good samples alone, one rank each or 2x2 (where the vision ranks that read the corrupt
// images tell the others), and every rank counts them.
TEST(StagesBadSamplesTest, SkippedSamplesTrainAsTheGoodSamplesAloneAtAnyLayout) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / absl::StrCat("bad_", ::getpid());
  using S = ShardSample;
  // The bad samples' captions repeat the good ones', so both data sets build the same vocabulary.
  const std::string with_bad = WriteShapesShard(
      dir, "with_bad.tar",
      {{0, S::kGood}, {0, S::kCorruptImage}, {1, S::kGood}, {1, S::kCorruptImage}});
  const std::string good = WriteShapesShard(dir, "good.tar", {{0, S::kGood}, {1, S::kGood}});
  const Outcome reference = RunStages(ShardJob(good, 2, "fail"), 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  EXPECT_THAT(reference.vision_skipped, ::testing::Each(0));
  const jobspec::JobConfig job = ShardJob(with_bad, 4, "skip");
  for (const auto& [nv, nl] : std::vector<std::pair<int, int>>{{1, 1}, {2, 2}}) {
    SCOPED_TRACE(absl::StrCat(nv, "x", nl));
    const Outcome run = RunStages(job, nv, nl);
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    ExpectLossesMatch(run.losses, reference.losses);
    EXPECT_THAT(run.vision_skipped, ::testing::Each(2));
    EXPECT_THAT(run.llm_skipped, ::testing::Each(2));
  }
  // Failing on them instead: the error names the shard, the image's member and its byte.
  const Outcome failed = RunStages(ShardJob(with_bad, 4, "fail"), 1, 1);
  ASSERT_FALSE(failed.errors.empty());
  bool named = false;
  for (const absl::Status& error : failed.errors) {
    named |= absl::StrContains(error.message(), with_bad + ": 00000") &&
             absl::StrContains(error.message(), ".png (byte ") &&
             absl::StrContains(error.message(), "not a PNG or JPEG file");
  }
  EXPECT_TRUE(named) << failed.errors.front();
  std::filesystem::remove_all(dir);
}

// Bad tables (no text) and bad images over two epochs: every layout leaves out the same samples,
// each time it draws them.
TEST(StagesBadSamplesTest, EveryLayoutLeavesOutTheSameSamplesEachEpoch) {
  const auto dir =
      std::filesystem::path(::testing::TempDir()) / absl::StrCat("bad_epochs_", ::getpid());
  using S = ShardSample;
  const std::string shard = WriteShapesShard(
      dir, "mixed.tar", {{0}, {1}, {2, S::kNoText}, {3}, {4, S::kCorruptImage}, {5}, {6}, {7}});
  const jobspec::JobConfig job = ShardJob(shard, 4, "skip");  // 4 steps: 2 epochs of 8
  const Outcome reference = RunStages(job, 1, 1);
  ASSERT_TRUE(reference.errors.empty()) << reference.errors.front();
  EXPECT_EQ(std::accumulate(reference.vision_skipped.begin(), reference.vision_skipped.end(), 0),
            4);
  const Outcome run = RunStages(job, 2, 2);
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  ExpectLossesMatch(run.losses, reference.losses);
  EXPECT_EQ(run.vision_skipped, reference.vision_skipped);
  EXPECT_EQ(run.llm_skipped, reference.vision_skipped);
  std::filesystem::remove_all(dir);
}

TEST(StagesBadSamplesTest, AStepWithFewerGoodSamplesThanMicroBatchesIsNamed) {
  const auto dir =
      std::filesystem::path(::testing::TempDir()) / absl::StrCat("bad_most_", ::getpid());
  using S = ShardSample;
  const std::string shard = WriteShapesShard(
      dir, "most_bad.tar", {{0}, {0, S::kCorruptImage}, {0, S::kCorruptImage}, {0, S::kNoText}});
  const Outcome run = RunStages(ShardJob(shard, 4, "skip"), 1, 1);
  ASSERT_FALSE(run.errors.empty());
  EXPECT_THAT(std::string(run.errors.front().message()),
              HasSubstr("step 1: 1 of its 4 samples can be read, fewer than "
                        "schedule.micro_batches = 2"));
  std::filesystem::remove_all(dir);
}

TEST(JobDataTest, AResumedJobKeepsTheCheckpointsVocabulary) {
  jobspec::JobConfig job = TinyJob(0);
  job.data.shapes.conversations = true;
  const auto checkpoint =
      std::filesystem::path(::testing::TempDir()) / absl::StrCat("resume_words_", ::getpid());
  std::filesystem::create_directories(checkpoint);
  jobspec::JobConfig captions = TinyJob(0);
  auto trained = OpenJobData(captions);
  ASSERT_TRUE(trained.ok()) << trained.status();
  ASSERT_TRUE((*trained)->text->words()->Save((checkpoint / "tokenizer.json").string()).ok());

  auto rebuilt = OpenJobData(job);
  auto resumed = OpenJobData(job, checkpoint.string());
  ASSERT_TRUE(rebuilt.ok() && resumed.ok());
  EXPECT_EQ((*resumed)->text->words()->words(), (*trained)->text->words()->words());
  EXPECT_NE((*rebuilt)->text->words()->words(), (*trained)->text->words()->words());
  // Same words, other ids; the conversations' image token after them.
  EXPECT_EQ((*rebuilt)->text->words()->size(), (*trained)->text->words()->size());
  EXPECT_EQ((*resumed)->text->image_token_id(), (*trained)->text->words()->size());
}

TEST(StagesPretrainedTest, AMissingTowerIsNamed) {
  jobspec::JobConfig job = TinyJob(1);
  job.vision.pretrained = "/nonexistent/tower";
  const absl::Status status = hf::ResolvePretrainedModels(job);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("vision.pretrained: /nonexistent/tower/config.json"));
}

TEST(StagesFreezeTest, APatternThatMatchesNothingOrFreezesAllWithoutStarIsNamed) {
  const Outcome typo = RunStages(TinyJob(0, 0, R"(["patch_embed.*", "blockz.*"])"), 1, 1);
  ASSERT_FALSE(typo.errors.empty());
  EXPECT_THAT(std::string(typo.errors.front().message()),
              HasSubstr("vision.freeze[1]: \"blockz.*\" matches no parameter of the vision model"));
  const Outcome all = RunStages(
      TinyJob(0, 0, R"(["patch_embed.*", "positions", "blocks.*", "projector.*"])"), 1, 1);
  ASSERT_FALSE(all.errors.empty());
  EXPECT_THAT(
      std::string(all.errors.front().message()),
      HasSubstr("vision.freeze: freezes every parameter of the vision model; write [\"*\"]"));
}

// A rank that fails ends the step of the other group's ranks at once: their waits on transfers are
// cancelled (or, withdrawn before they waited, not expected any more), not left to their two-minute
// deadline. (A rank of the failing rank's own group that waits in a collective waits for the
// communicator's timeout, as an actor does; with one vision rank there is none.)
TEST(StagesFailureTest, OneRankFailingEndsTheOtherGroupsRanksPromptly) {
  const auto start = std::chrono::steady_clock::now();
  const Outcome run = RunStages(TinyJob(0), 1, 2, /*fail_step=*/2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, kTimeout / 2);
  ASSERT_EQ(run.errors.size(), 3u);
  // The root cause comes first: the other ranks fail only once it aborted the transfers.
  EXPECT_THAT(std::string(run.errors.front().message()), HasSubstr("vision rank 0 lost its data"));
  for (size_t i = 1; i < run.errors.size(); ++i) {
    EXPECT_TRUE(absl::IsCancelled(run.errors[i]) || absl::IsFailedPrecondition(run.errors[i]) ||
                (absl::IsNotFound(run.errors[i]) &&
                 absl::StrContains(run.errors[i].message(), "is not expected")))
        << run.errors[i];
  }
}

}  // namespace
}  // namespace tandem::step
