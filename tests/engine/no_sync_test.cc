// Gradient accumulation at ZeRO stages 0 and 1 reduces once per optimizer step, as DDP's no_sync
// and DeepSpeed do: the micro-batches inside the accumulation window issue no collective, and the
// boundary's backward reduces their sum with its own. (engine_patterns_test checks the values
// against torch::optim::AdamW; this checks that the window is quiet.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine_config/config.h"
#include "tests/testing/group.h"
#include "tests/testing/models.h"

namespace tandem::engine {
namespace {

class NoSyncTest : public ::testing::TestWithParam<int> {};

TEST_P(NoSyncTest, TheAccumulationWindowIssuesNoCollective) {
  const int stage = GetParam();
  constexpr int kAccumulation = 4;
  testing::RunGroup(2, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    torch::manual_seed(1);
    auto model = std::make_shared<testing::TinyNet>();
    auto config = ParseConfig(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
        "gradient_accumulation_steps": 4, "bf16": {"enabled": false},
        "zero_optimization": {"stage": )" +
                              std::to_string(stage) + R"(, "reduce_bucket_size": 60}})");
    ASSERT_TRUE(config.ok()) << config.status();
    auto engine = Engine::Create(model, comms[0], *config);
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<int64_t> collectives;  // issued by each micro-batch's backward and Step
    for (int micro = 0; micro < 2 * kAccumulation; ++micro) {
      const int64_t before = comms[0]->last_sequence();
      torch::mse_loss(model->forward(torch::randn({4, 5})), torch::randn({4, 3})).backward();
      ASSERT_TRUE((*engine)->Step().ok());
      collectives.push_back(comms[0]->last_sequence() - before);
    }
    for (int micro = 0; micro < 2 * kAccumulation; ++micro) {
      if ((micro + 1) % kAccumulation == 0) {
        EXPECT_GT(collectives[micro], 0) << "micro-batch " << micro << " ends the window";
      } else {
        EXPECT_EQ(collectives[micro], 0) << "micro-batch " << micro << " is inside the window";
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Stages0And1, NoSyncTest, ::testing::Values(0, 1));

}  // namespace
}  // namespace tandem::engine
