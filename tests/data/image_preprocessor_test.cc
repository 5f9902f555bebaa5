// data/image_preprocessor.h and data/pil_resize.h against transformers' CLIPImageProcessorPil and
// SiglipImageProcessorPil: the 8-bit values after resize and crop must be the same, every one.
#include "data/image_preprocessor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

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
