#include "hf/pretrained_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace tandem::hf {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = TANDEM_HF_FIXTURES;

TEST(PretrainedConfig, ReadsAClipLlamaLlavaCheckpoint) {
  auto config = ReadPretrainedConfig(kFixtures + "/clip_llama");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->kind, PretrainedKind::kLlava);
  EXPECT_EQ(config->vision_model_type, "clip_vision_model");
  EXPECT_EQ(config->llm_model_type, "llama");
  EXPECT_EQ(config->dtype, "float32");
  const auto& v = *config->vision;
  EXPECT_EQ(v.hidden, 32);
  EXPECT_EQ(v.layers, 3);
  EXPECT_EQ(v.image_size, 30);
  EXPECT_EQ(v.patch_size, 6);
  EXPECT_TRUE(v.class_token);
  EXPECT_FALSE(v.patch_bias);
  EXPECT_TRUE(v.pre_norm);
  EXPECT_EQ(v.activation, "quick_gelu");
  EXPECT_EQ(v.feature_layer, -2);
  EXPECT_EQ(v.feature_index(), 2);
  EXPECT_TRUE(v.drop_first_feature);
  EXPECT_EQ(v.num_features(), 25);
  EXPECT_EQ(v.projector, "mlp2x");
  EXPECT_EQ(v.output_dim, 32);
  const auto& m = *config->llm;
  EXPECT_EQ(m.heads, 4);
  EXPECT_EQ(m.kv_heads, 2);
  EXPECT_EQ(m.mlp_hidden, 80);
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_FALSE(m.attention_bias);
  EXPECT_EQ(m.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(m.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(m.rope_scaling.factor, 8.0);
  EXPECT_EQ(m.rope_scaling.original_max_positions, 16);
  EXPECT_EQ(m.max_seq_len, 128);
  EXPECT_EQ(m.image_token_id, 408);
  EXPECT_EQ(config->eos_token_ids, std::vector<int64_t>{407});
}

TEST(PretrainedConfig, ReadsASiglipQwen2LlavaCheckpoint) {
  auto config = ReadPretrainedConfig(kFixtures + "/siglip_qwen2");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->dtype, "bfloat16");
  EXPECT_FALSE(config->vision->class_token);
  EXPECT_TRUE(config->vision->pooling_head);
  EXPECT_EQ(config->vision->activation, "gelu_tanh");
  EXPECT_FALSE(config->vision->drop_first_feature);
  EXPECT_EQ(config->vision->num_features(), 16);
  EXPECT_TRUE(config->llm->attention_bias);
  EXPECT_TRUE(config->llm->tie_embeddings);
  EXPECT_DOUBLE_EQ(config->llm->rope_theta, 1e6);
  EXPECT_EQ(config->llm->rope_scaling.type, "default");
}

TEST(PretrainedConfig, ReadsATowerAndAnLlmAlone) {
  auto tower = ReadPretrainedConfig(kFixtures + "/clip_vision");
  ASSERT_TRUE(tower.ok()) << tower.status();
  EXPECT_EQ(tower->kind, PretrainedKind::kVisionTower);
  EXPECT_FALSE(tower->llm.has_value());
  EXPECT_EQ(tower->vision->output_dim, 0);  // the caller names the LLM's width
  auto llm = ReadPretrainedConfig(kFixtures + "/llama");
  ASSERT_TRUE(llm.ok()) << llm.status();
  EXPECT_EQ(llm->kind, PretrainedKind::kLlm);
  EXPECT_FALSE(llm->vision.has_value());
  EXPECT_EQ(llm->llm->image_token_id, -1);
}

class PretrainedConfigErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("hf_config_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  absl::Status Read(const std::string& json) {
    std::ofstream(dir_ / "config.json") << json;
    return ReadPretrainedConfig(dir_.string()).status();
  }
  fs::path dir_;
};

TEST_F(PretrainedConfigErrors, NameTheFileAndTheKey) {
  EXPECT_EQ(ReadPretrainedConfig((dir_ / "absent").string()).status().code(),
            absl::StatusCode::kNotFound);
  absl::Status status = Read(R"({"model_type": "mistral"})");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("config.json: model_type \"mistral\" is not supported"),
            std::string::npos)
      << status;
  status = Read(R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4}})");
  EXPECT_NE(status.message().find("rope_scaling.rope_type \"yarn\" is not supported"),
            std::string::npos)
      << status;
  status = Read(
      R"({"model_type": "llava", "text_config": {"model_type": "llama", "hidden_size": "big"}})");
  EXPECT_NE(status.message().find("text_config.hidden_size must be an integer, got string \"big\""),
            std::string::npos)
      << status;
  status = Read(
      R"({"model_type": "llava", "text_config": {"vocab_size": 32064}, "vision_feature_layer": [-2, -5]})");
  EXPECT_NE(status.message().find("vision_feature_layer as a list of layers is not supported"),
            std::string::npos)
      << status;
  status = Read(R"({"model_type": "qwen2", "use_sliding_window": true})");
  EXPECT_NE(status.message().find("use_sliding_window true is not supported"), std::string::npos)
      << status;
  status = Read(R"({"model_type": "llama", "dtype": "int8"})");
  EXPECT_NE(status.message().find("dtype \"int8\" is not supported"), std::string::npos) << status;
  // Sizes are bounded as a spec's are: a trillion layers is refused while the config is read, not
  // grown until the kernel kills the actor.
  for (
      const auto& [json, message] : std::vector<std::pair<std::string, std::string>>{
          {R"({"model_type": "llama", "intermediate_size": 0})",
           "config.json: intermediate_size must be between 1 and 1048576, got 0"},
          {R"({"model_type": "llama", "num_hidden_layers": 1000000000000})",
           "config.json: num_hidden_layers must be between 1 and 1024, got 1000000000000"},
          {R"({"model_type": "siglip_vision_model", "image_size": 4611686018427387904, "patch_size": 1})",
           "config.json: image_size must be between 1 and 8192, got 4611686018427387904"}}) {
    EXPECT_THAT(std::string(Read(json).message()), ::testing::HasSubstr(message));
  }
  status = Read(R"({"model_type": "llama", "head_dim": 63})");
  EXPECT_NE(status.message().find("head_dim must be even"), std::string::npos) << status;
  status = Read(R"({"model_type": "clip_vision_model", "num_channels": 1})");
  EXPECT_NE(status.message().find("num_channels must be 3"), std::string::npos) << status;
  status = Read(R"({"model_type": "llama", "x": 1, "x": 2})");
  EXPECT_NE(status.message().find("duplicate key"), std::string::npos) << status;
}

// LLaVA-NeXT: transformers' default pinpoints when left out (CLIP-L/336's tiles), and pinpoints or
// a feature choice its grid cannot use refused by the key.
TEST_F(PretrainedConfigErrors, LlavaNextPinpointsAreReadAndChecked) {
  std::ofstream(dir_ / "config.json") << R"({"model_type": "llava_next",
      "vision_config": {"model_type": "clip_vision_model", "image_size": 336, "patch_size": 14},
      "text_config": {"model_type": "llama", "vocab_size": 32064}})";
  auto config = ReadPretrainedConfig(dir_.string());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->kind, PretrainedKind::kLlava);
  EXPECT_EQ(config->vision->grid_pinpoints,
            (std::vector<data::Resolution>{
                {336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}}));
  EXPECT_TRUE(config->llm->image_newline);
  const std::string towers =
      R"("vision_config": {"model_type": "clip_vision_model", "image_size": 336,
      "patch_size": 14}, "text_config": {"model_type": "llama", "vocab_size": 32064})";
  for (const auto& [json, message] : std::vector<std::pair<std::string, std::string>>{
           {R"({"model_type": "llava_next", "image_grid_pinpoints": [[336, 700]], )" + towers + "}",
            "config.json: image_grid_pinpoints[0] 336 x 700 is not a multiple of the tower's "
            "image_size 336"},
           {R"({"model_type": "llava_next", "image_grid_pinpoints": [336, 672], )" + towers + "}",
            "config.json: image_grid_pinpoints[0] must be [height, width] in pixels"},
           {R"({"model_type": "llava_next", "vision_feature_select_strategy": "full", )" + towers +
                "}",
            "config.json: vision_feature_select_strategy keeps 577 features a tile, but "
            "LLaVA-NeXT's grid needs the 24 x 24 patches only"}}) {
    EXPECT_THAT(std::string(Read(json).message()), ::testing::HasSubstr(message));
  }
}

// Tandem's models have no dropout: a config that asks for it is refused by the key, not trained
// without it; 0 (what released LLaVA, Llama, Qwen2, CLIP and SigLIP checkpoints write) is accepted.
TEST_F(PretrainedConfigErrors, DropoutIsRefusedByItsKey) {
  absl::Status status = Read(R"({"model_type": "qwen2", "attention_dropout": 0.1})");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(
                "config.json: attention_dropout 0.1 is not supported: Tandem's models train "
                "without dropout"),
            std::string::npos)
      << status;
  status = Read(
      R"({"model_type": "llava", "text_config": {"model_type": "llama", "attention_dropout": 0.05}})");
  EXPECT_NE(status.message().find("text_config.attention_dropout 0.05 is not supported"),
            std::string::npos)
      << status;
  status = Read(R"({"model_type": "llava", "text_config": {"vocab_size": 32064},
                    "vision_config": {"model_type": "clip_vision_model", "dropout": 0.1}})");
  EXPECT_NE(status.message().find("vision_config.dropout 0.1 is not supported"), std::string::npos)
      << status;
  status = Read(R"({"model_type": "siglip_vision_model", "attention_dropout": 0.2})");
  EXPECT_NE(status.message().find("attention_dropout 0.2 is not supported"), std::string::npos)
      << status;
  EXPECT_TRUE(
      Read(
          R"({"model_type": "llava", "text_config": {"vocab_size": 32064, "attention_dropout": 0.0},
                       "vision_config": {"attention_dropout": 0.0, "dropout": 0.0}})")
          .ok());
}

TEST_F(PretrainedConfigErrors, OlderConfigsTakeTransformersDefaults) {
  // llava-1.5's config.json writes only what differs from the defaults, and rope_theta beside
  // rope_scaling.
  ASSERT_TRUE(Read(R"({"model_type": "llava", "vision_config": {"model_type": "clip_vision_model",
      "hidden_size": 1024, "image_size": 336, "intermediate_size": 4096, "num_attention_heads": 16,
      "num_hidden_layers": 24, "patch_size": 14}, "text_config": {"model_type": "llama", "vocab_size": 32064,
      "rope_theta": 500000.0, "rope_scaling": {"type": "linear", "factor": 2.0}}})")
                  .ok());
  auto config = ReadPretrainedConfig(dir_.string());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->vision->activation, "quick_gelu");
  EXPECT_DOUBLE_EQ(config->vision->norm_eps, 1e-5);
  EXPECT_EQ(config->vision->num_features(), 576);
  EXPECT_EQ(config->llm->hidden, 4096);
  EXPECT_EQ(config->llm->vocab_size, 32064);
  EXPECT_EQ(config->llm->image_token_id, 32000);
  EXPECT_EQ(config->llm->rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(config->llm->rope_scaling.factor, 2.0);
  EXPECT_DOUBLE_EQ(config->llm->rope_theta, 500000.0);
}

}  // namespace
}  // namespace tandem::hf
