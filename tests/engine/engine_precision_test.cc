// Low-precision modes against an fp32 LibTorch reference (within bf16 tolerance), autocast, the
// compensated bf16 updates, and engine-level errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <tuple>

#include "engine/engine.h"
#include "engine/safetensors.h"
#include "engine_config/config.h"
#include "tests/testing/group.h"
#include "tests/testing/models.h"

namespace tandem::engine {
namespace {

using testing::TinyNet;

constexpr char kBf16FpMaster[] = R"("bf16": {"enabled": true})";
constexpr char kBf16Full[] =
    R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true})";

Config MakeConfig(int stage, const std::string& precision, bool autocast) {
  auto config = ParseConfig(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}},
          "tandem": {"no_decay": false}, "zero_optimization": {"stage": )" +
      std::to_string(stage) + R"(, "reduce_bucket_size": 64}, "torch_autocast": {"enabled": )" +
      (autocast ? "true" : "false") + R"(, "dtype": "bfloat16"}, )" + precision + "}");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

double RelativeError(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(torch::kDouble) - b.to(torch::kDouble)).norm() / b.to(torch::kDouble).norm())
      .item<double>();
}

class PrecisionTest : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

// Two ranks train 3 steps under autocast in a low-precision mode; the reference trains in fp32.
// The relative error of the parameters' whole update after the last step against the fp32
// reference's, at most; an engine that did not update scores 1. With an fp32 master it is bf16
// autocast's rounding (0.007 measured); bf16 parameters round each element to 2^-8 of its size,
// more than an update of lr 1e-3 moves it (0.30 measured after three steps).
double MaxUpdateError(const std::string& precision) { return precision == kBf16Full ? 0.6 : 0.05; }

TEST_P(PrecisionTest, MatchesFp32ReferenceWithinBf16Tolerance) {
  const auto [stage, precision] = GetParam();
  constexpr int kWorld = 2;
  torch::manual_seed(3);
  auto reference = std::make_shared<TinyNet>();
  std::vector<std::shared_ptr<TinyNet>> models;
  for (int r = 0; r < kWorld; ++r) {
    models.push_back(std::make_shared<TinyNet>());
    testing::CopyParameters(*reference, *models.back());
  }
  torch::manual_seed(4);
  std::vector<at::Tensor> xs, ys;
  for (int s = 0; s < 3 * kWorld; ++s) {
    xs.push_back(torch::randn({8, 5}));
    ys.push_back(torch::randn({8, 3}));
  }
  std::map<std::string, at::Tensor> initial;  // in double, as every rank starts
  for (auto& item : reference->named_parameters()) {
    initial[item.key()] = item.value().detach().to(torch::kDouble);
  }
  torch::optim::AdamW optimizer(reference->parameters(),
                                torch::optim::AdamWOptions(0.001).weight_decay(0.01));
  std::vector<std::map<std::string, at::Tensor>> ref_grads, ref_params;
  for (int s = 0; s < 3; ++s) {
    optimizer.zero_grad();
    for (int r = 0; r < kWorld; ++r)
      torch::mse_loss(reference->forward(xs[s * kWorld + r]), ys[s * kWorld + r]).backward();
    std::map<std::string, at::Tensor> g, p;
    for (auto& item : reference->named_parameters()) {
      item.value().mutable_grad().div_(kWorld);
      g[item.key()] = item.value().grad().clone();
    }
    optimizer.step();
    for (auto& item : reference->named_parameters()) p[item.key()] = item.value().detach().clone();
    ref_grads.push_back(g);
    ref_params.push_back(p);
  }

  testing::RunGroup(kWorld, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto engine = Engine::Create(models[rank], comms[0], MakeConfig(stage, precision, true));
    ASSERT_TRUE(engine.ok()) << engine.status();
    // Where the engine starts: the reference's weights in the engine's parameter dtype.
    auto gathered = (*engine)->GatherParameters();
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    const std::map<std::string, at::Tensor> start(gathered->begin(), gathered->end());
    for (int s = 0; s < 3; ++s) {
      {
        auto autocast = (*engine)->Autocast();
        at::Tensor out = models[rank]->forward(xs[s * kWorld + rank]);
        EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
        torch::mse_loss(out.to(torch::kFloat), ys[s * kWorld + rank]).backward();
      }
      auto grads = (*engine)->GatherGradients();
      ASSERT_TRUE(grads.ok()) << grads.status();
      for (const auto& [name, grad] : *grads) {
        EXPECT_LT(RelativeError(grad, ref_grads[s][name]), 0.05) << name << " step " << s;
      }
      ASSERT_TRUE((*engine)->Step().ok());
      auto params = (*engine)->GatherParameters();
      ASSERT_TRUE(params.ok()) << params.status();
      for (const auto& [name, param] : *params) {
        EXPECT_LE(testing::ToleranceRatio(param, ref_params[s][name], 1e-2, 1e-2), 1.0)
            << name << " step " << s;
      }
      if (s < 2) continue;
      // The parameters moved as the reference's did: the error of the whole update since the
      // start, against that update's size.
      double error_squares = 0, update_squares = 0;
      for (const auto& [name, param] : *params) {
        const at::Tensor moved = param.to(torch::kDouble) - start.at(name).to(torch::kDouble);
        const at::Tensor want = ref_params[s][name].to(torch::kDouble) - initial.at(name);
        error_squares += (moved - want).pow(2).sum().item<double>();
        update_squares += want.pow(2).sum().item<double>();
      }
      const double update_error = std::sqrt(error_squares / update_squares);
      EXPECT_LT(update_error, MaxUpdateError(precision));
    }
  });
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<int, std::string>>& info) {
  return "Stage" + std::to_string(std::get<0>(info.param)) +
         (std::get<1>(info.param) == kBf16Full ? "Bf16Full" : "Bf16Fp32Master");
}

INSTANTIATE_TEST_SUITE_P(Modes, PrecisionTest,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(std::string(kBf16FpMaster),
                                                              std::string(kBf16Full))),
                         CaseName);

TEST(EngineAutocast, EnablesCpuBf16OnlyInsideTheScope) {
  auto model = std::make_shared<TinyNet>();
  auto engine =
      Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(0, kBf16Full, true));
  ASSERT_TRUE(engine.ok()) << engine.status();
  {
    auto autocast = (*engine)->Autocast();
    EXPECT_EQ(model->forward(torch::randn({2, 5})).scalar_type(), torch::kBFloat16);
  }
  EXPECT_FALSE(compat::IsAutocastEnabled(c10::DeviceType::CPU));
}

// With an update far below bf16's resolution at the weight's magnitude, round-to-nearest loses it;
// Kahan summation and stochastic rounding track the fp32 trajectory. The moments stay fp32 here, so
// each Adam step is exactly -lr and only the rounding of the bf16 master weight is under test.
double DriftAfterTinyUpdates(const std::string& update) {
  torch::nn::Linear model(1, 1);
  {
    torch::NoGradGuard no_grad;
    model->weight.fill_(1.0);
    model->bias.fill_(1.0);
  }
  auto config = ParseConfig(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0}},
          "bf16": {"enabled": true, "bf16_master_weights_and_grads": true},
          "tandem": {"bf16_update": ")" +
      update + R"("}, "seed": 5})");
  EXPECT_TRUE(config.ok()) << config.status();
  auto engine = Engine::Create(model.ptr(), CreateSingleRankCommunicator(), *config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  constexpr int kSteps = 2000;
  for (int s = 0; s < kSteps; ++s) {
    // d(out)/d(bias) = 1: a constant positive gradient, so Adam moves the bias by -lr per step.
    model->forward(torch::ones({1, 1}, torch::kBFloat16)).sum().backward();
    EXPECT_TRUE((*engine)->Step().ok());
  }
  const double expected = 1.0 - kSteps * 1e-4;  // fp32 trajectory: 0.8
  return std::abs(model->bias.to(torch::kDouble).item<double>() - expected);
}

TEST(EngineBf16Update, NearestLosesUpdatesBelowResolution) {
  // bf16 spacing just below 1.0 is 2^-8 (0.0039); a 1e-4 step rounds back to 1.0 every time, so
  // the weight never moves and misses all 2000 * 1e-4 = 0.2 of its updates.
  EXPECT_NEAR(DriftAfterTinyUpdates("nearest"), 0.2, 1e-6);
}

// Kahan: within one bf16 spacing (0.0039) of the fp32 value.
TEST(EngineBf16Update, KahanTracksFp32) { EXPECT_LT(DriftAfterTinyUpdates("kahan"), 0.004); }

// Stochastic rounding is unbiased; its error is a random walk: each step rounds down with
// probability ~1e-4/0.0039 = 0.026, so the drift's standard deviation is about
// sqrt(2000 * 0.026) * 0.0039 = 0.028. The bound is three of them, far below nearest's 0.2.
TEST(EngineBf16Update, StochasticTracksFp32) {
  EXPECT_LT(DriftAfterTinyUpdates("stochastic"), 0.09);
}

// Clipping by a combined norm (the whole model of a two-group job). With eps far above the
// gradient, Adam's update is lr * m / eps, linear in the clipped gradient, so the clip scale shows
// in the parameters. An engine whose combiner reports twice its group norm and clips at the group
// norm must end where an engine without a combiner clipping at half the group norm ends.
struct ClipRun {
  std::map<std::string, at::Tensor> params;
  std::vector<double> group_squares_seen;
  double group_norm = 0, global_norm = 0;
  int64_t skipped = 0;
  absl::Status status;
};

ClipRun TrainWithClip(double clip, const Engine::GradNormCombiner& combine_after_record) {
  torch::manual_seed(7);
  auto model = std::make_shared<TinyNet>();
  auto config = ParseConfig(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.1, "eps": 1000.0,
      "weight_decay": 0.0}}, "gradient_clipping": )" +
                            std::to_string(clip) + "}");
  EXPECT_TRUE(config.ok()) << config.status();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), *config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  ClipRun run;
  if (combine_after_record) {
    (*engine)->SetGradNormCombiner([&](double squares) {
      run.group_squares_seen.push_back(squares);
      return combine_after_record(squares);
    });
  }
  torch::manual_seed(8);
  torch::mse_loss(model->forward(torch::randn({8, 5})), torch::randn({8, 3})).backward();
  run.status = (*engine)->Step();
  run.group_norm = (*engine)->last_grad_norm();
  run.global_norm = (*engine)->last_global_grad_norm();
  run.skipped = (*engine)->skipped_steps();
  for (auto& item : model->named_parameters())
    run.params[item.key()] = item.value().detach().clone();
  return run;
}

// The group norm of the seeded batch, from an engine that does not clip.
double SeededGroupNorm() { return TrainWithClip(0.0, nullptr).group_norm; }

// NOTE [Random streams] in engine_step.cc. `lead` elements come before `shared` in the engine's
// buffers (a tensor-parallel rank's vocabulary shard before its replicated norms); `shared` is the
// same on every engine: linspace values, gradient c * 1 exactly (d/dw of sum(c * w)) from the same
// c.
class StreamNet : public torch::nn::Module {
 public:
  explicit StreamNet(int64_t lead)
      : lead_(register_parameter("lead", torch::zeros({lead}))),
        shared_(register_parameter("shared", torch::linspace(0.3, 0.9, 1001))) {}
  at::Tensor forward(const at::Tensor& c) { return (c * shared_).sum() + lead_.sum(); }

 private:
  at::Tensor lead_, shared_;
};

// `shared` after 12 steps of stochastically rounded bf16 masters and moments at lr 1e-3, below a
// bf16 spacing of the weights (2^-9 to 2^-8): every update is a random rounding. `shard` >= 0 gives
// `shared` that shard's stream.
at::Tensor SharedAfterStochasticSteps(int64_t lead, int64_t shard = -1) {
  auto model = std::make_shared<StreamNet>(lead);
  auto config = ParseConfig(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}}, "seed": 7,
          "bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true},
          "tandem": {"bf16_update": "stochastic", "bf16_optimizer_states_rounding": "stochastic"}})");
  EXPECT_TRUE(config.ok()) << config.status();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), *config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (shard >= 0) {
    EXPECT_TRUE((*engine)->SetShardStream("shared", shard).ok());
  }
  torch::manual_seed(21);
  for (int step = 0; step < 12; ++step) {
    model->forward(torch::randn({1001}).to(torch::kBFloat16)).backward();
    EXPECT_TRUE((*engine)->Step().ok());
  }
  return model->named_parameters()["shared"].detach().clone();
}

TEST(EngineRandomStreams, AParameterRoundsAlikeWhateverPrecedesItInTheBuffers) {
  const at::Tensor after_five = SharedAfterStochasticSteps(5);
  EXPECT_TRUE(at::equal(after_five, SharedAfterStochasticSteps(6)));
  EXPECT_TRUE(at::equal(after_five, SharedAfterStochasticSteps(4099)));
  // The updates were rounded, not lost: the weights moved.
  EXPECT_FALSE(at::equal(after_five, torch::linspace(0.3, 0.9, 1001).to(torch::kBFloat16)));
}

TEST(EngineRandomStreams, ShardsOfOneWeightRoundWithNumbersOfTheirOwn) {
  const at::Tensor shard0 = SharedAfterStochasticSteps(5, 0);
  const at::Tensor shard1 = SharedAfterStochasticSteps(5, 1);
  EXPECT_TRUE(at::equal(shard0, SharedAfterStochasticSteps(6, 0)));
  // Same values, same gradients: only the random numbers tell them apart, in many of 1001 places.
  EXPECT_GT((shard0 != shard1).sum().item<int64_t>(), 100);
  EXPECT_FALSE(at::equal(shard0, SharedAfterStochasticSteps(5)));
}

TEST(EngineRandomStreams, SetShardStreamNamesAnUnknownParameter) {
  auto model = std::make_shared<StreamNet>(3);
  auto engine =
      Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(0, kBf16Full, false));
  ASSERT_TRUE(engine.ok()) << engine.status();
  const absl::Status status = (*engine)->SetShardStream("blocks.0.q.weight", 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "SetShardStream: the model has no parameter blocks.0.q.weight");
}

TEST(EngineGradNormCombiner, ClipsByTheCombinedNorm) {
  const double n = SeededGroupNorm();
  ASSERT_GT(n, 0.0);
  ClipRun combined =
      TrainWithClip(n, [](double squares) -> absl::StatusOr<double> { return 4.0 * squares; });
  ASSERT_TRUE(combined.status.ok()) << combined.status;
  ASSERT_EQ(combined.group_squares_seen.size(), 1u);
  EXPECT_NEAR(combined.group_squares_seen[0], n * n, 1e-6 * n * n);
  EXPECT_NEAR(combined.group_norm, n, 1e-6 * n);
  EXPECT_NEAR(combined.global_norm, 2.0 * n, 1e-6 * n);
  ClipRun halved = TrainWithClip(n / 2.0, nullptr);
  ClipRun unclipped = TrainWithClip(0.0, nullptr);
  for (const auto& [name, value] : halved.params) {
    EXPECT_TRUE(torch::allclose(combined.params.at(name), value, 1e-5, 1e-7)) << name;
  }
  // And the scale matters: the unclipped run moved further.
  EXPECT_FALSE(torch::allclose(combined.params.at("output.weight"),
                               unclipped.params.at("output.weight"), 1e-5, 1e-7));
}

TEST(EngineGradNormCombiner, NonFiniteCombinedNormSkipsTheUpdate) {
  torch::manual_seed(7);
  auto initial = std::make_shared<TinyNet>();
  ClipRun run = TrainWithClip(1.0, [](double) -> absl::StatusOr<double> { return std::nan(""); });
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.skipped, 1);
  for (auto& item : initial->named_parameters()) {
    EXPECT_TRUE(torch::equal(run.params.at(item.key()), item.value().detach())) << item.key();
  }
}

TEST(EngineGradNormCombiner, CombinerErrorFailsTheStep) {
  ClipRun run = TrainWithClip(1.0, [](double) -> absl::StatusOr<double> {
    return absl::DeadlineExceededError("no squares from the other group");
  });
  EXPECT_EQ(run.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(run.status.message(), "no squares from the other group");
}

// A config the parser accepts (8 = 4 x 2 on one rank) that the engine's group of two contradicts.
TEST(EngineErrors, BatchSizeInconsistentWithWorldIsInvalidArgument) {
  auto config = ParseConfig(
      R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})");
  ASSERT_TRUE(config.ok()) << config.status();
  testing::RunGroup(2, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto engine = Engine::Create(std::make_shared<TinyNet>(), comms[0], *config);
    EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(engine.status().message(),
              "train_batch_size: 8 != train_micro_batch_size_per_gpu (4) * "
              "gradient_accumulation_steps (2) * world size (2)");
  });
}

TEST(EngineErrors, DerivesAccumulationStepsFromBatchSizes) {
  auto config = ParseConfig(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4})");
  ASSERT_TRUE(config.ok()) << config.status();
  auto engine =
      Engine::Create(std::make_shared<TinyNet>(), CreateSingleRankCommunicator(), *config);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->config().gradient_accumulation_steps, 4);
}

TEST(EngineExport, WritesEveryParameterUnderItsModuleName) {
  testing::TempDir dir;
  auto model = std::make_shared<TinyNet>();
  auto engine =
      Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(0, kBf16FpMaster, false));
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_TRUE((*engine)->ExportSafetensors(dir / "model.safetensors").ok());
  auto read = ReadSafetensors(dir / "model.safetensors");
  ASSERT_TRUE(read.ok()) << read.status();
  auto params = (*engine)->GatherParameters();
  ASSERT_TRUE(params.ok());
  ASSERT_EQ(read->size(), params->size());
  for (size_t i = 0; i < read->size(); ++i) {
    EXPECT_EQ((*read)[i].first, (*params)[i].first);
    EXPECT_TRUE(torch::equal((*read)[i].second, (*params)[i].second)) << (*read)[i].first;
  }
  EXPECT_EQ((*read)[0].first, "input.weight");
  EXPECT_EQ((*read)[2].first, "block0.fc1.weight");
}

}  // namespace
}  // namespace tandem::engine
