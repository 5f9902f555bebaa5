// Recomputed blocks. Under autocast with fp32 parameters, with backward inside the engine's
// autocast scope as engine/engine.h documents: the recomputation must not reuse the bf16 weight
// casts autocast cached during the no-grad forward (they carry no autograd link), so every block
// parameter gets the gradient a plain (not recomputed) run gives it. And a block whose Run reads a
// parameter from outside it is named rather than left without that gradient.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine_config/config.h"
#include "tests/testing/models.h"

namespace tandem::engine {
namespace {

using testing::TinyNet;

std::map<std::string, at::Tensor> GradientsOfOneStep(bool recompute) {
  torch::manual_seed(9);
  auto model = std::make_shared<TinyNet>();
  model->set_recompute(recompute);
  auto config = ParseConfig(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "bf16": {"enabled": false}, "torch_autocast": {"enabled": true, "dtype": "bfloat16"}})");
  EXPECT_TRUE(config.ok()) << config.status();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), *config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  torch::manual_seed(10);
  const at::Tensor x = torch::randn({6, 5}), y = torch::randn({6, 3});
  {
    auto autocast = (*engine)->Autocast();
    const at::Tensor loss = torch::mse_loss(model->forward(x).to(torch::kFloat), y);
    loss.backward();  // inside the scope: autocast's cache is still alive
  }
  auto grads = (*engine)->GatherGradients();
  EXPECT_TRUE(grads.ok()) << grads.status();
  return {grads->begin(), grads->end()};
}

TEST(RecomputeUnderAutocast, BlockParametersGetTheGradientsOfAPlainRun) {
  const auto plain = GradientsOfOneStep(false);
  const auto recomputed = GradientsOfOneStep(true);
  ASSERT_EQ(plain.size(), recomputed.size());
  for (const auto& [name, grad] : plain) {
    ASSERT_GT(grad.abs().max().item<double>(), 0.0) << name;
    EXPECT_TRUE(torch::allclose(recomputed.at(name), grad, 1e-3, 1e-5))
        << name << ": max difference " << (recomputed.at(name) - grad).abs().max().item<double>();
  }
}

// A block whose Run reads a parameter registered outside it (the model's shared scale).
class ScaledBlock : public BlockModule {
 public:
  ScaledBlock(int64_t width, at::Tensor scale)
      : fc_(register_module("fc", torch::nn::Linear(width, width))), scale_(std::move(scale)) {}
  std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs) override {
    return {inputs[0] + scale_ * torch::tanh(fc_(inputs[0]))};
  }

 private:
  torch::nn::Linear fc_;
  at::Tensor scale_;
};

struct SharedScaleNet : torch::nn::Module {
  SharedScaleNet() {
    scale = register_parameter("scale", torch::ones({1}));
    block = register_module("block", std::make_shared<ScaledBlock>(4, scale));
    block->set_recompute(true);
  }
  at::Tensor scale;
  std::shared_ptr<ScaledBlock> block;
};

// The recomputation would give `scale` no gradient from its use inside the block: the backward
// fails naming the block and the parameter instead of leaving it untrained.
TEST(RecomputedBlock, AParameterFromOutsideTheBlockIsNamed) {
  auto model = std::make_shared<SharedScaleNet>();
  auto config = ParseConfig(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "bf16": {"enabled": false}})");
  ASSERT_TRUE(config.ok()) << config.status();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), *config);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const at::Tensor loss = model->block->Forward(torch::randn({3, 4})).pow(2).sum();
  try {
    loss.backward();
    FAIL() << "backward succeeded";
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_EQ(message.rfind("block 0 (", 0), 0u) << message;
    EXPECT_NE(message.find("ScaledBlock) reads parameter scale, which is not one of its own"),
              std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace tandem::engine
