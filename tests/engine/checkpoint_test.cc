// Checkpoint then resume equals an uninterrupted run, bit for bit on CPU; interrupted or mismatched
// checkpoints are refused with a clear error.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "engine/config.h"
#include "engine/engine.h"
#include "tests/testing/group.h"
#include "tests/testing/models.h"

namespace tandem::engine {
namespace {

using testing::TinyNet;

Config MakeConfig(int stage, bool bf16) {
  std::string precision =
      bf16 ? R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
                         "bf16_optimizer_states": true}, "tandem": {"bf16_update": "stochastic"},
                         "torch_autocast": {"enabled": true, "dtype": "bfloat16"})"
           : R"("bf16": {"enabled": false})";
  auto config = ParseConfig(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3, "warmup_max_lr": 0.01}},
          "gradient_clipping": 1.0, "seed": 11, "gradient_accumulation_steps": 2,
          "zero_optimization": {"stage": )" +
      std::to_string(stage) + R"(, "reduce_bucket_size": 50}, )" + precision + "}");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

// Runs micro-steps [begin, end) and returns each one's loss. Data depends only on (rank, step).
std::vector<float> Train(Engine& engine, TinyNet& model, int rank, int begin, int end) {
  std::vector<float> losses;
  for (int s = begin; s < end; ++s) {
    auto g = at::detail::createCPUGenerator(1000 * rank + s);
    at::Tensor x = at::randn({4, 5}, g), y = at::randn({4, 3}, g);
    at::Tensor loss;
    {
      auto autocast = engine.Autocast();
      loss = torch::mse_loss(model.forward(x).to(torch::kFloat), y);
    }
    loss.backward();
    EXPECT_TRUE(engine.Step().ok());
    losses.push_back(loss.item<float>());
  }
  return losses;
}

class CheckpointTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(CheckpointTest, ResumeEqualsUninterruptedRunBitForBit) {
  const auto [stage, bf16] = GetParam();
  constexpr int kWorld = 2;
  testing::TempDir dir;
  torch::manual_seed(21);
  auto initial = std::make_shared<TinyNet>();
  std::vector<float> uninterrupted[kWorld], resumed[kWorld];
  std::vector<at::Tensor> final_uninterrupted[kWorld], final_resumed[kWorld];

  testing::RunGroup(kWorld, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto model = std::make_shared<TinyNet>();
    testing::CopyParameters(*initial, *model);
    auto engine = Engine::Create(model, comms[0], MakeConfig(stage, bf16));
    ASSERT_TRUE(engine.ok()) << engine.status();
    Train(**engine, *model, rank, 0, 4);
    ASSERT_TRUE((*engine)->SaveCheckpoint(dir / "step2", {{"data_position", "4"}}).ok());
    uninterrupted[rank] = Train(**engine, *model, rank, 4, 10);
    auto params = (*engine)->GatherParameters();
    ASSERT_TRUE(params.ok());
    for (auto& [name, t] : *params) final_uninterrupted[rank].push_back(t);
  });
  ASSERT_TRUE(std::filesystem::exists(dir / "step2/complete"));

  testing::RunGroup(kWorld, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    torch::manual_seed(999);  // different initial weights and generator state: all must be restored
    auto model = std::make_shared<TinyNet>();
    auto engine = Engine::Create(model, comms[0], MakeConfig(stage, bf16));
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto client_state = (*engine)->LoadCheckpoint(dir / "step2");
    ASSERT_TRUE(client_state.ok()) << client_state.status();
    EXPECT_EQ(client_state->at("data_position"), "4");
    EXPECT_EQ((*engine)->global_steps(), 2);
    resumed[rank] = Train(**engine, *model, rank, 4, 10);
    auto params = (*engine)->GatherParameters();
    ASSERT_TRUE(params.ok());
    for (auto& [name, t] : *params) final_resumed[rank].push_back(t);
  });

  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(resumed[r], uninterrupted[r]) << "rank " << r;
    ASSERT_EQ(final_resumed[r].size(), final_uninterrupted[r].size());
    for (size_t i = 0; i < final_resumed[r].size(); ++i) {
      EXPECT_TRUE(torch::equal(final_resumed[r][i], final_uninterrupted[r][i])) << "param " << i;
    }
  }
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<int, bool>>& info) {
  return "Stage" + std::to_string(std::get<0>(info.param)) +
         (std::get<1>(info.param) ? "Bf16Full" : "Fp32");
}

INSTANTIATE_TEST_SUITE_P(Modes, CheckpointTest,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Bool()),
                         CaseName);

TEST(CheckpointErrors, DirectoryWithoutCompleteMarkerIsRefused) {
  testing::TempDir dir;
  auto model = std::make_shared<TinyNet>();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(1, false));
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->SaveCheckpoint(dir / "ckpt").ok());
  std::filesystem::remove(dir / "ckpt/complete");
  auto loaded = (*engine)->LoadCheckpoint(dir / "ckpt");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find("incomplete"), std::string::npos) << loaded.status();
}

TEST(CheckpointErrors, OtherStageIsRefusedAndNothingChanges) {
  testing::TempDir dir;
  auto model = std::make_shared<TinyNet>();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(1, false));
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->SaveCheckpoint(dir / "ckpt").ok());
  auto other_model = std::make_shared<TinyNet>();
  auto other = Engine::Create(other_model, CreateSingleRankCommunicator(), MakeConfig(2, false));
  ASSERT_TRUE(other.ok());
  auto before = (*other)->GatherParameters();
  auto loaded = (*other)->LoadCheckpoint(dir / "ckpt");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find("zero_stage is 1, this engine has 2"), std::string::npos)
      << loaded.status();
  auto after = (*other)->GatherParameters();
  for (size_t i = 0; i < before->size(); ++i) {
    EXPECT_TRUE(torch::equal((*before)[i].second, (*after)[i].second));
  }
}

TEST(CheckpointErrors, TruncatedShardIsInvalidArgumentNamingTheFile) {
  testing::TempDir dir;
  auto model = std::make_shared<TinyNet>();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(0, false));
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->SaveCheckpoint(dir / "ckpt").ok());
  const std::string shard = dir / "ckpt/rank_0_of_1.safetensors";
  std::filesystem::resize_file(shard, 100);
  auto loaded = (*engine)->LoadCheckpoint(dir / "ckpt");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(loaded.status().message().find("rank_0_of_1.safetensors"), std::string::npos)
      << loaded.status();
}

TEST(CheckpointErrors, SaveInsideAccumulationIsFailedPrecondition) {
  testing::TempDir dir;
  auto model = std::make_shared<TinyNet>();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(0, false));
  ASSERT_TRUE(engine.ok());
  torch::mse_loss(model->forward(torch::randn({2, 5})), torch::randn({2, 3})).backward();
  ASSERT_TRUE((*engine)->Step().ok());  // micro step 1 of 2
  auto status = (*engine)->SaveCheckpoint(dir / "ckpt");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt/complete"));
}

}  // namespace
}  // namespace tandem::engine
