// Tests for data/dataset.cc: OpenDatasets for each kind and mixtures, configuration errors, and
// AllTexts.
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

// A mixture: its sources' samples one source after another, described by source, their eval
// sets one after another, its order a weighted mixture of theirs, and a source's error named.
TEST(OpenDatasets, AMixtureJoinsItsSourcesAndNamesThem) {
  DataConfig config;
  config.kind = DataConfig::Kind::kMixture;
  MixtureSource a, b;
  a.name = "a";
  a.weight = 3;
  a.shapes = {1, 10, 4};
  b.name = "b";
  b.shapes = {2, 6, 0};
  config.mixture = {a, b};
  absl::StatusOr<Datasets> datasets = OpenDatasets(config, 16);
  ASSERT_TRUE(datasets.ok()) << datasets.status();
  EXPECT_EQ(datasets->train->size(), 16);
  EXPECT_EQ(datasets->train->Describe(12), "b: shapes train #2 (seed 2)");
  EXPECT_EQ(datasets->train->Text(12), ShapesDataset(2, 16, Split::kTrain, 6).Text(2));
  ASSERT_NE(datasets->eval, nullptr);
  EXPECT_EQ(datasets->eval->size(), 4);  // b has none
  EXPECT_EQ(datasets->train->ShardSizes(), (std::vector<int64_t>{10, 6}));
  const SampleOrder order = TrainOrder(config, *datasets->train);
  ASSERT_EQ(order.mixture.size(), 2u);
  EXPECT_EQ(order.mixture[0].weight, 3);
  EXPECT_EQ(order.mixture[1].order.shards, (std::vector<int64_t>{6}));
  EXPECT_EQ(datasets->train->Check(16).code(), absl::StatusCode::kOutOfRange);
  config.mixture[1].kind = DataConfig::Kind::kJsonl;
  config.mixture[1].jsonl.train_path = "/nonexistent/train.jsonl";
  const absl::Status missing = OpenDatasets(config, 16).status();
  EXPECT_THAT(std::string(missing.message()),
              HasSubstr("data.mixture source b: reading /nonexistent/train.jsonl"));
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
