// Tandem's LLaVA models against transformers': the fixtures of tests/fixtures/hf/ hold tiny random
// LLaVA checkpoints (CLIP + Llama with llama3 rotary scaling and fp32 weights, SigLIP + Qwen2 with
// tied embeddings and bf16 weights) and the image features, logits and greedy tokens transformers
// computed from them in fp32; and LLaVA-NeXT versions of both (clip_llama_next, siglip_qwen2_next)
// with what transformers' PIL processor made of a wide and a tall image (tiles, image tokens) and
// the logits and greedy tokens its LlavaNextForConditionalGeneration computed from them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/any_res.h"
#include "data/image.h"
#include "data/image_preprocessor.h"
#include "engine/safetensors.h"
#include "hf/checkpoint_files.h"
#include "hf/pretrained_config.h"
#include "hf/pretrained_weights.h"
#include "models/any_res.h"
#include "models/llm.h"
#include "models/vision_encoder.h"
#include "nlohmann/json.hpp"
#include "tests/testing/json_file.h"

namespace tandem::hf {
namespace {

const std::string kFixtures = TANDEM_HF_FIXTURES;

std::map<std::string, at::Tensor> ReadTensors(const std::string& path) {
  auto tensors = engine::ReadSafetensors(path);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  std::map<std::string, at::Tensor> out;
  if (tensors.ok()) {
    for (auto& [name, tensor] : *tensors) out[name] = tensor;
  }
  return out;
}

// |ours - theirs| <= 1e-4 * max|theirs| everywhere: fp32 to 1e-4 relative.
void ExpectClose(const at::Tensor& ours, const at::Tensor& theirs, const std::string& what) {
  ASSERT_EQ(ours.sizes(), theirs.sizes()) << what;
  const double scale = theirs.abs().max().item<double>();
  const double error = (ours.to(at::kFloat) - theirs).abs().max().item<double>();
  EXPECT_LE(error, 1e-4 * scale) << what << ": max error " << error << " for values up to "
                                 << scale;
}

struct Loaded {
  PretrainedConfig config;
  models::VisionEncoder vision{nullptr};
  models::Llm llm{nullptr};
};

Loaded Load(const std::string& name) {
  Loaded loaded;
  auto config = ReadPretrainedConfig(kFixtures + "/" + name);
  EXPECT_TRUE(config.ok()) << config.status();
  loaded.config = *config;
  auto files = CheckpointFiles::Open(config->directory);
  EXPECT_TRUE(files.ok()) << files.status();
  torch::manual_seed(0);
  loaded.vision = models::VisionEncoder(*config->vision);
  loaded.llm = models::Llm(*config->llm);
  EXPECT_TRUE(LoadVisionWeights(*config, *files, *loaded.vision).ok());
  EXPECT_TRUE(LoadLlmWeights(*config, *files, *loaded.llm).ok());
  return loaded;
}

class LlavaReference : public ::testing::TestWithParam<std::string> {};

TEST_P(LlavaReference, ImageFeaturesLogitsAndGreedyTokensEqualTransformers) {
  const std::string name = GetParam();
  Loaded model = Load(name);
  ASSERT_TRUE(model.vision && model.llm);
  auto reference = ReadTensors(kFixtures + "/reference/" + name + ".safetensors");
  const nlohmann::json expected = testing::ReadJsonFile(kFixtures + "/reference/" + name + ".json");
  torch::NoGradGuard no_grad;

  const at::Tensor features = model.vision->ForwardNormalized(reference.at("pixel_values"));
  EXPECT_EQ(features.size(1), expected["image_tokens"].get<int64_t>());
  ExpectClose(features, reference.at("image_features"), name + " image features");

  const auto& samples = expected["samples"];
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto ids = samples[i]["input_ids"].get<std::vector<int64_t>>();
    const at::Tensor tokens = torch::tensor(ids, torch::kLong).unsqueeze(0);
    const at::Tensor image = features.narrow(0, static_cast<int64_t>(i), 1);
    ExpectClose(model.llm->forward(image, tokens)[0], reference.at("logits_" + std::to_string(i)),
                name + " logits of sample " + std::to_string(i));
    const auto generated =
        models::GenerateGreedyCached(model.llm, image, ids, model.config.eos_token_ids, 12);
    EXPECT_EQ(generated, samples[i]["generated"].get<std::vector<int64_t>>())
        << name << " sample " << i;
  }
  const auto text = expected["text_input_ids"].get<std::vector<int64_t>>();
  ExpectClose(model.llm->forward(at::Tensor(), torch::tensor(text, torch::kLong).unsqueeze(0))[0],
              reference.at("text_logits"), name + " text-only logits");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlavaReference, ::testing::Values("clip_llama", "siglip_qwen2"));

class LlavaNextReference : public ::testing::TestWithParam<std::string> {};

// Each image's tiles as LlavaNextImageProcessorPil makes them, its layout and positions as
// LlavaNextProcessor counts them, and the logits and greedy tokens of
// LlavaNextForConditionalGeneration: one image, then a tall image and a wide one in one prompt.
TEST_P(LlavaNextReference, TilesPositionsLogitsAndGreedyTokensEqualTransformers) {
  const std::string name = GetParam();
  Loaded model = Load(name);
  ASSERT_TRUE(model.vision && model.llm);
  const models::VisionConfig& v = *model.config.vision;
  ASSERT_TRUE(v.any_res());
  ASSERT_TRUE(model.config.llm->image_newline);
  auto reference = ReadTensors(kFixtures + "/reference/" + name + ".safetensors");
  const nlohmann::json expected = testing::ReadJsonFile(kFixtures + "/reference/" + name + ".json");
  std::vector<data::Resolution> pinpoints;
  for (const auto& p : expected["pinpoints"]) pinpoints.push_back({p[0], p[1]});
  EXPECT_EQ(v.grid_pinpoints, pinpoints);
  auto preprocessor = data::ReadModelImagePreprocessor(kFixtures + "/" + name);
  ASSERT_TRUE(preprocessor.ok()) << preprocessor.status();
  EXPECT_EQ(preprocessor->grid_pinpoints, pinpoints);
  torch::NoGradGuard no_grad;
  const auto& runs = expected["runs"];
  for (size_t r = 0; r < runs.size(); ++r) {
    const std::string run = name + " run " + std::to_string(r);
    std::vector<at::Tensor> tiles;
    std::vector<data::AnyResLayout> layouts;
    const auto files = runs[r]["images"].get<std::vector<std::string>>();
    for (size_t i = 0; i < files.size(); ++i) {
      auto decoded = data::DecodeImageFile(kFixtures + "/reference/" + files[i]);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      EXPECT_EQ(runs[r]["image_sizes"][i][0].get<int64_t>(), decoded->height) << run;
      EXPECT_EQ(runs[r]["image_sizes"][i][1].get<int64_t>(), decoded->width) << run;
      auto processed = data::PreprocessTiles(*preprocessor, *decoded);
      ASSERT_TRUE(processed.ok()) << processed.status();
      EXPECT_EQ(static_cast<int64_t>(processed->size()), runs[r]["tiles"][i].get<int64_t>()) << run;
      for (const data::Image& tile : *processed) {
        tiles.push_back(torch::from_blob(const_cast<float*>(tile.pixels.data()),
                                         {1, 3, tile.height, tile.width}, torch::kFloat)
                            .clone());
      }
      layouts.push_back(data::LayoutAnyRes({decoded->height, decoded->width}, v.grid_pinpoints,
                                           v.image_size, v.grid()));
      EXPECT_EQ(layouts.back().tiles(), runs[r]["tiles"][i].get<int64_t>()) << run;
      EXPECT_EQ(layouts.back().positions(), runs[r]["image_positions"][i].get<int64_t>()) << run;
    }
    // Normalised as the processor does; 8-bit inputs, so equal up to float rounding.
    const at::Tensor mean =
        torch::tensor(preprocessor->image_mean, torch::kFloat).view({1, 3, 1, 1});
    const at::Tensor std = torch::tensor(preprocessor->image_std, torch::kFloat).view({1, 3, 1, 1});
    const at::Tensor normalised = (torch::cat(tiles) - mean) / std;
    const at::Tensor theirs = reference.at("tiles_" + std::to_string(r));
    ASSERT_EQ(normalised.sizes(), theirs.sizes()) << run;
    EXPECT_LE((normalised - theirs).abs().max().item<double>(), 1e-5) << run << " tiles";

    const at::Tensor features = models::ArrangeAnyRes(model.vision->ForwardNormalized(theirs),
                                                      layouts, model.llm->image_newline());
    const auto ids = runs[r]["prompt_token_ids"].get<std::vector<int64_t>>();
    const at::Tensor tokens = torch::tensor(ids, torch::kLong).unsqueeze(0);
    ExpectClose(model.llm->forward(features, tokens)[0],
                reference.at("logits_" + std::to_string(r)), run + " logits");
    const auto generated =
        models::GenerateGreedyCached(model.llm, features, ids, model.config.eos_token_ids, 10);
    EXPECT_EQ(generated, runs[r]["token_ids"].get<std::vector<int64_t>>()) << run;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlavaNextReference,
                         ::testing::Values("clip_llama_next", "siglip_qwen2_next"));

TEST(LlavaReference, AGeneratedImageTokenIsEmbeddedLikeAnyToken) {
  Loaded model = Load("clip_llama");
  ASSERT_TRUE(model.llm);
  torch::NoGradGuard no_grad;
  models::KvCache cache;
  const int64_t image = model.config.llm->image_token_id;
  model.llm->ForwardCached(
      at::Tensor(), torch::tensor({model.config.bos_token_id, int64_t{5}}).unsqueeze(0), cache);
  // transformers embeds it too when there are no pixel values; Tandem used to refuse.
  const at::Tensor logits =
      model.llm->ForwardCached(at::Tensor(), torch::full({1, 1}, image, torch::kLong), cache);
  EXPECT_EQ(logits.size(1), 1);
  EXPECT_EQ(cache.length, 3);
}

TEST(LlavaReference, CachedDecodingEqualsRecomputingTheWholeSequence) {
  Loaded model = Load("clip_llama");
  ASSERT_TRUE(model.llm);
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> prompt{model.config.bos_token_id, 5, 17, 42};
  const auto cached = models::GenerateGreedyCached(model.llm, at::Tensor(), prompt, {}, 10);
  std::vector<int64_t> sequence = prompt;
  for (int i = 0; i < 10; ++i) {
    const at::Tensor logits =
        model.llm->forward(at::Tensor(), torch::tensor(sequence, torch::kLong).unsqueeze(0));
    sequence.push_back(logits[0][-1].argmax().item<int64_t>());
  }
  EXPECT_EQ(cached, std::vector<int64_t>(sequence.begin() + 4, sequence.end()));
}

}  // namespace
}  // namespace tandem::hf
