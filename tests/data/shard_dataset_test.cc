#include "data/shard_dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/sampler.h"
#include "tests/data/temp_dir.h"
#include "tests/data/test_files.h"

namespace tandem::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A 4 x 6 PNG whose pixels depend on `seed`.
std::string Png(int seed) {
  absl::StatusOr<std::string> png = EncodePng(testing::PatternImage(4, 6, seed));
  EXPECT_TRUE(png.ok()) << png.status();
  return *png;
}

void Write(const std::string& path,
           const std::vector<std::pair<std::string, std::string>>& members) {
  absl::StatusOr<TarWriter> writer = TarWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (const auto& [name, data] : members) ASSERT_TRUE(writer->Add(name, data).ok());
  ASSERT_TRUE(writer->Close().ok());
}

constexpr char kTwoImages[] =
    R"({"conversations": [{"from": "human", "value": "<image>\n<image>\nSame shape?"},
                          {"from": "gpt", "value": "Yes."}]})";
constexpr char kTextOnly[] =
    R"({"messages": [{"role": "user", "content": "Two and two?"},
                     {"role": "assistant", "content": "Four."}]})";

TEST(ExpandShardPattern, RangesKeepTheirWidth) {
  EXPECT_THAT(*ExpandShardPattern("s/train-{0008..0010}.tar"),
              ElementsAre("s/train-0008.tar", "s/train-0009.tar", "s/train-0010.tar"));
  EXPECT_THAT(*ExpandShardPattern("a{1..2}-{0..1}.tar"),
              ElementsAre("a1-0.tar", "a1-1.tar", "a2-0.tar", "a2-1.tar"));
  EXPECT_THAT(*ExpandShardPattern("one.tar"), ElementsAre("one.tar"));
  EXPECT_THAT(std::string(ExpandShardPattern("t-{000..009.tar").status().message()),
              HasSubstr("shard pattern t-{000..009.tar: '{' is not closed"));
  EXPECT_THAT(std::string(ExpandShardPattern("t-{9..1}.tar").status().message()),
              HasSubstr("its range ends before it begins (1 < 9)"));
  EXPECT_THAT(std::string(ExpandShardPattern("t-{a..b}.tar").status().message()),
              HasSubstr("the ends of its range are not numbers"));
}

TEST(ShardDataset, SamplesAcrossShardsWithTheirImagesInMarkOrder) {
  testing::TempDir dir;
  // Members in tar order 1.png before 0.png: the numbers give the marks' order.
  Write(dir / "s-0.tar", {{"a.json", kTwoImages},
                          {"a.1.png", Png(2)},
                          {"a.0.png", Png(1)},
                          {"b.json", R"({"caption": "a red circle"})"},
                          {"b.png", Png(3)}});
  Write(dir / "s-1.tar", {{"c.json", kTextOnly}, {"c.txt", "ignored"}});
  auto dataset = ShardDataset::Open({dir / "s-{0..1}.tar"}, 6, nullptr, {2});
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const ShardDataset& d = **dataset;
  ASSERT_EQ(d.size(), 3);
  EXPECT_EQ(d.ImageCount(0), 2);
  EXPECT_EQ(d.ImageCount(1), 1);
  EXPECT_EQ(d.ImageCount(2), 0);
  EXPECT_EQ(d.Describe(0), (dir / "s-0.tar") + ": a (byte 0)");
  EXPECT_EQ(d.Messages(0)[0].content, "<image>\n<image>\nSame shape?");
  EXPECT_EQ(d.Messages(1)[1].content, "a red circle");  // a caption answers its image
  EXPECT_EQ(d.Messages(1)[0].content, "<image>");
  EXPECT_EQ(d.Messages(2)[1].content, "Four.");
  EXPECT_EQ(d.Text(1), "a red circle");
  for (int image = 0; image < 2; ++image) {
    absl::StatusOr<Image> read = d.GetImage(0, image);
    ASSERT_TRUE(read.ok()) << read.status();
    absl::StatusOr<Image> expected = DecodeImage(Png(image + 1), "expected");
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(read->pixels, ResizeBilinear(*expected, 6, 6).pixels) << "image " << image;
  }
  absl::StatusOr<Resolution> size = d.ImageSize(1, 0);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->height, 4);
  EXPECT_EQ(size->width, 6);
  EXPECT_EQ(d.GetImage(2, 0).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(ShardDataset, BadSamplesNameTheShardTheKeyAndTheByte) {
  testing::TempDir dir;
  const std::string path = dir / "bad.tar";
  const auto error = [&](const std::vector<std::pair<std::string, std::string>>& members,
                         int64_t max_images = 2) {
    Write(path, members);
    return std::string(ShardDataset::Open({path}, 6, nullptr, {max_images}).status().message());
  };
  EXPECT_EQ(error({{"a.png", Png(1)}}),
            path + ": a (byte 0): has no json member (its text: a.json)");
  EXPECT_THAT(error({{"a.json", kTextOnly}, {"b.json", "{"}}),
              HasSubstr(path + ": b (byte 1024): "));
  EXPECT_EQ(error({{"a.json", kTwoImages}, {"a.0.png", Png(1)}}),
            path + ": a (byte 0): has 1 image and 2 <image> marks");
  EXPECT_EQ(error({{"a.json", kTwoImages}, {"a.0.png", Png(1)}, {"a.1.png", Png(2)}}, 1),
            path + ": a (byte 0): has 2 images, more than data.max_images_per_sample = 1");
  EXPECT_THAT(
      error({{"a.json", R"({"caption": "x"})"}}),
      HasSubstr("a (byte 0): must hold \"conversations\" or \"messages\", or a \"caption\""));
  EXPECT_EQ(ShardDataset::Open({dir / "none-{0..1}.tar"}, 6).status().code(),
            absl::StatusCode::kNotFound);
}

// data.on_bad_sample "skip": a bad sample is one the dataset reports by Check, naming it, while the
// rest of its shard reads as before.
TEST(ShardDataset, SkippingKeepsTheGoodSamplesOfAShardAndReportsEachBadOne) {
  testing::TempDir dir;
  const std::string path = dir / "mixed.tar";
  Write(path, {{"a.json", R"({"caption": "a red circle"})"},
               {"a.png", Png(1)},
               {"b.png", Png(2)},  // no text
               {"c.json", "{"},
               {"c.png", Png(3)},
               {"d.json", R"({"caption": "a blue square"})"},
               {"d.png", "not an image"}});
  EXPECT_EQ(std::string(ShardDataset::Open({path}, 6).status().message()),
            path + ": b (byte 2048): has no json member (its text: b.json)");
  ShardDataset::Options skip;
  skip.skip_bad_samples = true;
  auto opened = ShardDataset::Open({path}, 6, nullptr, skip);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const ShardDataset& d = **opened;
  ASSERT_EQ(d.size(), 4);
  EXPECT_TRUE(d.Check(0).ok());
  EXPECT_EQ(d.Text(0), "a red circle");
  EXPECT_EQ(std::string(d.Check(1).message()),
            path + ": b (byte 2048): has no json member (its text: b.json)");
  EXPECT_THAT(std::string(d.Check(2).message()), HasSubstr(path + ": c (byte 3072): "));
  EXPECT_EQ(d.ImageCount(1), 0);
  EXPECT_EQ(d.Text(2), "");
  // An image is bad when it is read: the error names the shard, the member and its byte.
  EXPECT_TRUE(d.Check(3).ok());
  EXPECT_THAT(std::string(d.GetImage(3, 0).status().message()),
              HasSubstr(path + ": d.png (byte 6144): not a PNG or JPEG file"));
  EXPECT_TRUE(d.GetImage(0, 0).ok());
  // The word counts are the good samples' texts.
  EXPECT_EQ(d.VocabularyCounts().count("red"), 1u);
}

TEST(ShardDataset, SkippingReadsATruncatedShardUpToItsCut) {
  testing::TempDir dir;
  const std::string path = dir / "cut.tar";
  Write(path, {{"a.json", R"({"caption": "one"})"},
               {"a.png", Png(1)},
               {"b.json", R"({"caption": "two"})"},
               {"b.png", Png(2)},
               {"c.json", R"({"caption": "three"})"},
               {"c.png", Png(3)}});
  // Cut inside b.png's data: a and b's text stay whole.
  std::filesystem::resize_file(path, 3584 + 50);
  EXPECT_EQ(ShardDataset::Open({path}, 6).status().code(), absl::StatusCode::kDataLoss);
  ShardDataset::Options skip;
  skip.skip_bad_samples = true;
  auto opened = ShardDataset::Open({path}, 6, nullptr, skip);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const ShardDataset& d = **opened;
  ASSERT_EQ(d.size(), 2);
  EXPECT_TRUE(d.GetImage(0, 0).ok());
  EXPECT_TRUE(d.Check(1).ok());
  EXPECT_EQ(d.Text(1), "two");
  const absl::Status cut = d.GetImage(1, 0).status();
  EXPECT_EQ(cut.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(cut.message()), HasSubstr(path + ": cannot read member b.png"));
}

// A shard named by a pattern that is missing holds no sample when skipping (it has no index to
// count them): the others train, and the sampler walks them past the empty shard.
TEST(ShardDataset, SkippingAMissingShardWithoutAnIndexLeavesTheOthers) {
  testing::TempDir dir;
  Write(dir / "s-0.tar", {{"a.json", R"({"caption": "one"})"}, {"a.png", Png(1)}});
  Write(dir / "s-2.tar", {{"b.json", R"({"caption": "two"})"}, {"b.png", Png(2)}});
  EXPECT_EQ(ShardDataset::Open({dir / "s-{0..2}.tar"}, 6).status().code(),
            absl::StatusCode::kNotFound);
  ShardDataset::Options skip;
  skip.skip_bad_samples = true;
  auto opened = ShardDataset::Open({dir / "s-{0..2}.tar"}, 6, nullptr, skip);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const ShardDataset& d = **opened;
  EXPECT_THAT(d.ShardSizes(), ElementsAre(1, 0, 1));
  EXPECT_EQ(d.Text(1), "two");
  Sampler sampler(SampleOrder{d.ShardSizes(), 1, {}}, 3);
  std::vector<int64_t> epoch = sampler.Next(2);
  std::sort(epoch.begin(), epoch.end());
  EXPECT_THAT(epoch, ElementsAre(0, 1));
}

}  // namespace
}  // namespace tandem::data
