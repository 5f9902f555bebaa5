// Optimizer parameter groups (tandem.param_groups, tandem.no_decay; NOTE [Optimizer groups] in
// engine/optimizer_groups.cc): per-group lr, weight decay, betas and eps match
// torch::optim::AdamW built with the same groups, at every ZeRO stage and at world sizes 1 and 2
// (where ZeRO partitions cut parameters, and so segments, in two); no_decay spares biases,
// norm weights and embeddings; schedules scale each group's lr; a group that matches nothing is
// refused naming it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/engine.h"
#include "engine_config/config.h"
#include "engine_config/param_groups.h"
#include "tests/testing/group.h"
#include "tests/testing/models.h"

namespace tandem::engine {
namespace {

using testing::TinyNet;

Config ParseOrDie(const std::string& json) {
  auto config = ParseConfig(json);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : Config{};
}

// Groups: the input layer at a 5x lr with its own betas and decay; the output bias with its own
// eps; everything else from optimizer.params, biases without decay (no_decay).
constexpr char kGroupsConfig[] = R"({
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.99], "weight_decay": 0.1}},
  "zero_optimization": {"stage": STAGE, "reduce_bucket_size": 40},
  "tandem": {"param_groups": [
    {"params": ["input.*"], "lr": 0.05, "betas": [0.8, 0.9], "weight_decay": 0.3},
    {"params": ["output.b?as"], "eps": 1e-3}
  ]}
})";

std::unique_ptr<torch::optim::AdamW> ReferenceOptimizer(TinyNet& model) {
  std::vector<at::Tensor> input, output_bias, decay, no_decay;
  for (const auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    if (name.rfind("input.", 0) == 0) {
      input.push_back(item.value());
    } else if (name == "output.bias") {
      output_bias.push_back(item.value());
    } else {
      (item.value().dim() < 2 ? no_decay : decay).push_back(item.value());
    }
  }
  using torch::optim::AdamWOptions;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(input, std::make_unique<AdamWOptions>(
                                 AdamWOptions(0.05).betas({0.8, 0.9}).weight_decay(0.3)));
  // output.bias: its group sets eps only, and no_decay applies to it (it is 1-D).
  groups.emplace_back(output_bias,
                      std::make_unique<AdamWOptions>(
                          AdamWOptions(0.01).betas({0.9, 0.99}).eps(1e-3).weight_decay(0)));
  groups.emplace_back(decay, std::make_unique<AdamWOptions>(
                                 AdamWOptions(0.01).betas({0.9, 0.99}).weight_decay(0.1)));
  groups.emplace_back(no_decay, std::make_unique<AdamWOptions>(
                                    AdamWOptions(0.01).betas({0.9, 0.99}).weight_decay(0.0)));
  return std::make_unique<torch::optim::AdamW>(std::move(groups));
}

class OptimizerGroupsTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(OptimizerGroupsTest, MatchTorchAdamWWithTheSameGroups) {
  const auto [stage, world] = GetParam();
  constexpr int kSteps = 3;
  torch::manual_seed(21);
  TinyNet initial;
  torch::manual_seed(22);
  std::vector<std::vector<std::pair<at::Tensor, at::Tensor>>> data(kSteps);
  for (auto& step : data) {
    for (int r = 0; r < world; ++r) step.emplace_back(torch::randn({4, 5}), torch::randn({4, 3}));
  }

  TinyNet reference;
  testing::CopyParameters(initial, reference);
  auto optimizer = ReferenceOptimizer(reference);
  for (const auto& step : data) {
    optimizer->zero_grad();
    for (const auto& [x, y] : step) (torch::mse_loss(reference.forward(x), y) / world).backward();
    optimizer->step();
  }

  std::string json = kGroupsConfig;
  json.replace(json.find("STAGE"), 5, std::to_string(stage));
  std::vector<std::shared_ptr<TinyNet>> models;
  for (int r = 0; r < world; ++r) {
    models.push_back(std::make_shared<TinyNet>());
    testing::CopyParameters(initial, *models.back());
  }
  testing::RunGroup(world, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto engine = Engine::Create(models[rank], comms[0], ParseOrDie(json));
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (const auto& step : data) {
      torch::mse_loss(models[rank]->forward(step[rank].first), step[rank].second).backward();
      ASSERT_TRUE((*engine)->Step().ok());
    }
    auto params = (*engine)->GatherParameters();
    ASSERT_TRUE(params.ok()) << params.status();
    // The groups' updates differ by far more than this: a 5x lr moves the input layer ~0.15
    // where the default group moves ~0.03 in three steps.
    testing::ExpectCloseToParameters(*params, reference, 1e-5, 1e-4,
                                     "rank " + std::to_string(rank));
  });
}

INSTANTIATE_TEST_SUITE_P(StagesAndWorlds, OptimizerGroupsTest,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return "Stage" + std::to_string(std::get<0>(info.param)) + "World" +
                                  std::to_string(std::get<1>(info.param));
                         });

// A model with a bias, a norm weight, an embedding table, a learned position table and a class
// token (3-D, named like the vision encoder's).
struct DecayNet : torch::nn::Module {
  DecayNet() {
    embed = register_module("embed", torch::nn::Embedding(6, 4));
    positions = register_parameter("positions", torch::randn({1, 3, 4}));
    class_token = register_parameter("class_token", torch::randn({1, 1, 4}));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({4})));
    proj = register_module("proj", torch::nn::Linear(4, 4));
  }
  at::Tensor forward(const at::Tensor& tokens) {
    return proj(norm(embed(tokens) + positions + class_token));
  }
  torch::nn::Embedding embed{nullptr};
  at::Tensor positions;
  at::Tensor class_token;
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear proj{nullptr};
};

// One update with zero gradients: Adam's step is 0/(0 + eps) = 0, so a weight changes only by
// decay, w * (1 - lr * weight_decay) exactly.
std::map<std::string, double> DecayFactors(const std::string& tandem_block) {
  torch::manual_seed(3);
  auto model = std::make_shared<DecayNet>();
  std::map<std::string, at::Tensor> before;
  for (const auto& item : model->named_parameters())
    before[item.key()] = item.value().detach().clone();
  Config config = ParseOrDie(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.1,
      "weight_decay": 0.5}}, "tandem": )" +
                             tandem_block + "}");
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  (model->forward(torch::tensor({0, 1, 2}).view({1, 3})).sum() * 0.0).backward();
  EXPECT_TRUE((*engine)->Step().ok());
  std::map<std::string, double> factors;
  for (const auto& item : model->named_parameters()) {
    const at::Tensor& b = before[item.key()];
    const at::Tensor mask = b.abs() > 1e-3;  // skip zeros (biases start at 0)
    factors[item.key()] = mask.any().item<bool>()
                              ? (item.value().detach().masked_select(mask) / b.masked_select(mask))
                                    .mean()
                                    .item<double>()
                              : 1.0;
  }
  return factors;
}

TEST(NoDecay, SparesBiasesNormsEmbeddingsPositionsAndClassTokensByDefault) {
  const auto factors = DecayFactors("{}");
  EXPECT_NEAR(factors.at("proj.weight"), 1.0 - 0.1 * 0.5, 1e-6);
  for (const char* name :
       {"embed.weight", "positions", "class_token", "norm.weight", "proj.bias"}) {
    EXPECT_NEAR(factors.at(name), 1.0, 1e-7) << name;
  }
}

TEST(NoDecay, TurnedOffDecaysEveryParameter) {
  const auto factors = DecayFactors(R"({"no_decay": false})");
  for (const char* name :
       {"proj.weight", "embed.weight", "positions", "class_token", "norm.weight", "proj.bias"}) {
    EXPECT_NEAR(factors.at(name), 1.0 - 0.1 * 0.5, 1e-6) << name;
  }
}

TEST(NoDecay, AGroupsOwnWeightDecayWins) {
  const auto factors =
      DecayFactors(R"({"param_groups": [{"params": ["embed.*"], "weight_decay": 0.2}]})");
  EXPECT_NEAR(factors.at("embed.weight"), 1.0 - 0.1 * 0.2, 1e-6);
  EXPECT_NEAR(factors.at("positions"), 1.0, 1e-7);
}

TEST(OptimizerGroups, SchedulesScaleEachGroupsLr) {
  // WarmupCosineLR peaks at optimizer.params.lr = 0.01; the projector's group peaks at 0.002.
  auto model = std::make_shared<DecayNet>();
  Config config = ParseOrDie(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 4,
                    "total_num_steps": 20, "warmup_type": "linear"}},
      "tandem": {"no_decay": false, "param_groups": [{"params": ["proj.*"], "lr": 0.002}]}})");
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), config);
  ASSERT_TRUE(engine.ok()) << engine.status();
  for (int step = 0; step < 6; ++step) {
    const auto lrs = (*engine)->group_lrs();
    ASSERT_EQ(lrs.size(), 2u);
    EXPECT_EQ(lrs[0].first, "default");
    EXPECT_EQ(lrs[1].first, "tandem.param_groups[0]");
    EXPECT_DOUBLE_EQ(lrs[0].second, (*engine)->current_lr());
    EXPECT_NEAR(lrs[1].second, 0.2 * (*engine)->current_lr(), 1e-15) << "step " << step;
    model->forward(torch::tensor({0, 1, 2}).view({1, 3})).sum().backward();
    ASSERT_TRUE((*engine)->Step().ok());
  }
  EXPECT_GT((*engine)->current_lr(), 0.005);  // past the warmup: the ratio held on a moving lr
}

TEST(OptimizerGroups, AGroupThatMatchesNothingIsRefusedNamingIt) {
  auto model = std::make_shared<DecayNet>();
  Config config = ParseOrDie(R"({"tandem": {"param_groups": [{"params": ["proj.*"]},
      {"params": ["projector.*", "head.weight"], "lr": 1e-3}]}})");
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), config);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      std::string(engine.status().message()),
      "tandem.param_groups[1].params: [\"projector.*\", \"head.weight\"] matches no trainable "
      "parameter of the model (or only parameters an earlier group took; names are as in "
      "named_parameters(), e.g. positions)");
}

TEST(MatchesNamePattern, GlobOverWholeNames) {
  EXPECT_TRUE(engine_config::MatchesNamePattern("blocks.*.attn.*", "blocks.10.attn.qkv.weight"));
  EXPECT_TRUE(engine_config::MatchesNamePattern("*bias", "blocks.0.mlp.fc1.bias"));
  EXPECT_TRUE(engine_config::MatchesNamePattern("norm.weigh?", "norm.weight"));
  EXPECT_TRUE(engine_config::MatchesNamePattern("*", "x"));
  EXPECT_FALSE(engine_config::MatchesNamePattern("norm", "norm.weight"));  // whole names only
  EXPECT_FALSE(engine_config::MatchesNamePattern("*.bias", "bias"));
  EXPECT_FALSE(engine_config::MatchesNamePattern("a*b*c", "aXbXd"));
}

}  // namespace
}  // namespace tandem::engine
