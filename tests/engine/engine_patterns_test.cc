// DeepSpeed's user-backward acceptance patterns (tests/unit/v1/zero/test_zero_user_backward.py) for
// ZeRO stages 0-3 at world sizes 1, 2 and 3, each against single-process LibTorch with
// torch::optim::AdamW on the same data and initial weights: gradients before every update and
// parameters after it, in fp32 within tight tolerance. The engine runs its default no_decay, so the
// reference has two parameter groups as a Hugging Face Trainer builds them: weight decay 0.1 for
// the matrices, 0 for the biases.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <tuple>
#include <vector>

#include "engine/engine.h"
#include "engine_config/config.h"
#include "tests/testing/group.h"
#include "tests/testing/models.h"

namespace tandem::engine {
namespace {

using testing::TinyNet;
using Models = std::vector<std::shared_ptr<TinyNet>>;
// One micro-batch of a pattern: forward through `models`, one or more backward calls.
using MicroBatch = std::function<void(Models& models, const at::Tensor& x, const at::Tensor& y)>;

struct Pattern {
  int num_models = 1;
  int gas = 1;
  bool recompute = false;
  MicroBatch micro_batch;
};

constexpr int kSteps = 3;
constexpr int kLocalBatch = 4;

Config FpConfig(int stage, int gas) {
  auto config = ParseConfig(R"({
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.99], "eps": 1e-8,
                                               "weight_decay": 0.1}},
    "zero_optimization": {"stage": 0, "reduce_bucket_size": 40}
  })");
  EXPECT_TRUE(config.ok()) << config.status();
  config->zero.stage = stage;
  config->gradient_accumulation_steps = gas;
  return *config;
}

Models MakeModels(int n, bool recompute) {
  Models models;
  for (int i = 0; i < n; ++i) {
    torch::manual_seed(100 + i);
    models.push_back(std::make_shared<TinyNet>());
    models.back()->set_recompute(recompute);
  }
  return models;
}

Models CopyModels(const Models& from, bool recompute) {
  Models models = MakeModels(static_cast<int>(from.size()), recompute);
  for (size_t i = 0; i < from.size(); ++i) testing::CopyParameters(*from[i], *models[i]);
  return models;
}

struct Expected {
  std::vector<std::vector<std::map<std::string, at::Tensor>>> grads;   // [step][model]
  std::vector<std::vector<std::map<std::string, at::Tensor>>> params;  // [step][model]
};

// data[step][micro][rank] = {x, y}
using Data = std::vector<std::vector<std::vector<std::pair<at::Tensor, at::Tensor>>>>;

Data MakeData(int world, int gas) {
  torch::manual_seed(7);
  Data data(kSteps);
  for (auto& step : data) {
    step.resize(gas);
    for (auto& micro : step) {
      for (int r = 0; r < world; ++r) {
        micro.emplace_back(torch::randn({kLocalBatch, 5}), torch::randn({kLocalBatch, 3}));
      }
    }
  }
  return data;
}

// Single process: every rank's micro-batches in turn, gradients averaged as DeepSpeed does.
Expected RunReference(const Pattern& pattern, const Models& initial, const Data& data, int world) {
  Models models = CopyModels(initial, pattern.recompute);
  std::vector<std::unique_ptr<torch::optim::AdamW>> optimizers;
  for (auto& m : models) {
    std::vector<at::Tensor> decay, no_decay;
    for (const auto& p : m->parameters()) (p.dim() < 2 ? no_decay : decay).push_back(p);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(
        decay,
        std::make_unique<torch::optim::AdamWOptions>(
            torch::optim::AdamWOptions(0.01).betas({0.9, 0.99}).eps(1e-8).weight_decay(0.1)));
    groups.emplace_back(
        no_decay,
        std::make_unique<torch::optim::AdamWOptions>(
            torch::optim::AdamWOptions(0.01).betas({0.9, 0.99}).eps(1e-8).weight_decay(0.0)));
    optimizers.push_back(std::make_unique<torch::optim::AdamW>(std::move(groups)));
  }
  Expected expected;
  for (int s = 0; s < kSteps; ++s) {
    for (auto& o : optimizers) o->zero_grad();
    for (int m = 0; m < pattern.gas; ++m) {
      for (int r = 0; r < world; ++r)
        pattern.micro_batch(models, data[s][m][r].first, data[s][m][r].second);
    }
    std::vector<std::map<std::string, at::Tensor>> grads, params;
    for (auto& model : models) {
      std::map<std::string, at::Tensor> g;
      for (auto& item : model->named_parameters()) {
        item.value().mutable_grad().div_(world * pattern.gas);
        g[item.key()] = item.value().grad().clone();
      }
      grads.push_back(g);
    }
    for (auto& o : optimizers) o->step();
    for (auto& model : models) {
      std::map<std::string, at::Tensor> p;
      for (auto& item : model->named_parameters()) p[item.key()] = item.value().detach().clone();
      params.push_back(p);
    }
    expected.grads.push_back(grads);
    expected.params.push_back(params);
  }
  return expected;
}

void ExpectClose(const NamedTensors& actual, const std::map<std::string, at::Tensor>& expected,
                 double atol, double rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (const auto& [name, tensor] : actual) {
    ASSERT_TRUE(expected.count(name)) << what << ": unexpected parameter " << name;
    EXPECT_LE(testing::ToleranceRatio(tensor, expected.at(name), atol, rtol), 1.0)
        << what << " " << name << "\nactual\n"
        << tensor << "\nexpected\n"
        << expected.at(name);
  }
}

class EnginePatternTest : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  void Check(const Pattern& pattern) {
    const auto [stage, world] = GetParam();
    const Models initial = MakeModels(pattern.num_models, false);
    const Data data = MakeData(world, pattern.gas);
    const Expected expected = RunReference(pattern, initial, data, world);
    std::vector<Models> rank_models;
    for (int r = 0; r < world; ++r) rank_models.push_back(CopyModels(initial, pattern.recompute));

    testing::RunGroup(
        world,
        [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
          Models& models = rank_models[rank];
          std::vector<std::unique_ptr<Engine>> engines;
          for (int k = 0; k < pattern.num_models; ++k) {
            auto engine = Engine::Create(models[k], comms[k], FpConfig(stage, pattern.gas));
            ASSERT_TRUE(engine.ok()) << engine.status();
            engines.push_back(std::move(*engine));
          }
          for (int s = 0; s < kSteps; ++s) {
            for (int m = 0; m < pattern.gas; ++m) {
              pattern.micro_batch(models, data[s][m][rank].first, data[s][m][rank].second);
              if (m == pattern.gas - 1) {
                for (int k = 0; k < pattern.num_models; ++k) {
                  auto grads = engines[k]->GatherGradients();
                  ASSERT_TRUE(grads.ok()) << grads.status();
                  ExpectClose(*grads, expected.grads[s][k], 1e-6, 1e-4,
                              "grads step " + std::to_string(s) + " rank " + std::to_string(rank));
                }
              }
              for (auto& engine : engines) ASSERT_TRUE(engine->Step().ok());
            }
            for (int k = 0; k < pattern.num_models; ++k) {
              auto params = engines[k]->GatherParameters();
              ASSERT_TRUE(params.ok()) << params.status();
              ExpectClose(*params, expected.params[s][k], 1e-5, 1e-4,
                          "params step " + std::to_string(s) + " rank " + std::to_string(rank));
              EXPECT_EQ(engines[k]->global_steps(), s + 1);
            }
          }
        },
        pattern.num_models);
  }
};

at::Tensor Mse(const at::Tensor& out, const at::Tensor& y) { return torch::mse_loss(out, y); }

TEST_P(EnginePatternTest, BasicScalarLossBackward) {
  Check({1, 1, false, [](Models& m, const at::Tensor& x, const at::Tensor& y) {
           Mse(m[0]->forward(x), y).backward();
         }});
}

TEST_P(EnginePatternTest, NonScalarOutputBackwardWithGradient) {
  Check({1, 1, false, [](Models& m, const at::Tensor& x, const at::Tensor& y) {
           at::Tensor out = m[0]->forward(x);
           at::Tensor grad = 2.0 * (out.detach() - y) / out.numel();  // d mse / d out
           out.backward(grad);
         }});
}

TEST_P(EnginePatternTest, GradientAccumulationOverFourMicroBatches) {
  Check({1, 4, false, [](Models& m, const at::Tensor& x, const at::Tensor& y) {
           Mse(m[0]->forward(x), y).backward();
         }});
}

TEST_P(EnginePatternTest, OneBackwardThroughTwoEngines) {
  Check({2, 1, false, [](Models& m, const at::Tensor& x, const at::Tensor& y) {
           Mse(m[0]->forward(x) + 0.5 * m[1]->forward(x), y).backward();
         }});
}

TEST_P(EnginePatternTest, LossComputedOutsideTheModel) {
  Check({1, 1, false, [](Models& m, const at::Tensor& x, const at::Tensor& y) {
           at::Tensor logits = m[0]->forward(x);
           torch::nn::functional::cross_entropy(logits, y.argmax(1)).backward();
         }});
}

TEST_P(EnginePatternTest, RecomputedBlocks) {
  Check({1, 2, true, [](Models& m, const at::Tensor& x, const at::Tensor& y) {
           Mse(m[0]->forward(x), y).backward();
         }});
}

TEST_P(EnginePatternTest, SeveralBackwardCallsPerStep) {
  Check({1, 1, false, [](Models& m, const at::Tensor& x, const at::Tensor& y) {
           Mse(m[0]->forward(x.slice(0, 0, 2)), y.slice(0, 0, 2)).backward();
           at::Tensor out = m[0]->forward(x.slice(0, 2));
           out.backward(2.0 * (out.detach() - y.slice(0, 2)) / out.numel());
         }});
}

// Two backward calls in each of three accumulated micro-batches: at stages 0 and 1 the boundary's
// second backward must reduce its own gradients, not the buffer that already holds the group's sum
// (it reduced that again before: world-fold gradients).
TEST_P(EnginePatternTest, SeveralBackwardCallsPerMicroBatchWithAccumulation) {
  Check({1, 3, false, [](Models& m, const at::Tensor& x, const at::Tensor& y) {
           Mse(m[0]->forward(x.slice(0, 0, 2)), y.slice(0, 0, 2)).backward();
           Mse(m[0]->forward(x.slice(0, 2)), y.slice(0, 2)).backward();
         }});
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return "Stage" + std::to_string(std::get<0>(info.param)) + "World" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(StagesAndWorlds, EnginePatternTest,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(1, 2, 3)),
                         CaseName);

}  // namespace
}  // namespace tandem::engine
