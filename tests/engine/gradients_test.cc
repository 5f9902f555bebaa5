// Gradients the engine reduces, against single-process LibTorch at every ZeRO stage over two ranks:
// - parameters a rank's graph does not reach contribute zeros to the group's mean, and a parameter
//   no rank reaches is stepped with a zero gradient (weight decay and moment decay still act), as
//   DeepSpeed does; torch::optim skips a parameter whose grad is undefined, so the reference here
//   gives it an explicit zero gradient;
// - gradient_clipping clips by the norm of the whole group's gradient, as
//   torch::nn::utils::clip_grad_norm_ clips the single-process one.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine_config/config.h"
#include "tests/testing/group.h"
#include "tests/testing/models.h"

namespace tandem::engine {
namespace {

constexpr int kSteps = 3;

Config MakeConfig(int stage, double clipping) {
  auto config = ParseConfig(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1}},
          "tandem": {"no_decay": false}, "gradient_clipping": )" +
      std::to_string(clipping) + R"(, "zero_optimization": {"stage": )" + std::to_string(stage) +
      R"(, "reduce_bucket_size": 30}})");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

// `sometimes` is used only where the caller says; `never` is never used.
struct PartlyUsed : torch::nn::Module {
  PartlyUsed() {
    first = register_module("first", torch::nn::Linear(5, 6));
    sometimes = register_module("sometimes", torch::nn::Linear(6, 6));
    never = register_module("never", torch::nn::Linear(6, 6));
    last = register_module("last", torch::nn::Linear(6, 3));
  }
  at::Tensor forward(const at::Tensor& x, bool use_sometimes) {
    at::Tensor h = torch::tanh(first(x));
    if (use_sometimes) h = h + sometimes(h);
    return last(h);
  }
  torch::nn::Linear first{nullptr}, sometimes{nullptr}, never{nullptr}, last{nullptr};
};

class GradientsTest : public ::testing::TestWithParam<int> {};

TEST_P(GradientsTest, UnusedParametersContributeZerosAndAreSteppedWithAZeroGradient) {
  const int stage = GetParam();
  torch::manual_seed(12);
  PartlyUsed initial;
  std::vector<std::pair<at::Tensor, at::Tensor>> data;
  for (int i = 0; i < 2 * kSteps; ++i)
    data.emplace_back(torch::randn({4, 5}), torch::randn({4, 3}));

  // Reference: rank 0 uses `sometimes`, rank 1 does not; the mean over both; `never` gets zeros.
  PartlyUsed reference;
  testing::CopyParameters(initial, reference);
  torch::optim::AdamW optimizer(reference.parameters(),
                                torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  for (int s = 0; s < kSteps; ++s) {
    optimizer.zero_grad();
    for (int r = 0; r < 2; ++r) {
      (torch::mse_loss(reference.forward(data[2 * s + r].first, r == 0), data[2 * s + r].second) /
       2)
          .backward();
    }
    for (auto& p : reference.never->parameters()) p.mutable_grad() = torch::zeros_like(p);
    optimizer.step();
  }

  std::vector<std::shared_ptr<PartlyUsed>> models = {std::make_shared<PartlyUsed>(),
                                                     std::make_shared<PartlyUsed>()};
  for (auto& m : models) testing::CopyParameters(initial, *m);
  testing::RunGroup(2, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto engine = Engine::Create(models[rank], comms[0], MakeConfig(stage, 0.0));
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (int s = 0; s < kSteps; ++s) {
      const auto& [x, y] = data[2 * s + rank];
      torch::mse_loss(models[rank]->forward(x, rank == 0), y).backward();
      ASSERT_TRUE((*engine)->Step().ok());
    }
    auto params = (*engine)->GatherParameters();
    ASSERT_TRUE(params.ok()) << params.status();
    testing::ExpectCloseToParameters(*params, reference, 1e-6, 1e-4,
                                     "rank " + std::to_string(rank));
    // `never` moved only by weight decay: 3 steps of (1 - lr * wd).
    const at::Tensor never = initial.never->weight.detach();
    for (const auto& [name, actual] : *params) {
      if (name != "never.weight") continue;
      EXPECT_LE(testing::ToleranceRatio(actual, never * std::pow(1 - 0.01 * 0.1, 3), 1e-7, 1e-6),
                1.0);
    }
  });
}

TEST_P(GradientsTest, ClippingUsesTheNormOfTheWholeGroupsGradient) {
  const int stage = GetParam();
  constexpr double kMaxNorm = 0.05;  // well under the gradients' norm (about 0.5), so it clips
  torch::manual_seed(13);
  testing::TinyNet initial;
  std::vector<std::pair<at::Tensor, at::Tensor>> data;
  for (int i = 0; i < 2 * kSteps; ++i)
    data.emplace_back(torch::randn({4, 5}), torch::randn({4, 3}));

  testing::TinyNet reference;
  testing::CopyParameters(initial, reference);
  torch::optim::AdamW optimizer(reference.parameters(),
                                torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  std::vector<double> reference_norms;
  for (int s = 0; s < kSteps; ++s) {
    optimizer.zero_grad();
    for (int r = 0; r < 2; ++r) {
      (torch::mse_loss(reference.forward(data[2 * s + r].first), data[2 * s + r].second) / 2)
          .backward();
    }
    reference_norms.push_back(torch::nn::utils::clip_grad_norm_(reference.parameters(), kMaxNorm));
    optimizer.step();
  }
  ASSERT_GT(reference_norms.front(), 4 * kMaxNorm);

  std::vector<std::shared_ptr<testing::TinyNet>> models = {std::make_shared<testing::TinyNet>(),
                                                           std::make_shared<testing::TinyNet>()};
  for (auto& m : models) testing::CopyParameters(initial, *m);
  testing::RunGroup(2, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto engine = Engine::Create(models[rank], comms[0], MakeConfig(stage, kMaxNorm));
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (int s = 0; s < kSteps; ++s) {
      const auto& [x, y] = data[2 * s + rank];
      torch::mse_loss(models[rank]->forward(x), y).backward();
      ASSERT_TRUE((*engine)->Step().ok());
      // The group's norm, the same on both ranks, is the single-process one.
      EXPECT_NEAR((*engine)->last_grad_norm(), reference_norms[s], 1e-5 * reference_norms[s])
          << "step " << s << " rank " << rank;
    }
    auto params = (*engine)->GatherParameters();
    ASSERT_TRUE(params.ok()) << params.status();
    testing::ExpectCloseToParameters(*params, reference, 1e-6, 1e-4,
                                     "rank " + std::to_string(rank));
  });
}

INSTANTIATE_TEST_SUITE_P(Stages, GradientsTest, ::testing::Values(0, 1, 2, 3));

}  // namespace
}  // namespace tandem::engine
