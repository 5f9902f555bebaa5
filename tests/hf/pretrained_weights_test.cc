#include "hf/pretrained_weights.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "engine/fake_communicator.h"
#include "engine/safetensors.h"
#include "parallel/layout.h"

namespace tandem::hf {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = TANDEM_HF_FIXTURES;

// A copy of the fixture "llama" whose single weights file the test rewrites.
class PretrainedWeightsErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("hf_weights_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(fs::path(kFixtures) / "llama" / "config.json", dir_ / "config.json");
    auto tensors =
        engine::ReadSafetensors((fs::path(kFixtures) / "llama" / "model.safetensors").string());
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    tensors_ = *tensors;
  }
  void TearDown() override { fs::remove_all(dir_); }

  absl::Status LoadEdited() {
    EXPECT_TRUE(engine::WriteSafetensors((dir_ / "model.safetensors").string(), tensors_).ok());
    auto config = ReadPretrainedConfig(dir_.string());
    EXPECT_TRUE(config.ok()) << config.status();
    auto files = CheckpointFiles::Open(dir_.string());
    if (!files.ok()) return files.status();
    models::Llm llm(*config->llm);
    return LoadLlmWeights(*config, *files, *llm);
  }
  void Erase(const std::string& name) {
    std::erase_if(tensors_, [&](const auto& item) { return item.first == name; });
  }

  fs::path dir_;
  std::vector<std::pair<std::string, at::Tensor>> tensors_;
};

TEST_F(PretrainedWeightsErrors, TheUneditedCopyLoads) { EXPECT_TRUE(LoadEdited().ok()); }

TEST_F(PretrainedWeightsErrors, AMissingTensorIsNamed) {
  Erase("model.layers.1.self_attn.k_proj.weight");
  const absl::Status status = LoadEdited();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      status.message().find("missing tensor 'model.layers.1.self_attn.k_proj.weight' [16, 32]"),
      std::string::npos)
      << status;
}

TEST_F(PretrainedWeightsErrors, AnExtraTensorIsNamed) {
  tensors_.emplace_back("model.layers.2.mlp.up_proj.weight", torch::zeros({80, 32}));
  const absl::Status status = LoadEdited();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("unexpected tensor 'model.layers.2.mlp.up_proj.weight'"),
            std::string::npos)
      << status;
  tensors_.back().first = "vision_tower.embeddings.class_embedding";
  EXPECT_NE(LoadEdited().message().find(
                "tensor 'vision_tower.embeddings.class_embedding' belongs to no part"),
            std::string::npos);
}

TEST_F(PretrainedWeightsErrors, AWrongShapeOrDtypeIsNamed) {
  for (auto& [name, tensor] : tensors_) {
    if (name == "model.norm.weight") tensor = torch::ones({31});
  }
  absl::Status status = LoadEdited();
  EXPECT_NE(
      status.message().find("tensor 'model.norm.weight' has shape [31], config.json makes it [32]"),
      std::string::npos)
      << status;
  for (auto& [name, tensor] : tensors_) {
    if (name == "model.norm.weight") tensor = torch::ones({32}, torch::kBFloat16);
  }
  status = LoadEdited();
  EXPECT_NE(
      status.message().find("tensor 'model.norm.weight' is bfloat16, config.json says float32"),
      std::string::npos)
      << status;
}

TEST(PretrainedWeights, ATowerAloneKeepsItsNewProjector) {
  auto config = ReadPretrainedConfig(kFixtures + "/clip_vision");
  ASSERT_TRUE(config.ok()) << config.status();
  auto files = CheckpointFiles::Open(config->directory);
  ASSERT_TRUE(files.ok()) << files.status();
  models::VisionConfig vision_config = *config->vision;
  vision_config.output_dim = 48;
  torch::manual_seed(3);
  models::VisionEncoder vision(vision_config);
  const at::Tensor projector = vision->named_parameters()["projector.linear_1.weight"].clone();
  ASSERT_TRUE(LoadVisionWeights(*config, *files, *vision).ok());
  EXPECT_TRUE(torch::equal(vision->named_parameters()["projector.linear_1.weight"], projector));
  auto class_embedding = files->Read("embeddings.class_embedding");
  ASSERT_TRUE(class_embedding.ok());
  EXPECT_TRUE(torch::equal(vision->named_parameters()["class_token"].flatten(), *class_embedding));
  // LLaVA's -2 never runs the last block, nor the post-layernorm: they stay as loaded.
  EXPECT_FALSE(vision->named_parameters()["blocks.2.mlp.fc1.weight"].requires_grad());
  EXPECT_FALSE(vision->named_parameters()["post_norm.weight"].requires_grad());
  EXPECT_TRUE(vision->named_parameters()["blocks.1.mlp.fc1.weight"].requires_grad());
}

// A tensor-parallel rank loads its shard of each split tensor (NOTE [Tensor-parallel LLM]).
TEST(PretrainedWeights, ATensorParallelRankLoadsItsShards) {
  auto config = ReadPretrainedConfig(kFixtures + "/llama");
  ASSERT_TRUE(config.ok()) << config.status();
  auto files = CheckpointFiles::Open(config->directory);
  ASSERT_TRUE(files.ok()) << files.status();
  models::Llm whole(*config->llm);
  ASSERT_TRUE(LoadLlmWeights(*config, *files, *whole).ok());
  engine::FakeGroup group(2, parallel::ParallelGroupName(Role::kLlm, 0));
  models::Llm rank1(*config->llm, parallel::ParallelGroup{group.rank(1), std::chrono::seconds(1)});
  const absl::Status status = LoadLlmWeights(*config, *files, *rank1);
  ASSERT_TRUE(status.ok()) << status;
  const auto expected = whole->named_parameters();
  for (const auto& item : rank1->named_parameters()) {
    const auto shard = rank1->shards().find(item.key());
    const at::Tensor value = shard == rank1->shards().end()
                                 ? expected[item.key()]
                                 : parallel::TakeShard(expected[item.key()], shard->second);
    EXPECT_TRUE(torch::equal(item.value(), value)) << item.key();
  }
  EXPECT_EQ(rank1->named_parameters()["head.weight"].size(0), 205);
}

TEST(PretrainedWeights, ANonLlavaDirectoryHasOnlyItsOwnPart) {
  auto config = ReadPretrainedConfig(kFixtures + "/llama");
  ASSERT_TRUE(config.ok());
  auto files = CheckpointFiles::Open(config->directory);
  ASSERT_TRUE(files.ok());
  models::VisionConfig vision_config;
  models::VisionEncoder vision(vision_config);
  const absl::Status status = LoadVisionWeights(*config, *files, *vision);
  EXPECT_NE(status.message().find("a llama checkpoint has no vision tower"), std::string::npos)
      << status;
}

}  // namespace
}  // namespace tandem::hf
