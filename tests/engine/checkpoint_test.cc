// Checkpoint then resume equals an uninterrupted run, bit for bit on CPU; a checkpoint loads into a
// group of another world size and ZeRO stage with every rank's state re-partitioned exactly;
// interrupted or mismatched checkpoints are refused with a clear error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "engine/engine.h"
#include "engine/safetensors.h"
#include "engine_config/config.h"
#include "nlohmann/json.hpp"
#include "tests/testing/group.h"
#include "tests/testing/models.h"

namespace tandem::engine {
namespace {

using testing::TinyNet;

constexpr char kFp32[] = R"("bf16": {"enabled": false})";
// bf16 parameters that are the master, bf16 moments.
constexpr char kBf16Stochastic[] =
    R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
                "bf16_optimizer_states": true}, "tandem": {"bf16_update": "stochastic"},
       "torch_autocast": {"enabled": true, "dtype": "bfloat16"})";
constexpr char kBf16Kahan[] =
    R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
                "bf16_optimizer_states": true}, "tandem": {"bf16_update": "kahan"},
       "torch_autocast": {"enabled": true, "dtype": "bfloat16"})";
// bf16 parameters with an fp32 master and fp32 moments.
constexpr char kBf16Fp32Master[] =
    R"("bf16": {"enabled": true}, "torch_autocast": {"enabled": true, "dtype": "bfloat16"})";

Config MakeConfig(int stage, const std::string& precision, int accumulation = 2) {
  auto config = ParseConfig(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3, "warmup_max_lr": 0.01}},
          "gradient_clipping": 1.0, "seed": 11, "gradient_accumulation_steps": )" +
      std::to_string(accumulation) + R"(, "zero_optimization": {"stage": )" +
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

// Runs micro-steps [begin, end) of a group of `world` ranks on the same global batches whatever the
// world size: each step's 12 samples depend only on (step, sample), and rank r takes its 12/world
// of them. Returns this rank's loss of each step (the mean over its samples).
std::vector<float> TrainGlobal(Engine& engine, TinyNet& model, int rank, int world, int begin,
                               int end) {
  constexpr int kGlobalBatch = 12;
  std::vector<float> losses;
  for (int s = begin; s < end; ++s) {
    std::vector<at::Tensor> xs, ys;
    for (int i = rank * kGlobalBatch / world; i < (rank + 1) * kGlobalBatch / world; ++i) {
      auto g = at::detail::createCPUGenerator(1000 * s + i);
      xs.push_back(at::randn({1, 5}, g));
      ys.push_back(at::randn({1, 3}, g));
    }
    at::Tensor loss;
    {
      auto autocast = engine.Autocast();
      loss = torch::mse_loss(model.forward(at::cat(xs)).to(torch::kFloat), at::cat(ys));
    }
    loss.backward();
    EXPECT_TRUE(engine.Step().ok());
    losses.push_back(loss.item<float>());
  }
  return losses;
}

// A shard's tensors by name and its metadata.
struct Shard {
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

Shard ReadShard(const std::string& path) {
  Shard shard;
  auto tensors = ReadSafetensors(path);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  if (tensors.ok()) shard.tensors.insert(tensors->begin(), tensors->end());
  auto bytes = ReadFile(path);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  if (!bytes.ok()) return shard;
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes->data(), sizeof(header_size));
  auto header = nlohmann::json::parse(bytes->substr(sizeof(header_size), header_size));
  for (const auto& [key, value] : header["__metadata__"].items()) {
    shard.metadata[key] = value.get<std::string>();
  }
  return shard;
}

// A rank of a group started from other weights and generator state (all must be restored) that
// loads `checkpoint`, saved after 2 steps at data position 4, and trains micro steps 4 to 10: its
// losses, and its parameters after them in `final_params` when given.
std::vector<float> ResumeAndTrain(const std::string& checkpoint, int stage, bool bf16, int rank,
                                  std::shared_ptr<Communicator> comm,
                                  std::vector<at::Tensor>* final_params = nullptr) {
  torch::manual_seed(999);
  auto model = std::make_shared<TinyNet>();
  auto engine = Engine::Create(model, comm, MakeConfig(stage, bf16 ? kBf16Stochastic : kFp32));
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  auto client_state = (*engine)->LoadCheckpoint(checkpoint);
  EXPECT_TRUE(client_state.ok()) << client_state.status();
  if (!client_state.ok()) return {};
  EXPECT_EQ(client_state->at("data_position"), "4");
  EXPECT_EQ((*engine)->global_steps(), 2);
  std::vector<float> losses = Train(**engine, *model, rank, 4, 10);
  if (final_params != nullptr) {
    auto params = (*engine)->GatherParameters();
    EXPECT_TRUE(params.ok());
    if (params.ok()) {
      for (auto& [name, t] : *params) final_params->push_back(t);
    }
  }
  return losses;
}

// A rank of a group whose model starts as `initial`: its engine after micro steps 0 to 4 (2
// steps), and in `snapshot` the state it took there at data position 4; null after a failure.
std::unique_ptr<Engine> TrainAndSnapshot(TinyNet& initial, std::shared_ptr<TinyNet> model,
                                         std::shared_ptr<Communicator> comm, int stage, bool bf16,
                                         int rank, CheckpointSnapshot* snapshot) {
  testing::CopyParameters(initial, *model);
  auto engine = Engine::Create(model, comm, MakeConfig(stage, bf16 ? kBf16Stochastic : kFp32));
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return nullptr;
  Train(**engine, *model, rank, 0, 4);
  absl::StatusOr<CheckpointSnapshot> taken =
      (*engine)->SnapshotCheckpoint({{"data_position", "4"}});
  EXPECT_TRUE(taken.ok()) << taken.status();
  if (!taken.ok()) return nullptr;
  *snapshot = *std::move(taken);
  return *std::move(engine);
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
    auto engine =
        Engine::Create(model, comms[0], MakeConfig(stage, bf16 ? kBf16Stochastic : kFp32));
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
    resumed[rank] =
        ResumeAndTrain(dir / "step2", stage, bf16, rank, comms[0], &final_resumed[rank]);
  });

  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(resumed[r], uninterrupted[r]) << "rank " << r;
    ASSERT_EQ(final_resumed[r].size(), final_uninterrupted[r].size());
    for (size_t i = 0; i < final_resumed[r].size(); ++i) {
      EXPECT_TRUE(torch::equal(final_resumed[r][i], final_uninterrupted[r][i])) << "param " << i;
    }
  }
}

// An asynchronous save's parts: the snapshot is the state it was taken at, though it is written
// after six more micro steps changed every buffer, and a group resumed from it trains as the
// uninterrupted one did.
TEST_P(CheckpointTest, ASnapshotWrittenAfterTrainingWentOnHoldsTheStateItWasTakenAt) {
  const auto [stage, bf16] = GetParam();
  constexpr int kWorld = 2;
  testing::TempDir dir;
  torch::manual_seed(21);
  auto initial = std::make_shared<TinyNet>();
  std::vector<float> uninterrupted[kWorld], resumed[kWorld];
  testing::RunGroup(kWorld, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto model = std::make_shared<TinyNet>();
    CheckpointSnapshot snapshot;
    std::unique_ptr<Engine> engine =
        TrainAndSnapshot(*initial, model, comms[0], stage, bf16, rank, &snapshot);
    ASSERT_NE(engine, nullptr);
    EXPECT_EQ(snapshot.marker.empty(), rank != 0);
    EXPECT_GT(snapshot.bytes(), 0);
    uninterrupted[rank] = Train(*engine, *model, rank, 4, 10);
    ASSERT_TRUE(WriteCheckpointSnapshot(snapshot, dir / "step2").ok());
    EXPECT_FALSE(std::filesystem::exists(dir / "step2/complete"));  // until every rank wrote
    ASSERT_TRUE(engine->CompleteCheckpoint(snapshot, dir / "step2").ok());
  });
  ASSERT_TRUE(std::filesystem::exists(dir / "step2/complete"));
  testing::RunGroup(kWorld, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    resumed[rank] = ResumeAndTrain(dir / "step2", stage, bf16, rank, comms[0]);
  });
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(resumed[r], uninterrupted[r]) << "rank " << r;
}

// A snapshot kept in memory: the group rolls back to it in place (each rank its own), or a group
// of new engines restores it from a copy encoded into one buffer, and both train on as the
// uninterrupted group did, bit for bit. The snapshots are only read: both restores use them.
TEST_P(CheckpointTest, ASnapshotRestoredFromMemoryEqualsUninterruptedRunBitForBit) {
  const auto [stage, bf16] = GetParam();
  constexpr int kWorld = 2;
  torch::manual_seed(21);
  auto initial = std::make_shared<TinyNet>();
  std::vector<float> uninterrupted[kWorld], rolled_back[kWorld], restored[kWorld];
  std::vector<at::Tensor> final_uninterrupted[kWorld], final_restored[kWorld];
  CheckpointSnapshot snapshots[kWorld];
  const auto parameters = [](Engine& engine, std::vector<at::Tensor>* out) {
    auto params = engine.GatherParameters();
    ASSERT_TRUE(params.ok());
    for (auto& [name, t] : *params) out->push_back(t.clone());
  };
  testing::RunGroup(kWorld, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto model = std::make_shared<TinyNet>();
    std::unique_ptr<Engine> engine =
        TrainAndSnapshot(*initial, model, comms[0], stage, bf16, rank, &snapshots[rank]);
    ASSERT_NE(engine, nullptr);
    uninterrupted[rank] = Train(*engine, *model, rank, 4, 10);
    parameters(*engine, &final_uninterrupted[rank]);
    // In place: this rank's own snapshot alone.
    std::vector<const CheckpointSnapshot*> own(kWorld, nullptr);
    own[rank] = &snapshots[rank];
    auto client_state = engine->RestoreSnapshots(own);
    ASSERT_TRUE(client_state.ok()) << client_state.status();
    EXPECT_EQ(client_state->at("data_position"), "4");
    EXPECT_EQ(engine->global_steps(), 2);
    rolled_back[rank] = Train(*engine, *model, rank, 4, 10);
  });
  testing::RunGroup(kWorld, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    torch::manual_seed(999);  // other weights: all must be restored
    auto model = std::make_shared<TinyNet>();
    auto engine =
        Engine::Create(model, comms[0], MakeConfig(stage, bf16 ? kBf16Stochastic : kFp32));
    ASSERT_TRUE(engine.ok()) << engine.status();
    // As a buddy would keep it: one buffer, decoded again.
    absl::StatusOr<std::string> bytes = EncodeCheckpointSnapshot(snapshots[rank]);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    absl::StatusOr<CheckpointSnapshot> copy = DecodeCheckpointSnapshot(*bytes, "a copy");
    ASSERT_TRUE(copy.ok()) << copy.status();
    EXPECT_EQ(copy->shard, snapshots[rank].shard);
    EXPECT_EQ(copy->marker, snapshots[rank].marker);
    EXPECT_EQ(copy->metadata, snapshots[rank].metadata);
    std::vector<const CheckpointSnapshot*> own(kWorld, nullptr);
    own[rank] = &*copy;
    ASSERT_TRUE((*engine)->RestoreSnapshots(own).ok());
    restored[rank] = Train(**engine, *model, rank, 4, 10);
    parameters(**engine, &final_restored[rank]);
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(rolled_back[r], uninterrupted[r]) << "rank " << r;
    EXPECT_EQ(restored[r], uninterrupted[r]) << "rank " << r;
    ASSERT_EQ(final_restored[r].size(), final_uninterrupted[r].size());
    for (size_t i = 0; i < final_restored[r].size(); ++i) {
      EXPECT_TRUE(torch::equal(final_restored[r][i], final_uninterrupted[r][i])) << "param " << i;
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

// A save by a group of saved_world ranks at saved_stage, loaded by world ranks at stage.
struct Reshape {
  int saved_world, saved_stage, world, stage;
  const char* precision;
  const char* precision_name;
};

class RepartitionTest : public ::testing::TestWithParam<Reshape> {};

// After the load every rank's parameters equal the saved group's bit for bit. Saving at the new
// shape and loading that back at the old one reproduces the original shards bit for bit, so
// weights, master, moments and compensation were all carried exactly. In fp32, training on from the
// load follows the saved group's own run on the same global batches; the two differ only by the
// order in which other world sizes and units sum the same gradients (a few ulps per step).
TEST_P(RepartitionTest, LoadsIntoAnotherWorldSizeAndStage) {
  const Reshape c = GetParam();
  const bool fp32 = std::string(c.precision) == kFp32;
  // Micro steps, 2 per step; the first two updates use lr 0 (WarmupLR), the third changes weights.
  constexpr int kSaveAt = 6, kEnd = 10;
  testing::TempDir dir;
  torch::manual_seed(21);
  auto initial = std::make_shared<TinyNet>();
  NamedTensors saved, saved_group_final, loaded_group_final;
  std::vector<std::vector<float>> saved_group_losses(c.saved_world), loaded_group_losses(c.world);

  testing::RunGroup(c.saved_world, [&](int rank,
                                       std::vector<std::shared_ptr<Communicator>>& comms) {
    auto model = std::make_shared<TinyNet>();
    testing::CopyParameters(*initial, *model);
    auto engine = Engine::Create(model, comms[0], MakeConfig(c.saved_stage, c.precision));
    ASSERT_TRUE(engine.ok()) << engine.status();
    TrainGlobal(**engine, *model, rank, c.saved_world, 0, kSaveAt);
    auto params = (*engine)->GatherParameters();
    ASSERT_TRUE(params.ok());
    // A copy: at stage 0 in fp32, the gathered tensors are views of the live parameters.
    if (rank == 0) {
      for (const auto& [name, value] : *params) saved.emplace_back(name, value.clone());
    }
    ASSERT_TRUE((*engine)->SaveCheckpoint(dir / "a", {{"data_position", "6"}}).ok());
    if (!fp32) return;
    saved_group_losses[rank] = TrainGlobal(**engine, *model, rank, c.saved_world, kSaveAt, kEnd);
    auto final_params = (*engine)->GatherParameters();
    ASSERT_TRUE(final_params.ok());
    if (rank == 0) saved_group_final = *final_params;
  });

  testing::RunGroup(c.world, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    torch::manual_seed(999);  // different initial weights: all must be restored
    auto model = std::make_shared<TinyNet>();
    auto engine = Engine::Create(model, comms[0], MakeConfig(c.stage, c.precision));
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto client_state = (*engine)->LoadCheckpoint(dir / "a");
    ASSERT_TRUE(client_state.ok()) << client_state.status();
    EXPECT_EQ(client_state->at("data_position"), "6");
    EXPECT_EQ((*engine)->global_steps(), 3);
    EXPECT_EQ((*engine)->micro_steps(), 6);
    auto params = (*engine)->GatherParameters();
    ASSERT_TRUE(params.ok());
    ASSERT_EQ(params->size(), saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      EXPECT_EQ((*params)[i].first, saved[i].first);
      EXPECT_TRUE(torch::equal((*params)[i].second, saved[i].second))
          << "rank " << rank << ", " << saved[i].first;
    }
    ASSERT_TRUE((*engine)->SaveCheckpoint(dir / "b", *client_state).ok());
    if (!fp32) return;
    loaded_group_losses[rank] = TrainGlobal(**engine, *model, rank, c.world, kSaveAt, kEnd);
    auto final_params = (*engine)->GatherParameters();
    ASSERT_TRUE(final_params.ok());
    if (rank == 0) loaded_group_final = *final_params;
  });

  testing::RunGroup(
      c.saved_world, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
        auto model = std::make_shared<TinyNet>();
        auto engine = Engine::Create(model, comms[0], MakeConfig(c.saved_stage, c.precision));
        ASSERT_TRUE(engine.ok()) << engine.status();
        auto client_state = (*engine)->LoadCheckpoint(dir / "b");
        ASSERT_TRUE(client_state.ok()) << client_state.status();
        ASSERT_TRUE((*engine)->SaveCheckpoint(dir / "c", *client_state).ok());
      });
  const std::string precision = c.precision;
  for (int r = 0; r < c.saved_world; ++r) {
    const std::string name =
        "rank_" + std::to_string(r) + "_of_" + std::to_string(c.saved_world) + ".safetensors";
    Shard original = ReadShard(dir / ("a/" + name)), round_trip = ReadShard(dir / ("c/" + name));
    EXPECT_EQ(round_trip.metadata, original.metadata) << name;
    EXPECT_EQ(original.tensors.count("master"), precision == kBf16Fp32Master ? 1u : 0u);
    EXPECT_EQ(original.tensors.count("compensation"), precision == kBf16Kahan ? 1u : 0u);
    if (precision == kBf16Kahan) {  // something to carry
      EXPECT_GT(original.tensors["compensation"].to(torch::kFloat).abs().sum().item<double>(), 0);
    }
    ASSERT_EQ(round_trip.tensors.size(), original.tensors.size()) << name;
    for (const auto& [tensor, value] : original.tensors) {
      if (tensor == "rng_state") continue;  // one generator for all ranks of a test process
      ASSERT_EQ(round_trip.tensors.count(tensor), 1u) << name << " " << tensor;
      EXPECT_TRUE(torch::equal(round_trip.tensors[tensor], value)) << name << " " << tensor;
    }
  }

  if (!fp32) return;
  for (int s = 0; s < kEnd - kSaveAt; ++s) {
    double before = 0.0, after = 0.0;
    for (const auto& losses : saved_group_losses) before += losses[s] / c.saved_world;
    for (const auto& losses : loaded_group_losses) after += losses[s] / c.world;
    EXPECT_NEAR(after, before, 2e-6 * before) << "micro step " << kSaveAt + s;
  }
  ASSERT_EQ(loaded_group_final.size(), saved_group_final.size());
  for (size_t i = 0; i < saved_group_final.size(); ++i) {
    EXPECT_LE(testing::ToleranceRatio(loaded_group_final[i].second, saved_group_final[i].second,
                                      /*atol=*/1e-6, /*rtol=*/1e-5),
              1.0)
        << saved_group_final[i].first;
  }
}

std::string ReshapeName(const ::testing::TestParamInfo<Reshape>& info) {
  const Reshape& c = info.param;
  return "W" + std::to_string(c.saved_world) + "S" + std::to_string(c.saved_stage) + "ToW" +
         std::to_string(c.world) + "S" + std::to_string(c.stage) + c.precision_name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, RepartitionTest,
                         ::testing::Values(Reshape{2, 1, 3, 3, kFp32, "Fp32"},
                                           Reshape{2, 3, 1, 0, kFp32, "Fp32"},
                                           Reshape{1, 0, 2, 2, kFp32, "Fp32"},
                                           Reshape{3, 2, 2, 1, kFp32, "Fp32"},
                                           Reshape{2, 2, 2, 3, kFp32, "Fp32"},
                                           Reshape{2, 3, 3, 0, kBf16Kahan, "Bf16Kahan"},
                                           Reshape{3, 1, 2, 3, kBf16Fp32Master, "Bf16Fp32Master"}),
                         ReshapeName);

// A group that shrank (2 ranks at ZeRO 2 to 1 at ZeRO 1, or 3) restores the 2 ranks' snapshots in
// memory into its own partition: exactly the state a load of the same save's files gives, written
// back out bit for bit. Without one of the snapshots it needs, the error names the missing rank and
// nothing changes.
TEST(CheckpointSnapshots, AShrunkGroupRePartitionsTheSnapshotsInMemory) {
  testing::TempDir dir;
  torch::manual_seed(21);
  auto initial = std::make_shared<TinyNet>();
  CheckpointSnapshot snapshots[2];
  testing::RunGroup(2, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto model = std::make_shared<TinyNet>();
    testing::CopyParameters(*initial, *model);
    auto engine = Engine::Create(model, comms[0], MakeConfig(2, kBf16Kahan));
    ASSERT_TRUE(engine.ok()) << engine.status();
    TrainGlobal(**engine, *model, rank, 2, 0, 6);
    ASSERT_TRUE((*engine)->SaveCheckpoint(dir / "files", {{"data_position", "6"}}).ok());
    absl::StatusOr<CheckpointSnapshot> snapshot =
        (*engine)->SnapshotCheckpoint({{"data_position", "6"}});
    ASSERT_TRUE(snapshot.ok()) << snapshot.status();
    snapshots[rank] = *std::move(snapshot);
  });
  for (const int stage : {1, 3}) {
    SCOPED_TRACE(absl::StrCat("ZeRO ", stage));
    const std::string from_files = absl::StrCat("from_files_", stage),
                      from_memory = absl::StrCat("from_memory_", stage);
    testing::RunGroup(1, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
      torch::manual_seed(999);
      auto model = std::make_shared<TinyNet>();
      auto engine = Engine::Create(model, comms[0], MakeConfig(stage, kBf16Kahan));
      ASSERT_TRUE(engine.ok()) << engine.status();
      absl::StatusOr<std::map<std::string, std::string>> refused =
          (*engine)->RestoreSnapshots({&snapshots[0], nullptr});
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(refused.status().message(),
                "checkpoint: the snapshot in memory of rank 1 of 2 is not here, and this rank "
                "needs it");
      EXPECT_EQ((*engine)->global_steps(), 0);
      auto client_state = (*engine)->RestoreSnapshots({&snapshots[0], &snapshots[1]});
      ASSERT_TRUE(client_state.ok()) << client_state.status();
      EXPECT_EQ(client_state->at("data_position"), "6");
      EXPECT_EQ((*engine)->global_steps(), 3);
      ASSERT_TRUE((*engine)->SaveCheckpoint(dir / from_memory, *client_state).ok());
    });
    testing::RunGroup(1, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
      auto model = std::make_shared<TinyNet>();
      auto engine = Engine::Create(model, comms[0], MakeConfig(stage, kBf16Kahan));
      ASSERT_TRUE(engine.ok()) << engine.status();
      auto client_state = (*engine)->LoadCheckpoint(dir / "files");
      ASSERT_TRUE(client_state.ok()) << client_state.status();
      ASSERT_TRUE((*engine)->SaveCheckpoint(dir / from_files, *client_state).ok());
    });
    const Shard memory = ReadShard(dir / (from_memory + "/rank_0_of_1.safetensors"));
    const Shard files = ReadShard(dir / (from_files + "/rank_0_of_1.safetensors"));
    EXPECT_EQ(memory.metadata, files.metadata);
    ASSERT_EQ(memory.tensors.size(), files.tensors.size());
    for (const auto& [name, value] : files.tensors) {
      if (name == "rng_state") continue;  // one generator for all ranks of a test process
      ASSERT_EQ(memory.tensors.count(name), 1u) << name;
      EXPECT_TRUE(torch::equal(memory.tensors.at(name), value)) << name;
    }
  }
}

// A snapshot's buffer keeps the frozen parameters and the marker apart from the shard's own; a
// byte changed in it is DataLoss naming the tensor, and a buffer of another kind is refused.
TEST(CheckpointSnapshots, AnEncodedSnapshotDecodesWholeAndACorruptedOneIsRefused) {
  CheckpointSnapshot snapshot;
  snapshot.shard = "rank_0_of_2.safetensors";
  snapshot.tensors = {{"weights", at::arange(6, at::kFloat)},
                      {"rng_state", at::ones({4}, at::kByte)}};
  snapshot.metadata = {{"global_steps", "3"}, {"tandem.client.step", "3"}};
  snapshot.frozen = {{"tower.weight", at::full({2, 2}, 0.5)}};
  snapshot.frozen_metadata = {{"format", "pt"}};
  snapshot.marker = "{\"global_steps\": 3}\n";
  absl::StatusOr<std::string> bytes = EncodeCheckpointSnapshot(snapshot);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<CheckpointSnapshot> copy = DecodeCheckpointSnapshot(*bytes, "a copy");
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(copy->shard, snapshot.shard);
  EXPECT_EQ(copy->marker, snapshot.marker);
  EXPECT_EQ(copy->metadata, snapshot.metadata);
  EXPECT_EQ(copy->frozen_metadata, snapshot.frozen_metadata);
  ASSERT_EQ(copy->tensors.size(), 2u);
  EXPECT_EQ(copy->tensors[0].first, "weights");
  EXPECT_TRUE(torch::equal(copy->tensors[0].second, snapshot.tensors[0].second));
  ASSERT_EQ(copy->frozen.size(), 1u);
  EXPECT_EQ(copy->frozen[0].first, "tower.weight");
  EXPECT_TRUE(torch::equal(copy->frozen[0].second, snapshot.frozen[0].second));

  std::string corrupted = *bytes;
  corrupted[corrupted.size() - 20] ^= 0x40;  // inside the last tensors' data
  absl::StatusOr<CheckpointSnapshot> refused = DecodeCheckpointSnapshot(corrupted, "a copy");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("a copy"));

  absl::StatusOr<std::string> plain = EncodeSafetensors("plain", {{"w", at::ones({2})}});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(DecodeCheckpointSnapshot(*plain, "a file").status().message(),
            "checkpoint: a file is not a checkpoint snapshot (no shard name)");
}

TEST(CheckpointMetadata, ShardRecordsItsUnits) {
  testing::TempDir dir;
  for (int stage : {1, 3}) {
    auto model = std::make_shared<TinyNet>();
    auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(stage, kFp32));
    ASSERT_TRUE(engine.ok());
    const std::string path = dir / std::to_string(stage);
    ASSERT_TRUE((*engine)->SaveCheckpoint(path).ok());
    Shard shard = ReadShard(path + "/rank_0_of_1.safetensors");
    // Buckets of 50 elements; at stage 3 each block is a unit of its own.
    EXPECT_EQ(shard.metadata["unit_elements"],
              stage == 1 ? "42,105,15,105,7,105,15,105,31" : "42,232,232,24");
    EXPECT_EQ(shard.metadata["domain_elements"], "530");
    EXPECT_EQ(shard.metadata["gradient_accumulation_steps"], "2");
  }
}

TEST(CheckpointResume, OtherAccumulationKeepsTheStepBoundary) {
  testing::TempDir dir;
  auto model = std::make_shared<TinyNet>();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(),
                               MakeConfig(1, kFp32, /*accumulation=*/2));
  ASSERT_TRUE(engine.ok());
  Train(**engine, *model, 0, 0, 4);
  ASSERT_TRUE((*engine)->SaveCheckpoint(dir / "ckpt").ok());
  auto other_model = std::make_shared<TinyNet>();
  auto other = Engine::Create(other_model, CreateSingleRankCommunicator(),
                              MakeConfig(1, kFp32, /*accumulation=*/4));
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->LoadCheckpoint(dir / "ckpt").ok());
  EXPECT_EQ((*other)->global_steps(), 2);
  EXPECT_EQ((*other)->micro_steps(), 8);
  Train(**other, *other_model, 0, 4, 7);
  EXPECT_EQ((*other)->global_steps(), 2);  // three micro-batches of four
  Train(**other, *other_model, 0, 7, 8);
  EXPECT_EQ((*other)->global_steps(), 3);
}

TEST(CheckpointErrors, DirectoryWithoutCompleteMarkerIsRefused) {
  testing::TempDir dir;
  auto model = std::make_shared<TinyNet>();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(1, kFp32));
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->SaveCheckpoint(dir / "ckpt").ok());
  std::filesystem::remove(dir / "ckpt/complete");
  auto loaded = (*engine)->LoadCheckpoint(dir / "ckpt");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find("incomplete"), std::string::npos) << loaded.status();
}

TEST(CheckpointErrors, OtherPrecisionIsRefusedAndNothingChanges) {
  testing::TempDir dir;
  auto model = std::make_shared<TinyNet>();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(1, kFp32));
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->SaveCheckpoint(dir / "ckpt").ok());
  auto other_model = std::make_shared<TinyNet>();
  auto other =
      Engine::Create(other_model, CreateSingleRankCommunicator(), MakeConfig(2, kBf16Fp32Master));
  ASSERT_TRUE(other.ok());
  auto before = (*other)->GatherParameters();
  auto loaded = (*other)->LoadCheckpoint(dir / "ckpt");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(
      loaded.status().message().find("rank_0_of_1.safetensors: precision is fp32, this engine has "
                                     "bf16+fp32_master+fp32_states"),
      std::string::npos)
      << loaded.status();
  auto after = (*other)->GatherParameters();
  for (size_t i = 0; i < before->size(); ++i) {
    EXPECT_TRUE(torch::equal((*before)[i].second, (*after)[i].second));
  }
}

TEST(CheckpointErrors, OtherModelIsRefused) {
  testing::TempDir dir;
  auto model = std::make_shared<TinyNet>();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(1, kFp32));
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->SaveCheckpoint(dir / "ckpt").ok());
  auto wider = std::make_shared<TinyNet>(/*in=*/5, /*width=*/8);
  auto other = Engine::Create(wider, CreateSingleRankCommunicator(), MakeConfig(3, kFp32));
  ASSERT_TRUE(other.ok());
  ASSERT_EQ((*engine)->layout().num_elements(), 530);
  ASSERT_EQ((*other)->layout().num_elements(), 669);
  auto loaded = (*other)->LoadCheckpoint(dir / "ckpt");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  // The first parameter that differs is named, before the counts are compared.
  EXPECT_NE(loaded.status().message().find(
                "rank_0_of_1.safetensors: parameter 0 is input.weight [7, 5] Float, this engine "
                "has input.weight [8, 5] Float"),
            std::string::npos)
      << loaded.status();
}

// One matrix parameter: models of the same size whose parameter differs in name or shape.
struct OneMatrix : torch::nn::Module {
  OneMatrix(const std::string& name, int64_t rows, int64_t cols) {
    register_parameter(name, torch::randn({rows, cols}));
  }
};

// A model of the same parameter count but another shape or name is refused naming the parameter,
// not loaded scrambled.
TEST(CheckpointErrors, SameSizeButOtherShapeOrNameIsRefusedNamingTheParameter) {
  testing::TempDir dir;
  auto saved = Engine::Create(std::make_shared<OneMatrix>("w", 4, 6),
                              CreateSingleRankCommunicator(), MakeConfig(1, kFp32));
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_TRUE((*saved)->SaveCheckpoint(dir / "ckpt").ok());
  for (auto [name, rows, cols, want] : std::vector<std::tuple<std::string, int, int, std::string>>{
           {"w", 6, 4, "parameter 0 is w [4, 6] Float, this engine has w [6, 4] Float"},
           {"v", 4, 6, "parameter 0 is w [4, 6] Float, this engine has v [4, 6] Float"}}) {
    auto other = Engine::Create(std::make_shared<OneMatrix>(name, rows, cols),
                                CreateSingleRankCommunicator(), MakeConfig(1, kFp32));
    ASSERT_TRUE(other.ok()) << other.status();
    ASSERT_EQ((*other)->layout().num_elements(), 24);
    auto loaded = (*other)->LoadCheckpoint(dir / "ckpt");
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(loaded.status().message().find(want), std::string::npos) << loaded.status();
  }
}

// Two fp32 ranks at `stage` from the same initial weights; `body` runs on each with its engine.
void RunTwoRanks(int stage, const std::function<void(Engine&, TinyNet&, int rank)>& body) {
  torch::manual_seed(21);
  auto initial = std::make_shared<TinyNet>();
  testing::RunGroup(2, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    auto model = std::make_shared<TinyNet>();
    testing::CopyParameters(*initial, *model);
    auto engine = Engine::Create(model, comms[0], MakeConfig(stage, kFp32));
    ASSERT_TRUE(engine.ok()) << engine.status();
    body(**engine, *model, rank);
  });
}

TEST(CheckpointErrors, MissingShardOfTheSavedGroupIsNamed) {
  testing::TempDir dir;
  RunTwoRanks(2, [&](Engine& engine, TinyNet&, int) {
    ASSERT_TRUE(engine.SaveCheckpoint(dir / "ckpt").ok());
  });
  std::filesystem::remove(dir / "ckpt/rank_1_of_2.safetensors");
  auto model = std::make_shared<TinyNet>();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(2, kFp32));
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->LoadCheckpoint(dir / "ckpt");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find(dir / "ckpt/rank_1_of_2.safetensors is missing"),
            std::string::npos)
      << loaded.status();
}

TEST(CheckpointErrors, ShardDisagreeingWithRankZeroIsRefused) {
  testing::TempDir dir;
  RunTwoRanks(1, [&](Engine& engine, TinyNet& model, int rank) {
    ASSERT_TRUE(engine.SaveCheckpoint(dir / "early").ok());
    Train(engine, model, rank, 0, 4);
    ASSERT_TRUE(engine.SaveCheckpoint(dir / "late").ok());
  });
  // rank 1's shard of another save: same layout, other step counts.
  std::filesystem::copy_file(dir / "early/rank_1_of_2.safetensors",
                             dir / "late/rank_1_of_2.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  auto model = std::make_shared<TinyNet>();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(1, kFp32));
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->LoadCheckpoint(dir / "late");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find("rank_1_of_2.safetensors: global_steps is 0, but " +
                                           (dir / "late/rank_0_of_2.safetensors") + " has 2"),
            std::string::npos)
      << loaded.status();
  EXPECT_EQ((*engine)->global_steps(), 0);
}

TEST(CheckpointErrors, TruncatedShardIsInvalidArgumentNamingTheFile) {
  testing::TempDir dir;
  auto model = std::make_shared<TinyNet>();
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(0, kFp32));
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
  auto engine = Engine::Create(model, CreateSingleRankCommunicator(), MakeConfig(0, kFp32));
  ASSERT_TRUE(engine.ok());
  torch::mse_loss(model->forward(torch::randn({2, 5})), torch::randn({2, 3})).backward();
  ASSERT_TRUE((*engine)->Step().ok());  // micro step 1 of 2
  auto status = (*engine)->SaveCheckpoint(dir / "ckpt");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt/complete"));
}

}  // namespace
}  // namespace tandem::engine
