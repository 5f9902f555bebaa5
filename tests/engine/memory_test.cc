// The memory report equals the ZeRO arithmetic: 16 bytes/param (fp32, or bf16 with fp32 master) and
// 8 bytes/param (bf16 master weights, grads and optimizer states) before partitioning, each
// component divided by the world size where the stage partitions it, right after Create and after
// steps.
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
    // arithmetic is exact. No stem or head: every parameter sits in a block, so ZeRO-3 partitions
    // all.
    std::vector<std::shared_ptr<testing::TinyNet>> models;
    for (int r = 0; r < world; ++r)
      models.push_back(std::make_shared<testing::TinyNet>(5, 5, 5, 2, false));
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
          models[rank]
              ->forward(torch::randn({4, 5}).to(dtype))
              .to(torch::kFloat)
              .pow(2)
              .mean()
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
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(1, 2, 3)),
                         CaseName);

// NOTE [Buckets] in engine/engine.h: the unit size policy, and the reduction buffers Memory()
// counts after a step.
TEST(Buckets, UnitsHoldAnEighthOfTheModelWithinReduceBucketSizeAndOneMillionElements) {
  Config config;  // reduce_bucket_size 5e8, DeepSpeed's default
  EXPECT_EQ(ReductionUnitElements(config, 50'000'000), 6'250'000);       // 8 units, not 1
  EXPECT_EQ(ReductionUnitElements(config, 4'000'000'000), 500'000'000);  // capped by the key
  EXPECT_EQ(ReductionUnitElements(config, 100'000), 1 << 20);            // one unit, small model
  config.zero.reduce_bucket_size = 40;
  EXPECT_EQ(ReductionUnitElements(config, 50'000'000), 40);  // an explicit small bucket wins
}

// Bytes of the reduction buffers after one step of the 252-parameter model (one unit: under the
// 1M-element minimum) in `precision_json` at `stage`, one rank.
int64_t BucketBytesAfterAStep(int stage, const std::string& precision_json) {
  auto config = ParseConfig(R"({"zero_optimization": {"stage": )" + std::to_string(stage) + "}, " +
                            precision_json + "}");
  EXPECT_TRUE(config.ok()) << config.status();
  auto model = std::make_shared<testing::TinyNet>(5, 5, 5, 2, false);
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), *config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return -1;
  EXPECT_EQ((*engine)->layout().units().size(), stage == 3 ? 2u : 1u);
  const auto dtype = model->parameters().front().scalar_type();
  model->forward(torch::randn({4, 5}).to(dtype)).to(torch::kFloat).pow(2).mean().backward();
  EXPECT_TRUE((*engine)->Step().ok());
  return (*engine)->Memory().bucket_bytes;
}

TEST(Buckets, GradientsReduceInPlaceWhereTheCommunicationDtypeIsTheGradients) {
  // fp32 gradients and fp32 reductions; bf16 gradients with communication_data_type bf16.
  EXPECT_EQ(BucketBytesAfterAStep(0, R"("bf16": {"enabled": false})"), 0);
  EXPECT_EQ(BucketBytesAfterAStep(1, R"("bf16": {"enabled": true, "bf16_master_weights_and_grads":
      true, "bf16_optimizer_states": true}, "communication_data_type": "bf16")"),
            0);
}

TEST(Buckets, OtherwiseTheyAreCountedInTheCommunicationDtype) {
  // bf16 gradients reduced in fp32 (the default): one fp32 bucket of the unit, 252 x 4 bytes.
  EXPECT_EQ(BucketBytesAfterAStep(0, R"("bf16": {"enabled": true})"), 252 * 4);
  // Stage 2 reduce-scatters from a bucket into a shard (the whole unit at world size 1), whatever
  // the dtypes: bucket and output.
  EXPECT_EQ(BucketBytesAfterAStep(2, R"("bf16": {"enabled": false})"), 2 * 252 * 4);
  // Stage 3: each block's unit (126) has its own bucket; one is folded before the next fills.
  EXPECT_EQ(BucketBytesAfterAStep(3, R"("bf16": {"enabled": true, "bf16_master_weights_and_grads":
      true, "bf16_optimizer_states": true}, "communication_data_type": "bf16")"),
            2 * 126 * 2);
}

}  // namespace
}  // namespace tandem::engine
