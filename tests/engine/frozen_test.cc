// Frozen parameters (requires_grad false; NOTE [Frozen parameters] in engine/frozen.cc): the rest
// of the model trains as torch::optim::AdamW trains it over the trainable parameters alone, at
// every ZeRO stage and world sizes 1 and 2; frozen ones never move, get no gradient or optimizer
// bytes, are gathered with their block at stage 3, and are checkpointed and exported. A model with
// every parameter frozen still runs forward and steps.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/engine.h"
#include "engine/safetensors.h"
#include "engine_config/config.h"
#include "tests/testing/group.h"
#include "tests/testing/models.h"

namespace tandem::engine {
namespace {

using testing::TinyNet;

Config MakeConfig(int stage, bool bf16 = false) {
  auto config = ParseConfig(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1}},
          "tandem": {"no_decay": false}, "zero_optimization": {"stage": )" +
      std::to_string(stage) + R"(, "reduce_bucket_size": 40}, "bf16": {"enabled": )" +
      (bf16 ? "true" : "false") + "}}");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

// The input layer and block0's first linear layer stay fixed (a block half frozen: at stage 3 its
// frozen and trainable halves are gathered together).
bool IsFrozen(const std::string& name) {
  return name.rfind("input.", 0) == 0 || name.rfind("block0.fc1.", 0) == 0;
}

void Freeze(TinyNet& model) {
  for (auto& item : model.named_parameters()) {
    if (IsFrozen(item.key())) item.value().set_requires_grad(false);
  }
}

std::map<std::string, at::Tensor> Snapshot(TinyNet& model) {
  std::map<std::string, at::Tensor> values;
  for (const auto& item : model.named_parameters()) {
    values[item.key()] = item.value().detach().clone();
  }
  return values;
}

class FrozenTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(FrozenTest, TrainsTheRestAsTorchAndKeepsFrozenOnesFixed) {
  const auto [stage, world] = GetParam();
  constexpr int kSteps = 3;
  torch::manual_seed(31);
  TinyNet initial;
  const auto initial_values = Snapshot(initial);
  torch::manual_seed(32);
  std::vector<std::vector<std::pair<at::Tensor, at::Tensor>>> data(kSteps);
  for (auto& step : data) {
    for (int r = 0; r < world; ++r) step.emplace_back(torch::randn({4, 5}), torch::randn({4, 3}));
  }

  TinyNet reference;
  testing::CopyParameters(initial, reference);
  Freeze(reference);
  std::vector<at::Tensor> trainable;
  int64_t trainable_elements = 0, frozen_elements = 0;
  for (const auto& item : reference.named_parameters()) {
    if (item.value().requires_grad()) {
      trainable.push_back(item.value());
      trainable_elements += item.value().numel();
    } else {
      frozen_elements += item.value().numel();
    }
  }
  torch::optim::AdamW optimizer(trainable, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  for (const auto& step : data) {
    optimizer.zero_grad();
    for (const auto& [x, y] : step) (torch::mse_loss(reference.forward(x), y) / world).backward();
    optimizer.step();
  }
  const auto expected = Snapshot(reference);

  std::vector<std::shared_ptr<TinyNet>> models;
  for (int r = 0; r < world; ++r) {
    // Each rank starts from other values: the frozen ones too come from rank 0.
    torch::manual_seed(40 + r);
    models.push_back(std::make_shared<TinyNet>());
    if (r == 0) testing::CopyParameters(initial, *models.back());
    Freeze(*models.back());
  }
  testing::RunGroup(world, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto engine = Engine::Create(models[rank], comms[0], MakeConfig(stage));
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_EQ((*engine)->trainable_parameters(), trainable_elements);
    EXPECT_EQ((*engine)->frozen_parameters(), frozen_elements);
    for (const auto& step : data) {
      torch::mse_loss(models[rank]->forward(step[rank].first), step[rank].second).backward();
      ASSERT_TRUE((*engine)->Step().ok());
    }
    auto params = (*engine)->GatherParameters();
    ASSERT_TRUE(params.ok()) << params.status();
    ASSERT_EQ(params->size(), trainable.size());
    for (const auto& [name, actual] : *params) {
      EXPECT_FALSE(IsFrozen(name)) << name;
      EXPECT_LE(testing::ToleranceRatio(actual, expected.at(name), 1e-5, 1e-4), 1.0)
          << name << " rank " << rank;
    }
    auto frozen = (*engine)->GatherFrozenParameters();
    ASSERT_TRUE(frozen.ok()) << frozen.status();
    ASSERT_EQ(frozen->size(), 4u);  // input.weight, input.bias, block0.fc1.weight, .bias
    for (const auto& [name, actual] : *frozen) {
      EXPECT_TRUE(IsFrozen(name)) << name;
      EXPECT_TRUE(torch::equal(actual, initial_values.at(name))) << name << " rank " << rank;
    }
    // No gradient, master or moment bytes for frozen parameters: the ZeRO arithmetic over the
    // trainable elements alone (fp32: 4 B each of gradient, m and v), padding at most world - 1
    // elements per unit.
    const MemoryReport memory = (*engine)->Memory();
    EXPECT_EQ(memory.num_parameters, trainable_elements);
    EXPECT_EQ(memory.frozen_parameters, frozen_elements);
    const int64_t units = static_cast<int64_t>((*engine)->layout().units().size());
    const int64_t domain = stage == 0 ? trainable_elements : trainable_elements / world;
    EXPECT_GE(memory.optimizer_bytes, 8 * domain);
    EXPECT_LE(memory.optimizer_bytes, 8 * (domain + units * (world - 1)));
    if (world == 1) {
      EXPECT_EQ(memory.grad_bytes, 4 * trainable_elements);
    }
    if (stage < 3) {
      EXPECT_EQ(memory.frozen_bytes, 4 * frozen_elements);
    } else {
      // input.* stays whole on every rank; block0.fc1 is split across the group.
      const int64_t fc1 = 7 * 15 + 15;
      const int64_t input = frozen_elements - fc1;
      EXPECT_EQ(memory.frozen_bytes, 4 * (input + (fc1 + world - 1) / world));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(StagesAndWorlds, FrozenTest,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return "Stage" + std::to_string(std::get<0>(info.param)) + "World" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(Frozen, AWhollyFrozenModelRunsForwardStepsAndExports) {
  for (const int stage : {0, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    torch::manual_seed(5);
    auto model = std::make_shared<TinyNet>();
    const auto before = Snapshot(*model);
    for (auto& p : model->parameters()) p.set_requires_grad(false);
    auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(stage, true));
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_EQ((*engine)->trainable_parameters(), 0);
    const at::Tensor x = torch::randn({2, 5});
    at::Tensor out;
    {
      torch::NoGradGuard no_grad;
      out = model->forward(x.to(torch::kBFloat16));
    }
    // The weights computed with are bf16 (the parameter dtype), rank 0's values rounded.
    TinyNet rounded;
    {
      torch::NoGradGuard no_grad;
      for (auto& item : rounded.named_parameters()) {
        item.value().copy_(before.at(item.key()).to(torch::kBFloat16).to(torch::kFloat));
      }
    }
    EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
    EXPECT_LE(testing::ToleranceRatio(out.to(torch::kFloat), rounded.forward(x), 0.05, 0.05), 1.0);
    ASSERT_TRUE((*engine)->Step().ok());
    EXPECT_EQ((*engine)->global_steps(), 1);
    const MemoryReport memory = (*engine)->Memory();
    EXPECT_EQ(memory.model_state_bytes(), 0);
    EXPECT_GT(memory.frozen_bytes, 0);

    testing::TempDir dir;
    ASSERT_TRUE((*engine)->ExportSafetensors(dir / "model.safetensors").ok());
    auto exported = ReadSafetensors(dir / "model.safetensors");
    ASSERT_TRUE(exported.ok()) << exported.status();
    std::vector<std::string> names, expected_names;
    for (const auto& [name, tensor] : *exported) {
      names.push_back(name);
      EXPECT_TRUE(torch::equal(tensor, before.at(name).to(torch::kBFloat16).to(torch::kFloat)))
          << name;
    }
    for (const auto& item : model->named_parameters()) expected_names.push_back(item.key());
    EXPECT_EQ(names, expected_names);  // every parameter, in the model's order

    // Checkpoints: the shard holds no units, frozen.safetensors everything.
    ASSERT_TRUE((*engine)->SaveCheckpoint(dir / "ckpt").ok());
    torch::manual_seed(6);
    auto other = std::make_shared<TinyNet>();
    for (auto& p : other->parameters()) p.set_requires_grad(false);
    auto loader = Engine::Create(other, CreateSingleRankCommunicator(), MakeConfig(stage, true));
    ASSERT_TRUE(loader.ok()) << loader.status();
    auto loaded = (*loader)->LoadCheckpoint(dir / "ckpt");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ((*loader)->global_steps(), 1);
    auto frozen = (*loader)->GatherFrozenParameters();
    ASSERT_TRUE(frozen.ok()) << frozen.status();
    for (const auto& [name, value] : *frozen) {
      EXPECT_TRUE(torch::equal(value, before.at(name).to(torch::kBFloat16).to(torch::kFloat)))
          << name;
    }
  }
}

TEST(Frozen, ParameterGroupsOnAWhollyFrozenModelAreRefusedClearly) {
  auto model = std::make_shared<TinyNet>();
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  auto config = ParseConfig(R"({"tandem": {"param_groups": [{"params": ["*"], "lr": 1e-3}]}})");
  ASSERT_TRUE(config.ok());
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), *config);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(
      std::string(engine.status().message()),
      "tandem.param_groups[0].params: the model has no trainable parameters (all are frozen)");
}

TEST(Frozen, CheckpointRestoresFrozenParametersAndRefusesAnotherFreeze) {
  for (const int stage : {1, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    testing::TempDir dir;
    torch::manual_seed(6);
    auto model = std::make_shared<TinyNet>();
    Freeze(*model);
    const auto saved = Snapshot(*model);
    {
      auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(stage));
      ASSERT_TRUE(engine.ok()) << engine.status();
      ASSERT_TRUE((*engine)->SaveCheckpoint(dir.path()).ok());
    }
    ASSERT_TRUE(std::filesystem::exists(dir / "frozen.safetensors"));

    torch::manual_seed(7);  // other initial values
    auto other = std::make_shared<TinyNet>();
    Freeze(*other);
    auto engine = Engine::Create(other, CreateSingleRankCommunicator(), MakeConfig(stage));
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto loaded = (*engine)->LoadCheckpoint(dir.path());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto frozen = (*engine)->GatherFrozenParameters();
    ASSERT_TRUE(frozen.ok()) << frozen.status();
    for (const auto& [name, value] : *frozen) {
      EXPECT_TRUE(torch::equal(value, saved.at(name))) << name;
    }

    // A model with block0.fc1 trainable instead: the trainable manifest differs, and it is named.
    torch::manual_seed(8);
    auto unfrozen = std::make_shared<TinyNet>();
    for (auto& item : unfrozen->named_parameters()) {
      if (item.key().rfind("input.", 0) == 0) item.value().set_requires_grad(false);
    }
    auto third = Engine::Create(unfrozen, CreateSingleRankCommunicator(), MakeConfig(stage));
    ASSERT_TRUE(third.ok()) << third.status();
    auto refused = (*third)->LoadCheckpoint(dir.path());
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(std::string(refused.status().message()).find("block0.fc1"), std::string::npos)
        << refused.status();
  }
}

}  // namespace
}  // namespace tandem::engine
