// data/image_preprocessor.h and data/pil_resize.h against transformers' CLIPImageProcessorPil and
// SiglipImageProcessorPil: the 8-bit values after resize and crop must be the same, every one. And
// data/any_res.h's arithmetic on sizes worked out by hand from transformers' LLaVA-NeXT code (the
// tiles themselves are held against transformers' in tests/hf/llava_reference_test.cc).
#include "data/image_preprocessor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/any_res.h"
#include "nlohmann/json.hpp"
#include "tests/testing/json_file.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = TANDEM_HF_FIXTURES;

class PreprocessReference : public ::testing::TestWithParam<std::string> {};

TEST_P(PreprocessReference, EightBitValuesEqualTransformersPilProcessors) {
  const auto expected =
      testing::ReadJsonFile(kFixtures + "/reference/preprocessed.json")[GetParam()];
  auto preprocessor =
      ReadImagePreprocessor(kFixtures + "/" + GetParam() + "/preprocessor_config.json");
  ASSERT_TRUE(preprocessor.ok()) << preprocessor.status();
  auto image = DecodeImageFile(kFixtures + "/reference/image.png");
  ASSERT_TRUE(image.ok()) << image.status();
  ASSERT_EQ(image->height, 47);
  ASSERT_EQ(image->width, 61);
  auto out = Preprocess(*preprocessor, *image);
  ASSERT_TRUE(out.ok()) << out.status();
  const auto shape = expected["shape"].get<std::vector<int64_t>>();
  ASSERT_EQ(out->height, shape[1]);
  ASSERT_EQ(out->width, shape[2]);
  const auto values = expected["values"].get<std::vector<int>>();
  ASSERT_EQ(out->pixels.size(), values.size());
  int differ = 0;
  for (size_t i = 0; i < values.size(); ++i)
    differ += std::lround(out->pixels[i] * 255.0f) != values[i];
  EXPECT_EQ(differ, 0) << "of " << values.size() << " values";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PreprocessReference,
                         ::testing::Values("clip_llama", "siglip_qwen2"));

TEST(ImagePreprocessor, ReadsClipsSettings) {
  auto p = ReadImagePreprocessor(kFixtures + "/clip_llama/preprocessor_config.json");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->shortest_edge, 36);
  EXPECT_TRUE(p->do_center_crop);
  EXPECT_EQ(p->output_size(), 30);
  EXPECT_EQ(p->filter, PilFilter::kBicubic);
  EXPECT_DOUBLE_EQ(p->image_mean[0], 0.48145466);
  EXPECT_DOUBLE_EQ(p->image_std[2], 0.27577711);
}

TEST(ImagePreprocessor, RefusesWhatItCannotDoNamingTheKey) {
  const fs::path file =
      fs::path(::testing::TempDir()) / ("preprocessor_" + std::to_string(::getpid()) + ".json");
  const auto read = [&](const std::string& json) {
    std::ofstream(file) << json;
    return ReadImagePreprocessor(file.string()).status();
  };
  EXPECT_NE(read(R"({"size": {"shortest_edge": 8}, "resample": 1})")
                .message()
                .find("resample number 1 is not supported (2 bilinear, 3 bicubic)"),
            std::string::npos);
  EXPECT_NE(read(R"({"size": {"height": 8, "width": 9}})").message().find("must be square"),
            std::string::npos);
  EXPECT_NE(read(R"({"size": {"shortest_edge": 0}})")
                .message()
                .find("size.shortest_edge must be a positive integer"),
            std::string::npos);
  EXPECT_NE(read(R"({"size": {"shortest_edge": 8}, "rescale_factor": 0.5})")
                .message()
                .find("rescale_factor 0.5"),
            std::string::npos);
  EXPECT_NE(
      read(R"({"size": {"shortest_edge": 8}, "do_center_crop": true, "crop_size": {"height": 8}})")
          .message()
          .find("crop_size.width is required"),
      std::string::npos);
  EXPECT_NE(read(R"({"size": {"shortest_edge": 8}, "do_normalize": null})")
                .message()
                .find("of the wrong type"),
            std::string::npos);
  EXPECT_EQ(ReadImagePreprocessor("/nonexistent/preprocessor_config.json").status().code(),
            absl::StatusCode::kNotFound);
  fs::remove(file);
}

// LLaVA-NeXT's default pinpoints for 336-pixel tiles, scaled to 30.
const std::vector<Resolution> kPinpoints{{30, 60}, {60, 30}, {60, 60}, {90, 30}, {30, 90}};

TEST(AnyRes, ChoosesThePinpointThatKeepsMostPixelsThenWastesLeast) {
  // 47x61: 60x60 keeps 60 x 46 of it; the two 30-high ones keep 38 x 29.
  EXPECT_EQ(SelectBestResolution({47, 61}, kPinpoints), (Resolution{60, 60}));
  // 70x25: 90x30 keeps all 1750 pixels.
  EXPECT_EQ(SelectBestResolution({70, 25}, kPinpoints), (Resolution{90, 30}));
  // 10x10 fits whole in every pinpoint: the least area left over wins, the first of a tie.
  EXPECT_EQ(SelectBestResolution({10, 10}, kPinpoints), (Resolution{30, 60}));
}

TEST(AnyRes, UnpadsTheGridOfFeaturesLikeTransformers) {
  // 47x61 in 2x2 tiles of 5x5 features: a 10x10 grid; the image's aspect keeps
  // int(round(47 * 10 / 61, 7)) = 7 rows, so (10 - 7) / 2 = 1 row goes at the top and the bottom.
  const AnyResLayout wide = LayoutAnyRes({47, 61}, kPinpoints, 30, 5);
  EXPECT_EQ(wide.rows, 2);
  EXPECT_EQ(wide.cols, 2);
  EXPECT_EQ(wide.tiles(), 5);
  EXPECT_EQ(wide.top, 1);
  EXPECT_EQ(wide.height, 8);
  EXPECT_EQ(wide.left, 0);
  EXPECT_EQ(wide.width, 10);
  EXPECT_EQ(wide.positions(), 25 + 8 * 11);  // LlavaNextProcessor: 113 image tokens
  // 70x25 in 3x1 tiles: a 15x5 grid; round(70 * 5 / 25) = 14 rows, (15 - 14) / 2 = 0 cut.
  const AnyResLayout tall = LayoutAnyRes({70, 25}, kPinpoints, 30, 5);
  EXPECT_EQ(tall.rows, 3);
  EXPECT_EQ(tall.cols, 1);
  EXPECT_EQ(tall.height, 15);
  EXPECT_EQ(tall.width, 5);
  EXPECT_EQ(tall.positions(), 25 + 15 * 6);
  // 20x90 in 1x3 tiles: a 5x15 grid (aspect 3) and a wider image (aspect 4.5), so rows are cut:
  // int(round(20 * 15 / 90, 7)) = 3 kept, 1 cut above and below.
  const AnyResLayout strip = LayoutAnyRes({20, 90}, kPinpoints, 30, 5);
  EXPECT_EQ(strip.rows, 1);
  EXPECT_EQ(strip.cols, 3);
  EXPECT_EQ(strip.top, 1);
  EXPECT_EQ(strip.height, 3);
  EXPECT_EQ(strip.width, 15);
  EXPECT_EQ(MaxAnyResPositions(kPinpoints, 30, 5), 25 + 10 * 11);
}

TEST(AnyRes, TilesAreTheBaseThenThePaddedPinpointRowByRow) {
  // A 10x20 white image into {20x40}: resized to 20x40 exactly, no padding; two tiles of 20.
  Image white;
  white.height = 10;
  white.width = 20;
  white.pixels.assign(3 * 10 * 20, 1.0f);
  const std::vector<Image> tiles =
      AnyResTiles(white, {{20, 40}}, 20, {20, 20}, PilFilter::kBicubic);
  ASSERT_EQ(tiles.size(), 3u);
  for (const Image& tile : tiles) {
    EXPECT_EQ(tile.height, 20);
    EXPECT_EQ(tile.width, 20);
    EXPECT_FLOAT_EQ(tile.at(0, 0, 0), 1.0f);
    EXPECT_FLOAT_EQ(tile.at(2, 19, 19), 1.0f);
  }
  // Into {40x40}: resized to 20x40 (aspect kept), padded by 10 rows above and below.
  const std::vector<Image> padded =
      AnyResTiles(white, {{40, 40}}, 20, {20, 20}, PilFilter::kBicubic);
  ASSERT_EQ(padded.size(), 5u);
  EXPECT_FLOAT_EQ(padded[1].at(0, 9, 0), 0.0f);   // top-left tile: padding above row 10
  EXPECT_FLOAT_EQ(padded[1].at(0, 10, 0), 1.0f);  // the image below it
  EXPECT_FLOAT_EQ(padded[3].at(1, 9, 5), 1.0f);   // bottom-left tile: the image above row 10
  EXPECT_FLOAT_EQ(padded[3].at(1, 10, 5), 0.0f);  // padding below
}

TEST(ImagePreprocessor, ReadsAndChecksImageGridPinpoints) {
  const fs::path file =
      fs::path(::testing::TempDir()) / ("pinpoints_" + std::to_string(::getpid()) + ".json");
  const auto read = [&](const std::string& json) {
    std::ofstream(file) << json;
    return ReadImagePreprocessor(file.string());
  };
  auto ok = read(
      R"({"size": {"height": 30, "width": 30}, "image_grid_pinpoints": [[30, 60], [90, 30]]})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->grid_pinpoints, (std::vector<Resolution>{{30, 60}, {90, 30}}));
  EXPECT_EQ(ok->base_size(), (Resolution{30, 30}));
  EXPECT_NE(read(R"({"size": {"height": 30, "width": 30}, "image_grid_pinpoints": [[30, 50]]})")
                .status()
                .message()
                .find("image_grid_pinpoints[0] 30 x 50 is not a multiple of the tile side 30"),
            std::string::npos);
  EXPECT_NE(read(R"({"size": {"height": 30, "width": 30}, "image_grid_pinpoints": [[30]]})")
                .status()
                .message()
                .find("image_grid_pinpoints[0] must be [height, width] in pixels"),
            std::string::npos);
  EXPECT_NE(read(R"({"size": {"height": 30, "width": 30}, "image_grid_pinpoints": []})")
                .status()
                .message()
                .find("image_grid_pinpoints must be a non-empty list"),
            std::string::npos);
  EXPECT_NE(
      read(R"({"size": {"height": 30, "width": 30}, "crop_size": {"height": 224, "width": 224},
                     "image_grid_pinpoints": [[30, 60]]})")
          .status()
          .message()
          .find("crop_size.height 224 cuts image_grid_pinpoints into tiles that are not the "
                "30 pixels"),
      std::string::npos);
  fs::remove(file);
}

TEST(PilResize, AnUnchangedSizeKeepsTheValues) {
  Image image;
  image.height = 2;
  image.width = 3;
  image.pixels = {0, 0.2f, 0.4f, 0.6f, 0.8f, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  const Image out = ResizePil(image, 2, 3, PilFilter::kBicubic);
  for (size_t i = 0; i < image.pixels.size(); ++i) {
    EXPECT_EQ(std::lround(out.pixels[i] * 255), std::lround(image.pixels[i] * 255));
  }
}

// transformers 5 saves a processor's image settings inside processor_config.json, with no
// preprocessor_config.json: the same settings read the same, and errors name the nested object.
TEST(ImagePreprocessor, ReadsTransformers5sProcessorConfig) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("processor_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const nlohmann::json settings =
      testing::ReadJsonFile(kFixtures + "/clip_llama/preprocessor_config.json");
  std::ofstream(dir / "processor_config.json") << nlohmann::json{
      {"processor_class", "LlavaProcessor"},
      {"image_processor", settings}}.dump();
  auto p = ReadModelImagePreprocessor(dir.string());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->shortest_edge, 36);
  EXPECT_EQ(p->output_size(), 30);
  EXPECT_DOUBLE_EQ(p->image_mean[0], 0.48145466);
  auto written = ModelImagePreprocessorJson(dir.string());
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(nlohmann::json::parse(*written), settings);

  nlohmann::json bad = settings;
  bad["resample"] = 1;
  std::ofstream(dir / "processor_config.json") << nlohmann::json{{"image_processor", bad}}.dump();
  EXPECT_EQ(std::string(ReadModelImagePreprocessor(dir.string()).status().message()),
            (dir / "processor_config.json").string() +
                ": image_processor: resample number 1 is not supported (2 bilinear, 3 bicubic)");
  std::ofstream(dir / "processor_config.json") << R"({"processor_class": "LlavaProcessor"})";
  EXPECT_NE(
      ReadModelImagePreprocessor(dir.string())
          .status()
          .message()
          .find("processor_config.json: image_processor must be an object (the directory has no "
                "preprocessor_config.json either)"),
      std::string::npos);
  // preprocessor_config.json, where there is one, wins.
  fs::copy_file(kFixtures + "/siglip_qwen2/preprocessor_config.json",
                dir / "preprocessor_config.json");
  auto siglip = ReadModelImagePreprocessor(dir.string());
  ASSERT_TRUE(siglip.ok()) << siglip.status();
  EXPECT_FALSE(siglip->do_center_crop);
  fs::remove_all(dir);
  EXPECT_EQ(ReadModelImagePreprocessor(dir.string()).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem::data
