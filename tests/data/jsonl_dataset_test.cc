// Tests for data/jsonl_dataset.cc: the line rules (errors carry "<file>:<line>"), path resolution
// against the jsonl file's directory, and decoding errors at Get.
#include "data/jsonl_dataset.h"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "data/shapes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/temp_dir.h"
#include "tests/data/test_files.h"

namespace tandem::data {
namespace {

using ::testing::HasSubstr;

// A 6 x 8 image whose red channel is 1 in the left half and 0 in the right, green 0.5, blue 0.
Image HalfRed() {
  Image image;
  image.height = 6;
  image.width = 8;
  image.pixels.assign(3 * 48, 0.0f);
  for (int64_t y = 0; y < 6; ++y) {
    for (int64_t x = 0; x < 8; ++x) {
      image.at(0, y, x) = x < 4 ? 1.0f : 0.0f;
      image.at(1, y, x) = 0.5f;
    }
  }
  return image;
}

class JsonlDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "data/images");
    ASSERT_TRUE(WritePng(HalfRed(), dir_ / "data/images/a.png").ok());
    ASSERT_TRUE(WritePng(HalfRed(), dir_ / "data/images/b.png").ok());
  }

  // Writes data/train.jsonl and opens it at image size 4.
  absl::StatusOr<std::unique_ptr<JsonlDataset>> Open(const std::string& contents) {
    EXPECT_TRUE(testing::WriteTestFile(jsonl_, contents));
    return JsonlDataset::Open(jsonl_, 4);
  }

  testing::TempDir dir_;
  const std::string jsonl_ = dir_ / "data/train.jsonl";
};

TEST_F(JsonlDatasetTest, ReadsSamplesAndResolvesImagesAgainstTheJsonlDirectory) {
  absl::StatusOr<std::unique_ptr<JsonlDataset>> dataset = Open(
      "{\"image\": \"images/a.png\", \"text\": \"a red half\"}\n"
      "\n"
      "   \n"
      "{\"text\": \"another\", \"image\": \"images/b.png\"}\n");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const JsonlDataset& data = **dataset;
  ASSERT_EQ(data.size(), 2);
  EXPECT_EQ(data.Text(0), "a red half");
  EXPECT_EQ(data.Text(1), "another");
  EXPECT_EQ(data.ImagePath(1), dir_ / "data/images/b.png");
  // Blank lines are skipped but still counted.
  EXPECT_EQ(data.Describe(1), jsonl_ + ":4 (images/b.png)");

  absl::StatusOr<Example> example = data.Get(0);
  ASSERT_TRUE(example.ok()) << example.status();
  EXPECT_EQ(example->text, "a red half");
  ASSERT_EQ(example->image.height, 4);
  ASSERT_EQ(example->image.width, 4);
  // 8 columns -> 4: output columns sample 0.5, 2.5, 4.5, 6.5; 0.5 and 2.5 lie within the red half.
  EXPECT_EQ(example->image.at(0, 2, 0), 1.0f);
  EXPECT_EQ(example->image.at(0, 2, 1), 1.0f);
  EXPECT_EQ(example->image.at(0, 2, 2), 0.0f);
  EXPECT_FLOAT_EQ(example->image.at(1, 0, 3), 128 / 255.0f);  // 0.5 stored as byte 128
  EXPECT_EQ(data.Get(2).status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(JsonlDatasetTest, AcceptsAbsolutePathsAndCrlfLines) {
  absl::StatusOr<std::unique_ptr<JsonlDataset>> dataset =
      Open("{\"image\": \"" + (dir_ / "data/images/a.png") + "\", \"text\": \"x\"}\r\n");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->ImagePath(0), dir_ / "data/images/a.png");
  EXPECT_TRUE((*dataset)->Get(0).ok());
}

TEST_F(JsonlDatasetTest, BadJsonNamesFileAndLine) {
  absl::StatusOr<std::unique_ptr<JsonlDataset>> dataset = Open(
      "{\"image\": \"images/a.png\", \"text\": \"one\"}\n"
      "{\"image\": \"images/b.png\", \"text\": \"two\"}\n"
      "{\"image\": \"images/a.png\", \"text\": }\n");
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dataset.status().message()),
              HasSubstr("train.jsonl:3: column 35: invalid JSON: syntax error"));
}

TEST_F(JsonlDatasetTest, LineThatIsNotAnObjectIsAnError) {
  EXPECT_THAT(Open("[\"images/a.png\", \"text\"]\n").status().message(),
              HasSubstr("train.jsonl:1: expected a JSON object, got array"));
}

TEST_F(JsonlDatasetTest, MissingKeyIsAnError) {
  absl::StatusOr<std::unique_ptr<JsonlDataset>> dataset = Open(
      "{\"image\": \"images/a.png\", \"text\": \"one\"}\n"
      "{\"image\": \"images/b.png\"}\n");
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dataset.status().message(), jsonl_ + ":2: missing key \"text\"");
}

TEST_F(JsonlDatasetTest, UnknownKeyIsAnError) {
  absl::StatusOr<std::unique_ptr<JsonlDataset>> dataset =
      Open("{\"image\": \"images/a.png\", \"text\": \"one\", \"caption\": \"typo\"}\n");
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dataset.status().message(), HasSubstr("train.jsonl:1: unknown key \"caption\""));
}

TEST_F(JsonlDatasetTest, NumberBeyondADoubleIsAnErrorNotACrash) {
  EXPECT_EQ(
      std::string(Open("{\"image\": \"images/a.png\", \"text\": 1e999}\n").status().message()),
      jsonl_ + ":1: column 35: invalid JSON: number overflow parsing '1e999'");
}

TEST_F(JsonlDatasetTest, DuplicateKeyAndDeepNestingAreErrorsWithTheLine) {
  EXPECT_EQ(
      Open("{\"image\": \"images/a.png\", \"text\": \"a\", \"text\": \"b\"}\n").status().message(),
      jsonl_ + ":1: text: duplicate key");
  EXPECT_EQ(
      Open("{\"image\": \"images/a.png\", \"text\": \"a\"}\n" + std::string(1 << 20, '[') + "\n")
          .status()
          .message(),
      jsonl_ + ":2: column 129: invalid JSON: nested more than 128 levels deep");
}

TEST_F(JsonlDatasetTest, NonStringOrEmptyValueIsAnError) {
  EXPECT_EQ(Open("{\"image\": \"images/a.png\", \"text\": 7}\n").status().message(),
            jsonl_ + ":1: \"text\" must be a string, not number");
  EXPECT_EQ(Open("{\"image\": \"\", \"text\": \"x\"}\n").status().message(),
            jsonl_ + ":1: \"image\" is empty");
}

// "images/a.png\u0000.txt" would open images/a.png: the system ends a file name at the NUL.
TEST_F(JsonlDatasetTest, AnImagePathWithANulIsRefused) {
  EXPECT_EQ(Open("{\"image\": \"images/a.png\\u0000.txt\", \"text\": \"x\"}\n").status().message(),
            jsonl_ + ":1: \"image\" contains a NUL character");
}

TEST_F(JsonlDatasetTest, MissingImageFileIsNotFoundAtOpen) {
  absl::StatusOr<std::unique_ptr<JsonlDataset>> dataset = Open(
      "{\"image\": \"images/a.png\", \"text\": \"one\"}\n"
      "{\"image\": \"images/missing.png\", \"text\": \"two\"}\n");
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(dataset.status().message(),
            jsonl_ + ":2: image file " + (dir_ / "data/images/missing.png") + " does not exist");
}

// A data file cannot make an actor read any file it can: a path out of the jsonl's directory is
// refused unless the spec says data.allow_images_outside.
TEST_F(JsonlDatasetTest, ImagesOutsideTheJsonlsDirectoryAreRefusedUnlessAllowed) {
  const std::string nested = dir_ / "data/lists/train.jsonl";
  ASSERT_TRUE(testing::WriteTestFile(dir_ / "secret.png",
                                     testing::ReadTestFile(dir_ / "data/images/a.png")));
  std::filesystem::create_directories(dir_ / "data/lists");
  std::filesystem::create_directory_symlink(dir_ / "data/images", dir_ / "data/lists/linked");
  std::filesystem::create_symlink(dir_ / "secret.png", dir_ / "data/lists/leak.png");
  const std::vector<std::pair<std::string, std::string>> outside = {
      {"../images/a.png", dir_ / "data/images/a.png"},
      {dir_ / "secret.png", dir_ / "secret.png"},
      {"linked/a.png", dir_ / "data/lists/linked/a.png"},
      {"leak.png", dir_ / "data/lists/leak.png"}};
  for (const auto& [written, resolved] : outside) {
    ASSERT_TRUE(
        testing::WriteTestFile(nested, "{\"image\": \"" + written + "\", \"text\": \"x\"}\n"));
    const absl::Status refused = JsonlDataset::Open(nested, 4).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << written;
    EXPECT_EQ(
        std::string(refused.message()),
        nested + ":1: image " + resolved + " is outside " + (dir_ / "data/lists") +
            ", the data file's directory (an absolute path, \"..\" or a symlink leading out); set "
            "data.allow_images_outside to true to read it")
        << written;
    EXPECT_TRUE(JsonlDataset::Open(nested, 4, nullptr, /*allow_images_outside=*/true).ok())
        << written;
  }
}

TEST_F(JsonlDatasetTest, ImagesResolveAgainstTheJsonlNotTheWorkingDirectory) {
  // "images/a.png" exists under data/, not next to a jsonl file in data/lists/.
  const std::string nested = dir_ / "data/lists/train.jsonl";
  ASSERT_TRUE(
      testing::WriteTestFile(nested, "{\"image\": \"../images/a.png\", \"text\": \"up\"}\n"));
  absl::StatusOr<std::unique_ptr<JsonlDataset>> dataset =
      JsonlDataset::Open(nested, 4, nullptr, /*allow_images_outside=*/true);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->ImagePath(0), dir_ / "data/images/a.png");

  ASSERT_TRUE(
      testing::WriteTestFile(nested, "{\"image\": \"images/a.png\", \"text\": \"here\"}\n"));
  EXPECT_EQ(JsonlDataset::Open(nested, 4).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JsonlDatasetTest, CorruptImageFailsAtGetNamingFileAndLine) {
  const std::string png = testing::ReadTestFile(dir_ / "data/images/b.png");
  ASSERT_TRUE(testing::WriteTestFile(dir_ / "data/images/b.png", png.substr(0, png.size() - 30)));
  absl::StatusOr<std::unique_ptr<JsonlDataset>> dataset = Open(
      "{\"image\": \"images/a.png\", \"text\": \"one\"}\n"
      "{\"image\": \"images/b.png\", \"text\": \"two\"}\n");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE((*dataset)->Get(0).ok());
  const absl::Status status = (*dataset)->Get(1).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(),
              HasSubstr(jsonl_ + ":2: " + (dir_ / "data/images/b.png") + ": corrupt PNG"));
}

TEST_F(JsonlDatasetTest, EmptyDatasetIsAnError) {
  absl::StatusOr<std::unique_ptr<JsonlDataset>> dataset = Open("\n  \n");
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dataset.status().message(), HasSubstr("no samples"));
}

TEST_F(JsonlDatasetTest, MissingJsonlFileIsNotFound) {
  absl::StatusOr<std::unique_ptr<JsonlDataset>> dataset =
      JsonlDataset::Open(dir_ / "nope.jsonl", 4);
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dataset.status().message(), HasSubstr(dir_ / "nope.jsonl"));
}

TEST(JsonlExample, CheckedInExampleOpensAndMatchesItsGenerator) {
  // examples/jsonl/ was written by `tandem-make-example-images` (seed 7, 32 x 32, 8 + 4 samples).
  const ShapesDataset shapes(7, 32, Split::kTrain, 12);
  for (const auto& [file, first] :
       {std::pair<std::string, int64_t>{"train.jsonl", 0}, {"eval.jsonl", 8}}) {
    absl::StatusOr<std::unique_ptr<JsonlDataset>> dataset =
        JsonlDataset::Open(std::string(TANDEM_EXAMPLES_DIR) + "/jsonl/" + file, 32);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    ASSERT_EQ((*dataset)->size(), first == 0 ? 8 : 4);
    for (int64_t i = 0; i < (*dataset)->size(); ++i) {
      absl::StatusOr<Example> example = (*dataset)->Get(i);
      ASSERT_TRUE(example.ok()) << example.status();
      const Example expected = shapes.Render(first + i);
      EXPECT_EQ(example->text, expected.text) << file << " " << i;
      ASSERT_EQ(example->image.pixels.size(), expected.image.pixels.size());
      for (size_t p = 0; p < expected.image.pixels.size(); ++p) {
        ASSERT_NEAR(example->image.pixels[p], expected.image.pixels[p], 0.5f / 255 + 1e-6f)
            << file << " " << i << " value " << p << ": regenerate examples/jsonl (see its README)";
      }
    }
  }
}

}  // namespace
}  // namespace tandem::data
