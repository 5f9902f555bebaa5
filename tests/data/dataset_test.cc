// Tests for data/dataset.cc: OpenDatasets for both kinds, configuration errors, and AllTexts.
#include "data/dataset.h"

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "data/shapes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/temp_dir.h"
#include "tests/data/test_files.h"

namespace tandem::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(OpenDatasets, ShapesGiveTrainAndEvalOfTheConfiguredSizes) {
  DataConfig config;
  config.shapes.seed = 3;
  config.shapes.train_samples = 100;
  config.shapes.eval_samples = 20;
  absl::StatusOr<Datasets> datasets = OpenDatasets(config, 32);
  ASSERT_TRUE(datasets.ok()) << datasets.status();
  ASSERT_NE(datasets->train, nullptr);
  ASSERT_NE(datasets->eval, nullptr);
  EXPECT_EQ(datasets->train->size(), 100);
  EXPECT_EQ(datasets->eval->size(), 20);
  EXPECT_EQ(datasets->eval->Describe(4), "shapes eval #4 (seed 3)");
  const ShapesDataset expected(3, 32, Split::kTrain, 100);
  absl::StatusOr<Example> example = datasets->train->Get(9);
  ASSERT_TRUE(example.ok()) << example.status();
  EXPECT_EQ(example->image.pixels, expected.Render(9).image.pixels);
}

TEST(OpenDatasets, ShapesWithoutEvalSamplesHaveNoEvalSet) {
  DataConfig config;
  config.shapes.eval_samples = 0;
  absl::StatusOr<Datasets> datasets = OpenDatasets(config, 32);
  ASSERT_TRUE(datasets.ok()) << datasets.status();
  EXPECT_EQ(datasets->eval, nullptr);
}

TEST(OpenDatasets, BadSizesAreInvalidArgument) {
  DataConfig config;
  EXPECT_EQ(OpenDatasets(config, 0).status().code(), absl::StatusCode::kInvalidArgument);
  config.shapes.train_samples = 0;
  EXPECT_EQ(OpenDatasets(config, 32).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(OpenDatasets, JsonlOpensTheTrainAndEvalFiles) {
  testing::TempDir dir;
  Image image;
  image.height = 2;
  image.width = 2;
  image.pixels.assign(12, 0.25f);
  std::filesystem::create_directories(dir / "spec/data/images");
  ASSERT_TRUE(WritePng(image, dir / "spec/data/images/x.png").ok());
  ASSERT_TRUE(testing::WriteTestFile(dir / "spec/data/train.jsonl",
                                     "{\"image\": \"images/x.png\", \"text\": \"first\"}\n"
                                     "{\"image\": \"images/x.png\", \"text\": \"second\"}\n"));
  ASSERT_TRUE(testing::WriteTestFile(dir / "spec/data/eval.jsonl",
                                     "{\"image\": \"images/x.png\", \"text\": \"held out\"}\n"));
  DataConfig config;
  config.kind = DataConfig::Kind::kJsonl;
  config.jsonl.train_path = dir / "spec/data/train.jsonl";

  absl::StatusOr<Datasets> datasets = OpenDatasets(config, 8);
  ASSERT_TRUE(datasets.ok()) << datasets.status();
  EXPECT_EQ(datasets->train->size(), 2);
  EXPECT_EQ(datasets->eval, nullptr);  // no eval_path
  EXPECT_EQ(datasets->train->Describe(1), (dir / "spec/data/train.jsonl") + ":2 (images/x.png)");
  absl::StatusOr<Example> example = datasets->train->Get(0);
  ASSERT_TRUE(example.ok()) << example.status();
  EXPECT_EQ(example->image.height, 8);

  config.jsonl.eval_path = dir / "spec/data/eval.jsonl";
  datasets = OpenDatasets(config, 8);
  ASSERT_TRUE(datasets.ok()) << datasets.status();
  ASSERT_NE(datasets->eval, nullptr);
  EXPECT_THAT(AllTexts(*datasets->eval), ElementsAre("held out"));
  EXPECT_THAT(AllTexts(*datasets->train), ElementsAre("first", "second"));
  // A relative path is the working directory's (a spec file's are made absolute when it is read).
  config.jsonl.train_path = "data/train.jsonl";
  datasets = OpenDatasets(config, 8);
  EXPECT_EQ(datasets.status().code(), absl::StatusCode::kNotFound);
}

TEST(OpenDatasets, JsonlWithoutTrainPathIsInvalidArgument) {
  DataConfig config;
  config.kind = DataConfig::Kind::kJsonl;
  absl::StatusOr<Datasets> datasets = OpenDatasets(config, 32);
  EXPECT_EQ(datasets.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(datasets.status().message(), HasSubstr("train_path is empty"));
}

// A data path that names a device would jam the actor reading it (/dev/ptmx blocks in read,
// /dev/zero never ends): it is refused, naming it, and nothing is read from it.
TEST(OpenDatasets, DevicesAreRefusedWithoutReadingThem) {
  DataConfig jsonl;
  jsonl.kind = DataConfig::Kind::kJsonl;
  jsonl.jsonl.train_path = "/dev/ptmx";
  EXPECT_EQ(OpenDatasets(jsonl, 32).status().message(),
            "/dev/ptmx: a character device, not a regular file");
  DataConfig conversations;
  conversations.kind = DataConfig::Kind::kConversations;
  conversations.conversations.train_path = "/dev/zero";
  EXPECT_EQ(OpenDatasets(conversations, 32).status().message(),
            "/dev/zero: a character device, not a regular file");
  EXPECT_EQ(LoadSampleImage("/dev/zero", 32, nullptr).status().message(),
            "/dev/zero: a character device, not a regular file");
}

}  // namespace
}  // namespace tandem::data
