// A tensor registered under two names (tied input and output embeddings) is one parameter of the
// engine: one slot, its gradient accumulated once from both uses, updated as single-process
// torch::optim::AdamW updates it, and exported under both names.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/safetensors.h"
#include "engine_config/config.h"
#include "tests/testing/group.h"

namespace tandem::engine {
namespace {

constexpr int64_t kVocab = 7, kWidth = 4;

// The output projection reads the embedding table it is given.
struct TiedHead : torch::nn::Module {
  explicit TiedHead(const at::Tensor& table) { weight = register_parameter("weight", table); }
  at::Tensor weight;
};

struct TiedNet : torch::nn::Module {
  TiedNet() {
    table = register_parameter("table", torch::randn({kVocab, kWidth}) * 0.5);
    mix = register_module("mix", torch::nn::Linear(kWidth, kWidth));
    head = register_module("head", std::make_shared<TiedHead>(table));
  }
  at::Tensor forward(const at::Tensor& tokens) {
    const at::Tensor hidden = torch::tanh(mix(table.index_select(0, tokens)));
    return hidden.matmul(head->weight.t());
  }
  at::Tensor table;
  torch::nn::Linear mix{nullptr};
  std::shared_ptr<TiedHead> head;
};

// The same weights in a fresh model.
std::shared_ptr<TiedNet> CopyOf(TiedNet& from) {
  auto model = std::make_shared<TiedNet>();
  torch::NoGradGuard no_grad;
  model->table.copy_(from.table);
  model->mix->weight.copy_(from.mix->weight);
  model->mix->bias.copy_(from.mix->bias);
  return model;
}

Config MakeConfig(int stage) {
  auto config = ParseConfig(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.05,
      "weight_decay": 0.01}}, "tandem": {"no_decay": false}, "zero_optimization": {"stage": )" +
                            std::to_string(stage) +
                            R"(, "reduce_bucket_size": 16}, "bf16": {"enabled": false}})");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

class TiedParametersTest : public ::testing::TestWithParam<int> {};

TEST_P(TiedParametersTest, OneSlotUpdatedAsTorchAdamWAndExportedUnderBothNames) {
  constexpr int kWorld = 2, kSteps = 4;
  torch::manual_seed(5);
  auto reference = std::make_shared<TiedNet>();
  std::vector<std::shared_ptr<TiedNet>> models;
  for (int r = 0; r < kWorld; ++r) models.push_back(CopyOf(*reference));
  std::vector<at::Tensor> tokens, targets;
  for (int i = 0; i < kSteps * kWorld; ++i) {
    tokens.push_back(torch::randint(kVocab, {6}));
    targets.push_back(torch::randint(kVocab, {6}));
  }
  // The reference: each tensor once (LibTorch's parameters() lists the tied one twice).
  torch::optim::AdamW optimizer({reference->table, reference->mix->weight, reference->mix->bias},
                                torch::optim::AdamWOptions(0.05).weight_decay(0.01));
  for (int s = 0; s < kSteps; ++s) {
    optimizer.zero_grad();
    for (int r = 0; r < kWorld; ++r) {
      (torch::cross_entropy_loss(reference->forward(tokens[s * kWorld + r]),
                                 targets[s * kWorld + r]) /
       kWorld)
          .backward();
    }
    optimizer.step();
  }

  const testing::TempDir dir;
  testing::RunGroup(kWorld, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    Config config = MakeConfig(GetParam());
    config.gradient_reduction = GradientReduction::kMean;
    auto engine = Engine::Create(models[rank], comms[0], config);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_EQ((*engine)->layout().num_elements(), kVocab * kWidth + kWidth * kWidth + kWidth);
    for (int s = 0; s < kSteps; ++s) {
      torch::cross_entropy_loss(models[rank]->forward(tokens[s * kWorld + rank]),
                                targets[s * kWorld + rank])
          .backward();
      ASSERT_TRUE((*engine)->Step().ok());
    }
    auto params = (*engine)->GatherParameters();
    ASSERT_TRUE(params.ok()) << params.status();
    const std::map<std::string, at::Tensor> got(params->begin(), params->end());
    ASSERT_EQ(got.count("table"), 1u);
    EXPECT_TRUE(torch::allclose(got.at("table"), reference->table, 1e-5, 1e-6))
        << (got.at("table") - reference->table).abs().max();
    EXPECT_TRUE(torch::allclose(got.at("mix.weight"), reference->mix->weight, 1e-5, 1e-6));
    // The model reads the trained table through both names.
    EXPECT_TRUE(models[rank]->head->weight.is_same(models[rank]->table));
    const std::string path = dir / "tied.safetensors";
    ASSERT_TRUE((*engine)->ExportSafetensors(path).ok());
    if (rank == 0) {
      auto exported = ReadSafetensors(path);
      ASSERT_TRUE(exported.ok()) << exported.status();
      const std::map<std::string, at::Tensor> names(exported->begin(), exported->end());
      ASSERT_EQ(names.count("head.weight"), 1u);
      EXPECT_TRUE(torch::equal(names.at("head.weight"), names.at("table")));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, TiedParametersTest, ::testing::Values(0, 1, 2, 3));

}  // namespace
}  // namespace tandem::engine
