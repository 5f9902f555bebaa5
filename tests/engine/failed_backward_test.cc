// No rank hangs its group (NOTE [Failed backward] in engine/engine_step.cc): a rank whose backward
// never reaches the engine contributes zeros; a backward that throws half-way is finished by the
// next Step(), and at the optimizer step every rank skips the update and returns Aborted naming the
// rank. The collective timeout is 30 s here, so a regression fails in 30 s instead of hanging 300.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "engine/engine.h"
#include "engine_config/config.h"
#include "tests/testing/group.h"
#include "tests/testing/models.h"

namespace tandem::engine {
namespace {

// Two linear layers; `fail` puts a hook between them that throws in backward, after the second
// layer's gradients reached the engine (and its unit launched) and before the first layer's.
struct TwoLayer : torch::nn::Module {
  TwoLayer() {
    a = register_module("a", torch::nn::Linear(5, 6));
    b = register_module("b", torch::nn::Linear(6, 3));
  }
  at::Tensor forward(const at::Tensor& x, bool fail = false) {
    at::Tensor h = torch::tanh(a(x));
    if (fail) {
      h.register_hook(
          [](const at::Tensor&) -> at::Tensor { throw std::runtime_error("injected failure"); });
    }
    return b(h);
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

Config MakeConfig(int stage, int accumulation) {
  auto config = ParseConfig(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "gradient_accumulation_steps": )" +
      std::to_string(accumulation) + R"(, "zero_optimization": {"stage": )" +
      std::to_string(stage) +
      R"(, "reduce_bucket_size": 20}, "tandem": {"collective_timeout_s": 30}})");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

std::map<std::string, at::Tensor> Values(const NamedTensors& named) {
  std::map<std::string, at::Tensor> values;
  for (const auto& [name, tensor] : named) values[name] = tensor;
  return values;
}

class FailedBackwardTest : public ::testing::TestWithParam<int> {};

TEST_P(FailedBackwardTest, ARankWhoseBackwardMissesTheEngineContributesZeros) {
  const int stage = GetParam();
  torch::manual_seed(3);
  TwoLayer initial;
  const at::Tensor x = torch::randn({4, 5}), y = torch::randn({4, 3});
  // Reference: rank 0's gradient alone, halved by the mean over two ranks.
  TwoLayer reference;
  testing::CopyParameters(initial, reference);
  torch::optim::AdamW optimizer(reference.parameters(),
                                torch::optim::AdamWOptions(0.01).weight_decay(0.0));
  (torch::mse_loss(reference.forward(x), y) / 2).backward();
  optimizer.step();

  std::vector<std::shared_ptr<TwoLayer>> models = {std::make_shared<TwoLayer>(),
                                                   std::make_shared<TwoLayer>()};
  for (auto& m : models) testing::CopyParameters(initial, *m);
  testing::RunGroup(2, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto engine = Engine::Create(models[rank], comms[0], MakeConfig(stage, 1));
    ASSERT_TRUE(engine.ok()) << engine.status();
    if (rank == 0) {
      torch::mse_loss(models[rank]->forward(x), y).backward();
    } else {
      // A loss that does not depend on the model: no hook of the engine fires.
      at::Tensor other = torch::ones({3}, torch::requires_grad());
      (other * 2).sum().backward();
    }
    ASSERT_TRUE((*engine)->Step().ok());
    EXPECT_EQ((*engine)->global_steps(), 1);
    auto params = (*engine)->GatherParameters();
    ASSERT_TRUE(params.ok()) << params.status();
    for (const auto& item : reference.named_parameters()) {
      EXPECT_LE(testing::ToleranceRatio(Values(*params).at(item.key()), item.value().detach(), 1e-6,
                                        1e-4),
                1.0)
          << item.key() << " rank " << rank << "\nactual\n"
          << Values(*params).at(item.key()) << "\nexpected\n"
          << item.value();
    }
  });
}

TEST_P(FailedBackwardTest, AnExceptionInBackwardSkipsTheStepOnEveryRankNamingTheRank) {
  const int stage = GetParam();
  torch::manual_seed(4);
  TwoLayer initial;
  std::vector<std::shared_ptr<TwoLayer>> models = {std::make_shared<TwoLayer>(),
                                                   std::make_shared<TwoLayer>()};
  for (auto& m : models) testing::CopyParameters(initial, *m);
  std::vector<std::map<std::string, at::Tensor>> after(2);
  testing::RunGroup(2, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto engine = Engine::Create(models[rank], comms[0], MakeConfig(stage, 1));
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto before = (*engine)->GatherParameters();
    ASSERT_TRUE(before.ok());
    const at::Tensor x = torch::randn({4, 5}), y = torch::randn({4, 3});
    absl::Status backward =
        (*engine)->Backward(torch::mse_loss(models[rank]->forward(x, rank == 1), y));
    if (rank == 1) {
      EXPECT_NE(std::string(backward.message()).find("injected failure"), std::string::npos)
          << backward;
    } else {
      EXPECT_TRUE(backward.ok()) << backward;
    }
    const absl::Status step = (*engine)->Step();
    EXPECT_EQ(step.code(), absl::StatusCode::kAborted) << step;
    EXPECT_NE(std::string(step.message()).find("the backward of rank 1 failed in optimizer step 1"),
              std::string::npos)
        << step;
    if (rank == 1) {
      EXPECT_NE(std::string(step.message()).find("injected failure"), std::string::npos) << step;
    }
    EXPECT_EQ((*engine)->global_steps(), 0);
    EXPECT_EQ((*engine)->skipped_steps(), 1);
    auto unchanged = (*engine)->GatherParameters();
    ASSERT_TRUE(unchanged.ok());
    for (size_t i = 0; i < before->size(); ++i) {
      EXPECT_TRUE(torch::equal((*before)[i].second, (*unchanged)[i].second)) << (*before)[i].first;
    }

    // The next step trains on both ranks, and they agree.
    torch::mse_loss(models[rank]->forward(torch::ones({4, 5})), torch::zeros({4, 3})).backward();
    ASSERT_TRUE((*engine)->Step().ok());
    EXPECT_EQ((*engine)->global_steps(), 1);
    for (const auto& item : models[rank]->named_parameters()) {
      after[rank][item.key()] = item.value().detach().clone();
    }
  });
  for (const auto& [name, value] : after[0]) {
    if (value.numel() == 0) continue;  // released (none here: no blocks)
    EXPECT_TRUE(torch::equal(value, after[1].at(name))) << name;
    EXPECT_FALSE(torch::equal(value, initial.named_parameters()[name])) << name;
  }
}

TEST_P(FailedBackwardTest, AFailureInsideTheAccumulationWindowIsReportedThenSkipsTheStep) {
  const int stage = GetParam();
  torch::manual_seed(5);
  testing::RunGroup(2, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto model = std::make_shared<TwoLayer>();
    auto engine = Engine::Create(model, comms[0], MakeConfig(stage, 2));
    ASSERT_TRUE(engine.ok()) << engine.status();
    const at::Tensor x = torch::randn({4, 5}), y = torch::randn({4, 3});
    // Micro-batch 1: rank 1's loss.backward() throws (called directly, not through the engine).
    try {
      torch::mse_loss(model->forward(x, rank == 1), y).backward();
      EXPECT_EQ(rank, 0);
    } catch (const std::exception& e) {
      EXPECT_EQ(rank, 1) << e.what();
    }
    const absl::Status first = (*engine)->Step();
    if (rank == 1) {
      EXPECT_EQ(first.code(), absl::StatusCode::kAborted) << first;
      EXPECT_NE(std::string(first.message()).find("the backward of micro step 1 did not finish"),
                std::string::npos)
          << first;
    } else {
      EXPECT_TRUE(first.ok()) << first;
    }
    // Micro-batch 2, fine everywhere; the boundary tells every rank.
    torch::mse_loss(model->forward(x), y).backward();
    const absl::Status second = (*engine)->Step();
    EXPECT_EQ(second.code(), absl::StatusCode::kAborted) << second;
    EXPECT_NE(std::string(second.message()).find("the backward of rank 1 failed"),
              std::string::npos)
        << second;
    EXPECT_EQ((*engine)->skipped_steps(), 1);
    EXPECT_EQ((*engine)->micro_steps(), 2);
    // The engine is ready: a whole step runs.
    for (int micro = 0; micro < 2; ++micro) {
      torch::mse_loss(model->forward(x), y).backward();
      ASSERT_TRUE((*engine)->Step().ok());
    }
    EXPECT_EQ((*engine)->global_steps(), 1);
  });
}

INSTANTIATE_TEST_SUITE_P(Stages, FailedBackwardTest, ::testing::Values(0, 1, 2, 3));

// Two blocks of the same shape, so a wrong pairing of their gathers would not fail by size.
struct SkippingNet : torch::nn::Module {
  SkippingNet() {
    for (int i = 0; i < 2; ++i) {
      blocks.push_back(
          register_module("blocks" + std::to_string(i), std::make_shared<testing::MlpBlock>(6)));
    }
  }
  at::Tensor forward(at::Tensor x, bool skip_second) {
    x = blocks[0]->Forward(x);
    if (!skip_second) x = blocks[1]->Forward(x);
    return x;
  }
  std::vector<std::shared_ptr<testing::MlpBlock>> blocks;
};

TEST(BlockOrder, ABlockSkippedOnOneRankAtStage3FailsNamingTheBlocks) {
  testing::RunGroup(2, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    torch::manual_seed(9);
    auto model = std::make_shared<SkippingNet>();
    auto engine = Engine::Create(model, comms[0], MakeConfig(3, 1));
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::string error;
    try {
      // Rank 1 skips blocks1: rank 0's forward gather of blocks1 meets rank 1's backward
      // re-gather of blocks0.
      model->forward(torch::randn({2, 6}), /*skip_second=*/rank == 1).sum().backward();
    } catch (const std::exception& e) {
      error = e.what();
    }
    const std::string expected =
        rank == 0 ? "rank 0 gathers block 1 (blocks1) for its forward while rank 1 gathers block "
                    "0 (blocks0) for its backward"
                  : "rank 1 gathers block 0 (blocks0) for its backward while rank 0 gathers block "
                    "1 (blocks1) for its forward";
    EXPECT_NE(error.find(expected), std::string::npos) << error;
    // Step() ends without a hang, and keeps saying what went wrong.
    const absl::Status step = (*engine)->Step();
    EXPECT_EQ(step.code(), absl::StatusCode::kFailedPrecondition) << step;
    EXPECT_NE(std::string(step.message()).find("every block must run on every rank"),
              std::string::npos)
        << step;
  });
}

}  // namespace
}  // namespace tandem::engine
