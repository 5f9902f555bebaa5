// The memory report equals the ZeRO arithmetic: 16 bytes/param (fp32, or bf16 with fp32 master) and
// 8 bytes/param (bf16 master weights, grads and optimizer states) before partitioning, each component
// divided by the world size where the stage partitions it, right after Create and after steps.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <tuple>

#include "engine/engine.h"
#include "engine_config/config.h"
#include "tests/testing/group.h"
#include "tests/testing/models.h"

namespace tandem::engine {
namespace {

struct Bytes {
  int64_t param, grad, master, optimizer;  // per parameter, before partitioning
};

class MemoryTest : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  void Check(const std::string& precision_json, Bytes bytes, int64_t total_per_param) {
    const auto [stage, world] = GetParam();
    auto config = ParseConfig(R"({"zero_optimization": {"stage": )" + std::to_string(stage) +
                              "}, " + precision_json + "}");
    ASSERT_TRUE(config.ok()) << config.status();
    // Width 5 blocks hold (5+1)*(4*5+1) = 126 parameters each: divisible by 1, 2 and 3, so the
    // arithmetic is exact. No stem or head: every parameter sits in a block, so ZeRO-3 partitions all.
    std::vector<std::shared_ptr<testing::TinyNet>> models;
    for (int r = 0; r < world; ++r) models.push_back(std::make_shared<testing::TinyNet>(5, 5, 5, 2, false));
    constexpr int64_t n = 252;
    const int64_t w = world;
    const int64_t expected_param = stage == 3 ? bytes.param * n / w : bytes.param * n;
    const int64_t expected_grad = stage >= 2 ? bytes.grad * n / w : bytes.grad * n;
    const int64_t expected_master = stage >= 1 ? bytes.master * n / w : bytes.master * n;
    const int64_t expected_optimizer = stage >= 1 ? bytes.optimizer * n / w : bytes.optimizer * n;
    testing::RunGroup(world, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
      auto engine = Engine::Create(models[rank], comms[0], *config);
      ASSERT_TRUE(engine.ok()) << engine.status();
      auto expect_arithmetic = [&](const char* when) {
        SCOPED_TRACE(when);
        MemoryReport report = (*engine)->Memory();
        EXPECT_EQ(report.num_parameters, n);
        EXPECT_EQ(report.param_bytes, expected_param);
        EXPECT_EQ(report.grad_bytes, expected_grad);
        EXPECT_EQ(report.master_bytes, expected_master);
        EXPECT_EQ(report.optimizer_bytes, expected_optimizer);
        if (stage == 0) {
          EXPECT_DOUBLE_EQ(report.bytes_per_parameter(), total_per_param);
        }
        if (stage == 3) {
          EXPECT_DOUBLE_EQ(report.bytes_per_parameter(),
                           static_cast<double>(total_per_param) / world);
        }
        EXPECT_GT(report.peak_bytes, 0);
        EXPECT_EQ(report.peak_source, "rss");
      };
      expect_arithmetic("after Create");
      // The same once a step has run backward, reduced and updated.
      const auto dtype = models[rank]->parameters().front().scalar_type();
      for (int step = 0; step < 2; ++step) {
        {
          auto autocast = (*engine)->Autocast();
          models[rank]->forward(torch::randn({4, 5}).to(dtype)).to(torch::kFloat).pow(2).mean()
              .backward();
        }
        ASSERT_TRUE((*engine)->Step().ok());
      }
      expect_arithmetic("after two steps");
    });
  }
};

TEST_P(MemoryTest, Fp32Is16BytesPerParameter) {
  Check(R"("bf16": {"enabled": false})", {4, 4, 0, 8}, 16);
}

TEST_P(MemoryTest, Bf16WithFp32MasterIs16BytesPerParameter) {
  Check(R"("bf16": {"enabled": true})", {2, 2, 4, 8}, 16);
}

TEST_P(MemoryTest, Bf16MasterWeightsGradsAndStatesIs8BytesPerParameter) {
  Check(R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
                    "bf16_optimizer_states": true})",
        {2, 2, 0, 4}, 8);
}

TEST_P(MemoryTest, KahanCompensationAddsTwoBytesPerParameter) {
  Check(R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
                    "bf16_optimizer_states": true}, "tandem": {"bf16_update": "kahan"})",
        {2, 2, 0, 6}, 10);
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return "Stage" + std::to_string(std::get<0>(info.param)) + "World" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(StagesAndWorlds, MemoryTest,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Values(1, 2, 3)),
                         CaseName);

}  // namespace
}  // namespace tandem::engine
