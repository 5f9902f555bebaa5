// Tests of models/vision_encoder.h, and of the two models chained as the trainer chains them.
#include "models/vision_encoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "engine/compat.h"
#include "models/layers.h"
#include "models/llm.h"
#include "models/parameter_list.h"
#include "tests/testing/models.h"

namespace tandem::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

VisionConfig TinyConfig(const std::string& positions = "learned") {
  VisionConfig c;
  c.image_size = 16;
  c.patch_size = 4;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 4;
  c.mlp_hidden = 64;
  c.output_dim = 24;
  c.positions = positions;
  return c;
}

std::vector<std::string> ParameterNames(const torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters()) names.push_back(item.key());
  return names;
}

class VisionEncoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(0);
  }
};

TEST_F(VisionEncoderTest, ForwardReturnsProjectedPatches) {
  for (const std::string positions : {"learned", "sincos"}) {
    VisionEncoder vision(TinyConfig(positions));
    EXPECT_EQ(vision->num_patches(), 16);
    EXPECT_EQ(vision->forward(torch::rand({3, 3, 16, 16})).sizes(),
              (std::vector<int64_t>{3, 16, 24}))
        << positions;
  }
}

TEST_F(VisionEncoderTest, ParameterNamesOfOneLayerModel) {
  auto config = TinyConfig();
  config.layers = 1;
  VisionEncoder learned(config);
  EXPECT_THAT(
      ParameterNames(*learned),
      ElementsAre("positions", "patch_embed.weight", "patch_embed.bias", "blocks.0.norm1.weight",
                  "blocks.0.norm1.bias", "blocks.0.attn.qkv.weight", "blocks.0.attn.qkv.bias",
                  "blocks.0.attn.proj.weight", "blocks.0.attn.proj.bias", "blocks.0.norm2.weight",
                  "blocks.0.norm2.bias", "blocks.0.mlp.fc1.weight", "blocks.0.mlp.fc1.bias",
                  "blocks.0.mlp.fc2.weight", "blocks.0.mlp.fc2.bias", "projector.linear_1.weight",
                  "projector.linear_1.bias", "projector.linear_2.weight",
                  "projector.linear_2.bias"));
  EXPECT_EQ(learned->named_parameters()["positions"].sizes(), (std::vector<int64_t>{1, 16, 32}));
  EXPECT_EQ(learned->named_parameters()["patch_embed.weight"].sizes(),
            (std::vector<int64_t>{32, 3, 4, 4}));

  config.positions = "sincos";
  VisionEncoder sincos(config);
  std::vector<std::string> expected = ParameterNames(*learned);
  expected.erase(expected.begin());
  EXPECT_EQ(ParameterNames(*sincos), expected);
  std::vector<std::string> buffers;
  for (const auto& item : sincos->named_buffers()) buffers.push_back(item.key());
  EXPECT_THAT(buffers, ElementsAre("positions", "pixel_mean", "pixel_std"));
  std::vector<std::string> learned_buffers;
  for (const auto& item : learned->named_buffers()) learned_buffers.push_back(item.key());
  EXPECT_THAT(learned_buffers, ElementsAre("pixel_mean", "pixel_std"));
}

// The formula of models/README.md.
int64_t ExpectedVisionParameters(const VisionConfig& c) {
  const int64_t h = c.hidden, m = c.mlp_hidden, p = c.patch_size;
  const int64_t block = 4 * h * h + 2 * h * m + 9 * h + m;
  return c.channels * p * p * h + h + (c.positions == "learned" ? c.num_patches() * h : 0) +
         c.layers * block + h * c.output_dim + c.output_dim + c.output_dim * c.output_dim +
         c.output_dim;
}

TEST_F(VisionEncoderTest, ParameterCountMatchesFormula) {
  for (const std::string positions : {"learned", "sincos"}) {
    auto config = TinyConfig(positions);
    EXPECT_EQ(CountParameters(*VisionEncoder(config)), ExpectedVisionParameters(config))
        << positions;
    config.layers = 3;
    config.channels = 1;
    EXPECT_EQ(CountParameters(*VisionEncoder(config)), ExpectedVisionParameters(config))
        << positions;
  }
}

// The parameter list the memory estimate counts names every parameter the module has, in its order,
// with its shape and whether it trains.
void ExpectListMatchesModule(const VisionConfig& config) {
  VisionEncoder vision(config);
  const auto built = vision->named_parameters(/*recurse=*/true);
  const std::vector<ParameterInfo> listed = VisionParameterList(config);
  ASSERT_EQ(listed.size(), built.size());
  for (size_t i = 0; i < listed.size(); ++i) {
    SCOPED_TRACE(listed[i].name);
    EXPECT_EQ(listed[i].name, built[i].key());
    EXPECT_EQ(listed[i].shape, built[i].value().sizes().vec());
    EXPECT_EQ(listed[i].frozen, !built[i].value().requires_grad());
    EXPECT_EQ(listed[i].in_block, listed[i].name.rfind("blocks.", 0) == 0);
  }
}

TEST_F(VisionEncoderTest, ParameterListMatchesTheModule) {
  ExpectListMatchesModule(TinyConfig("learned"));
  ExpectListMatchesModule(TinyConfig("sincos"));
  // A CLIP/SigLIP-like tower: class token, no patch bias, pre/final/post norms, pooling head, a
  // feature layer before the last block (which is then frozen), a linear projector.
  VisionConfig tower = TinyConfig("learned");
  tower.layers = 3;
  tower.class_token = true;
  tower.patch_bias = false;
  tower.pre_norm = true;
  tower.final_norm = true;
  tower.post_norm = true;
  tower.pooling_head = true;
  tower.feature_layer = -2;
  tower.projector = "linear";
  ExpectListMatchesModule(tower);
}

TEST_F(VisionEncoderTest, SinCosTableEncodesRowThenColumn) {
  const at::Tensor table = SinCosPositions2d(/*grid=*/4, /*dim=*/8);
  ASSERT_EQ(table.sizes(), (std::vector<int64_t>{16, 8}));
  // Patch (row 1, column 2) is index 6; dim/4 = 2 frequencies: 1 and 10000^(-1/2) = 0.01.
  const std::vector<double> expected = {std::sin(1.0),  std::sin(0.01), std::cos(1.0),
                                        std::cos(0.01), std::sin(2.0),  std::sin(0.02),
                                        std::cos(2.0),  std::cos(0.02)};
  for (int64_t i = 0; i < 8; ++i) EXPECT_NEAR(table[6][i].item<double>(), expected[i], 1e-6) << i;

  VisionEncoder vision(TinyConfig("sincos"));
  const at::Tensor buffer = vision->named_buffers()["positions"];
  EXPECT_FALSE(buffer.requires_grad());
  EXPECT_TRUE(torch::equal(buffer, SinCosPositions2d(4, 32).unsqueeze(0)));
}

TEST_F(VisionEncoderTest, RejectsWrongImagesAndConfigs) {
  VisionEncoder vision(TinyConfig());
  EXPECT_THAT(
      [&] {
        vision->forward(torch::rand({2, 3, 32, 32}));
      },
      ThrowsMessage<c10::Error>(
          HasSubstr("expected images [batch, 3, 16, 16], got [2, 3, 32, 32]")));
  EXPECT_THAT(
      [&] {
        vision->forward(torch::rand({3, 16, 16}));
      },
      ThrowsMessage<c10::Error>(HasSubstr("expected images [batch, 3, 16, 16]")));
  auto config = TinyConfig();
  config.patch_size = 5;
  EXPECT_THAT([&] { VisionEncoder v(config); },
              ThrowsMessage<c10::Error>(
                  HasSubstr("image_size 16 must be a positive multiple of patch_size 5")));
  config = TinyConfig("rope");
  EXPECT_THAT([&] { VisionEncoder v(config); },
              ThrowsMessage<c10::Error>(HasSubstr("got \"rope\"")));
}

TEST_F(VisionEncoderTest, InitialisationIsDeterministicAndScaled) {
  auto config = TinyConfig();
  config.layers = 4;
  torch::manual_seed(11);
  VisionEncoder a(config);
  torch::manual_seed(11);
  VisionEncoder b(config);
  const auto pb = b->named_parameters();
  for (const auto& item : a->named_parameters()) {
    const std::string& name = item.key();
    const at::Tensor& value = item.value();
    EXPECT_TRUE(torch::equal(value, pb[name])) << name;
    if (name.rfind("projector.", 0) == 0) {
      // PyTorch's default Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
      const int64_t fan_in =
          name.rfind("projector.linear_1", 0) == 0 ? config.hidden : config.output_dim;
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      EXPECT_LE(value.abs().max().item<double>(), bound) << name;
      EXPECT_GT(value.abs().max().item<double>(), 0.5 * bound) << name;
    } else if (name.find("norm") != std::string::npos) {
      const double fill = name.find("weight") != std::string::npos ? 1.0 : 0.0;
      EXPECT_TRUE(torch::equal(value, torch::full_like(value, fill))) << name;
    } else if (name.find("bias") != std::string::npos) {
      EXPECT_TRUE(torch::equal(value, torch::zeros_like(value))) << name;
    } else {
      const bool residual =
          name.find(".proj.") != std::string::npos || name.find(".fc2.") != std::string::npos;
      const double expected = residual ? 0.02 / std::sqrt(2.0 * 4) : 0.02;
      EXPECT_NEAR(value.std().item<double>(), expected, 0.15 * expected) << name;
    }
  }
}

TEST_F(VisionEncoderTest, RecomputeGivesTheSameGradients) {
  torch::manual_seed(5);
  VisionEncoder plain(TinyConfig());
  torch::manual_seed(5);
  VisionEncoder recomputed(TinyConfig());
  recomputed->set_recompute(true);
  const at::Tensor images = torch::rand({2, 3, 16, 16});
  const at::Tensor weights = torch::randn({2, 16, 24});
  (plain->forward(images) * weights).sum().backward();
  (recomputed->forward(images) * weights).sum().backward();
  const auto expected = plain->named_parameters();
  for (const auto& item : recomputed->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_LE(testing::ToleranceRatio(item.value().grad(), expected[item.key()].grad(), 1e-7, 1e-5),
              1.0)
        << item.key();
  }
}

TEST_F(VisionEncoderTest, AutocastBf16IsCloseToFp32AndTrains) {
  VisionEncoder vision(TinyConfig());
  const at::Tensor images = torch::rand({2, 3, 16, 16});
  const at::Tensor reference = vision->forward(images).detach();
  at::Tensor out;
  {
    compat::AutocastScope autocast(c10::DeviceType::CPU, {true, torch::kBFloat16});
    out = vision->forward(images);
  }
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  EXPECT_LE(testing::ToleranceRatio(out.detach(), reference, 0.02, 0.05), 1.0);
  out.backward(torch::ones_like(out));
  for (const auto& item : vision->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_TRUE(item.value().grad().isfinite().all().item<bool>()) << item.key();
  }
}

// An engine with bf16 parameters and no autocast: fp32 images in, bf16 embeddings out, bf16
// gradients.
TEST_F(VisionEncoderTest, RunsWithBf16ParametersWithoutAutocast) {
  for (const std::string positions : {"learned", "sincos"}) {
    VisionEncoder vision(TinyConfig(positions));
    const at::Tensor images = torch::rand({2, 3, 16, 16});
    const at::Tensor reference = vision->forward(images).detach();
    for (const auto& p : vision->parameters()) p.set_data(p.data().to(torch::kBFloat16));
    const at::Tensor out = vision->forward(images);
    EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
    EXPECT_LE(testing::ToleranceRatio(out.detach(), reference, 0.03, 0.05), 1.0) << positions;
    out.sum().backward();
    for (const auto& item : vision->named_parameters()) {
      ASSERT_TRUE(item.value().grad().defined()) << item.key();
      EXPECT_EQ(item.value().grad().scalar_type(), torch::kBFloat16) << item.key();
    }
  }
}

// The trainer's chain: image embeddings are the LLM's prefix and every text position attends to
// them.
TEST_F(VisionEncoderTest, ImageInfluencesEveryTextPosition) {
  VisionEncoder vision(TinyConfig());
  LlmConfig llm_config;
  llm_config.hidden = 24;
  llm_config.heads = 4;
  llm_config.kv_heads = 2;
  llm_config.mlp_hidden = 40;
  llm_config.vocab_size = 20;
  llm_config.max_seq_len = 32;
  Llm llm(llm_config);
  const at::Tensor images = torch::rand({2, 3, 16, 16});
  at::Tensor changed = images.clone();
  changed.narrow(2, 12, 4).narrow(3, 12, 4).add_(0.5);  // only the last (bottom-right) patch
  const at::Tensor tokens = torch::randint(20, {2, 8}, torch::kLong);
  torch::NoGradGuard no_grad;
  const at::Tensor a = llm->forward(vision->forward(images), tokens);
  const at::Tensor b = llm->forward(vision->forward(changed), tokens);
  const at::Tensor difference = (a - b).abs().amax(-1);  // [2, 8]
  EXPECT_GT(difference.min().item<float>(), 1e-6) << difference;
}

// Forward + backward of both models at the shapes of the tiny preset (one colocated micro-batch of
// 32), timed on one thread. Prints the time; asserts only that the step runs and produces
// gradients.
TEST_F(VisionEncoderTest, TinyPresetTrainingStepTiming) {
  VisionConfig vision_config;  // the sizes of the tiny preset
  vision_config.image_size = 32;
  vision_config.patch_size = 8;
  vision_config.hidden = 64;
  vision_config.layers = 2;
  vision_config.heads = 4;
  vision_config.mlp_hidden = 256;
  vision_config.output_dim = 64;
  LlmConfig llm_config;
  llm_config.hidden = 64;
  llm_config.layers = 2;
  llm_config.heads = 4;
  llm_config.kv_heads = 4;
  llm_config.mlp_hidden = 172;
  llm_config.vocab_size = 40;
  VisionEncoder vision(vision_config);
  Llm llm(llm_config);
  const at::Tensor images = torch::rand({32, 3, 32, 32});
  const at::Tensor tokens = torch::randint(3, 40, {32, 12}, torch::kLong);

  using Clock = std::chrono::steady_clock;
  auto elapsed_ms = [](Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };
  std::vector<double> times;
  for (int run = 0; run < 6; ++run) {
    const auto start = Clock::now();
    const at::Tensor embeddings = vision->forward(images);
    const at::Tensor received = embeddings.detach().requires_grad_(true);
    const TokenLoss loss = CaptionLoss(llm->forward(received, tokens), tokens, /*pad_id=*/0);
    (loss.sum / static_cast<double>(loss.count)).backward();
    embeddings.backward(received.grad());
    times.push_back(elapsed_ms(start));
  }
  std::sort(times.begin() + 1, times.end());  // the first run warms up
  // Baseline of the same run: this machine's single-matmul throughput.
  const at::Tensor a = torch::randn({256, 256}), b = torch::randn({256, 256});
  const auto start = Clock::now();
  for (int i = 0; i < 10; ++i) (void)torch::mm(a, b);
  const double gflops = 10 * 2.0 * 256 * 256 * 256 / (elapsed_ms(start) * 1e6);
  std::cout << "tiny preset forward+backward (vision 32/8/64x2, llm 64x2, batch 32, 16 patches + "
               "12 tokens), "
            << at::get_num_threads() << " thread: median " << times[3]
            << " ms; baseline 256^3 matmul " << gflops << " GFLOP/s\n";
  RecordProperty("median_ms", std::to_string(times[3]));
  EXPECT_TRUE(vision->named_parameters()["patch_embed.weight"].grad().defined());
  EXPECT_TRUE(llm->named_parameters()["embed.weight"].grad().defined());
}

}  // namespace
}  // namespace tandem::models
