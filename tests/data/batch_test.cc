// Tests for data/batch.cc: the layout of images, tokens and lengths, and its errors.
#include "data/batch.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/worker_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Sample i: a 2 x 2 image filled with i / 10 (plus 0.01 c in channel c) and captions[i]. A sample
// listed in `broken` fails to load; one listed in `odd_size` is 3 x 3.
class FakeDataset : public Dataset {
 public:
  explicit FakeDataset(std::vector<std::string> captions) : captions_(std::move(captions)) {}

  int64_t size() const override { return static_cast<int64_t>(captions_.size()); }
  absl::StatusOr<Example> Get(int64_t index) const override {
    if (index == broken_) return absl::DataLossError(Describe(index) + ": broken");
    Example example;
    const int64_t side = index == odd_size_ ? 3 : 2;
    example.image.height = side;
    example.image.width = side;
    for (int c = 0; c < 3; ++c) {
      for (int64_t p = 0; p < side * side; ++p)
        example.image.pixels.push_back(index / 10.0f + 0.01f * c);
    }
    example.text = captions_[index];
    return example;
  }
  std::string Text(int64_t index) const override { return captions_[index]; }
  std::string Describe(int64_t index) const override { return absl::StrCat("fake #", index); }

  int64_t broken_ = -1;
  int64_t odd_size_ = -1;

 private:
  std::vector<std::string> captions_;
};

TEST(MakeBatch, LaysOutImagesTokensAndLengthsInIndexOrder) {
  const FakeDataset dataset({"red circle", "blue", "red red red"});
  const Tokenizer tokenizer = Tokenizer::Build(AllTexts(dataset));  // red=4, blue=5, circle=6
  absl::StatusOr<Batch> batch = MakeBatch(dataset, {2, 0, 1}, tokenizer, 6);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->size, 3);
  EXPECT_EQ(batch->image_size, 2);
  EXPECT_EQ(batch->text_len, 6);
  EXPECT_THAT(batch->tokens, ElementsAre(1, 4, 4, 4, 2, 0,    // <bos> red red red <eos> <pad>
                                         1, 4, 6, 2, 0, 0,    // <bos> red circle <eos>
                                         1, 5, 2, 0, 0, 0));  // <bos> blue <eos>
  EXPECT_THAT(batch->text_lengths, ElementsAre(5, 4, 3));
  ASSERT_EQ(batch->images.size(), 3u * 3 * 2 * 2);
  // [sample, channel, y, x]: sample 0 is index 2.
  EXPECT_FLOAT_EQ(batch->images[0], 0.2f);
  EXPECT_FLOAT_EQ(batch->images[4], 0.21f);  // sample 0, channel 1
  EXPECT_FLOAT_EQ(batch->images[12], 0.0f);  // sample 1 (index 0), channel 0
  EXPECT_FLOAT_EQ(batch->images[12 + 8 + 3], 0.02f);
  EXPECT_FLOAT_EQ(batch->images[24], 0.1f);  // sample 2 (index 1)
}

TEST(MakeBatch, CaptionLongerThanTextLenNamesSampleAndLengths) {
  const FakeDataset dataset({"a b", "a b c d"});
  const Tokenizer tokenizer = Tokenizer::Build(AllTexts(dataset));
  EXPECT_TRUE(MakeBatch(dataset, {0}, tokenizer, 4).ok());  // exactly fits: <bos> a b <eos>
  absl::StatusOr<Batch> batch = MakeBatch(dataset, {0, 1}, tokenizer, 5);
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(batch.status().message(),
            "fake #1: caption needs 6 tokens with <bos> and <eos>, more than the 5 allowed");
}

TEST(MakeBatch, PropagatesGetErrors) {
  FakeDataset dataset({"a", "b"});
  dataset.broken_ = 1;
  const Tokenizer tokenizer = Tokenizer::Build(AllTexts(dataset));
  absl::StatusOr<Batch> batch = MakeBatch(dataset, {0, 1}, tokenizer, 4);
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(batch.status().message(), "fake #1: broken");
}

TEST(MakeBatch, ImagesOfDifferentSizesAreAnError) {
  FakeDataset dataset({"a", "b"});
  dataset.odd_size_ = 1;
  const Tokenizer tokenizer = Tokenizer::Build(AllTexts(dataset));
  absl::StatusOr<Batch> batch = MakeBatch(dataset, {0, 1}, tokenizer, 4);
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(batch.status().message(),
              HasSubstr("fake #1: image is 3 x 3 x 3, the batch needs 3 x 2 x 2"));
}

TEST(MakeBatch, NoIndicesOrNoRoomForBosAndEosIsAnError) {
  const FakeDataset dataset({"a"});
  const Tokenizer tokenizer = Tokenizer::Build(AllTexts(dataset));
  EXPECT_EQ(MakeBatch(dataset, {}, tokenizer, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeBatch(dataset, {0}, tokenizer, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A FakeDataset whose sample i holds images[i] images; image k of sample i is filled with
// i / 10 + k / 100.
class MultiImageDataset : public FakeDataset {
 public:
  MultiImageDataset(std::vector<std::string> captions, std::vector<int64_t> images)
      : FakeDataset(std::move(captions)), images_(std::move(images)) {}
  int64_t ImageCount(int64_t index) const override { return images_[index]; }
  absl::StatusOr<Image> GetImage(int64_t index, int64_t k) const override {
    if (k < 0 || k >= images_[index])
      return absl::OutOfRangeError(absl::StrCat("fake #", index, ": no image ", k));
    Image image;
    image.height = image.width = 2;
    image.pixels.assign(3 * 4, index / 10.0f + k / 100.0f);
    return image;
  }

 private:
  std::vector<int64_t> images_;
};

TEST(MakeImagesBatch, ReadsTheImagesInTheOrderAsked) {
  const MultiImageDataset dataset({"a", "b", "c"}, {2, 0, 3});
  absl::StatusOr<Batch> batch = MakeImagesBatch(dataset, {{2, 1}, {0, 0}, {2, 2}});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->size, 3);
  EXPECT_EQ(batch->image_size, 2);
  ASSERT_EQ(batch->images.size(), 3u * 12);
  EXPECT_FLOAT_EQ(batch->images[0], 0.21f);
  EXPECT_FLOAT_EQ(batch->images[12], 0.0f);
  EXPECT_FLOAT_EQ(batch->images[24], 0.22f);
  absl::StatusOr<Batch> none = MakeImagesBatch(dataset, {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->size, 0);
  EXPECT_EQ(MakeImagesBatch(dataset, {{1, 0}}).status().code(), absl::StatusCode::kOutOfRange);
}

// Read by a pool's threads, a batch is the same, and of several errors the first ref's is given.
TEST(MakeImagesBatch, APoolReadsTheSameBatch) {
  const MultiImageDataset dataset({"a", "b", "c", "d"}, {2, 1, 3, 2});
  const std::vector<ImageRef> refs = {{2, 1}, {0, 0}, {2, 2}, {3, 1}, {1, 0}, {0, 1}, {3, 0}};
  WorkerPool pool(3);
  absl::StatusOr<Batch> alone = MakeImagesBatch(dataset, refs);
  absl::StatusOr<Batch> pooled = MakeImagesBatch(dataset, refs, &pool);
  ASSERT_TRUE(alone.ok() && pooled.ok());
  EXPECT_EQ(pooled->images, alone->images);
  EXPECT_EQ(pooled->size, 7);
  const absl::Status first = MakeImagesBatch(dataset, {{0, 0}, {1, 5}, {2, 7}}, &pool).status();
  EXPECT_EQ(first.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(first.message(), "fake #1: no image 5");
}

// Asked for the failures (data.on_bad_sample "skip"), a batch reports each ref's image error and
// comes back empty; a batch of good images comes back whole.
TEST(MakeImagesBatch, FailuresAreReportedForEachRefOfABadImage) {
  const MultiImageDataset dataset({"a", "b", "c"}, {2, 1, 3});
  WorkerPool pool(2);
  std::vector<absl::Status> failures;
  absl::StatusOr<Batch> bad =
      MakeImagesBatch(dataset, {{0, 0}, {1, 4}, {2, 1}, {2, 9}}, &pool, &failures);
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_EQ(bad->size, 0);
  ASSERT_EQ(failures.size(), 4u);
  EXPECT_TRUE(failures[0].ok());
  EXPECT_EQ(failures[1].message(), "fake #1: no image 4");
  EXPECT_TRUE(failures[2].ok());
  EXPECT_EQ(failures[3].message(), "fake #2: no image 9");
  absl::StatusOr<Batch> good = MakeImagesBatch(dataset, {{0, 1}, {2, 0}}, &pool, &failures);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good->size, 2);
  EXPECT_THAT(failures, ::testing::Each(absl::OkStatus()));
}

// The word tokenizer's caption layout puts one image ahead of each row: a sample with none or
// several is refused, naming it; any layout refuses more than max_images.
TEST(MakeTokenBatch, TheWordsLayoutReadsExactlyOneImageASample) {
  const MultiImageDataset dataset({"a b", "a", "b"}, {1, 2, 0});
  const TextCodec codec = TextCodec::Words(Tokenizer::Build(AllTexts(dataset)));
  absl::StatusOr<TokenBatch> one = MakeTokenBatch(dataset, {0}, codec, 8, /*max_images=*/2);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->length, 8);  // no image positions among the tokens in this layout
  const absl::Status two = MakeTokenBatch(dataset, {0, 1}, codec, 8, 2).status();
  EXPECT_EQ(two.message(),
            "fake #1: has 2 images; a caption reads exactly one image, as a prefix of its row "
            "(conversations place any number at their <image> marks)");
  EXPECT_THAT(std::string(MakePromptBatch(dataset, {2}, codec, 8).status().message()),
              HasSubstr("fake #2: has 0 images;"));
}

// Packed rows: samples one after another, positions restarting, segments numbering them, each
// sample's first label ignored, padding counted.
TEST(PackTokenBatch, LaysSamplesOneAfterAnotherAndCountsThePadding) {
  TokenBatch batch;
  batch.size = 3;
  batch.length = 4;
  batch.tokens = {5, 6, 7, 0, /**/ 8, 9, 0, 0, /**/ 1, 2, 3, 4};
  batch.labels = {5, 6, 7, -100, /**/ 8, 9, -100, -100, /**/ 1, 2, 3, 4};
  batch.lengths = {3, 2, 4};
  absl::StatusOr<PackedBatch> packed = PackTokenBatch(batch, {{2, 1}, {0}}, 6, /*pad_id=*/0);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed->rows, 2);
  EXPECT_THAT(packed->tokens, ElementsAre(1, 2, 3, 4, 8, 9, 5, 6, 7, 0, 0, 0));
  EXPECT_THAT(packed->labels, ElementsAre(-100, 2, 3, 4, -100, 9, -100, 6, 7, -100, -100, -100));
  EXPECT_THAT(packed->positions, ElementsAre(0, 1, 2, 3, 0, 1, 0, 1, 2, 0, 0, 0));
  EXPECT_THAT(packed->segments, ElementsAre(0, 0, 0, 0, 1, 1, 0, 0, 0, -1, -1, -1));
  EXPECT_EQ(packed->padding, 3);
  EXPECT_EQ(PackTokenBatch(batch, {{2, 0}}, 6, 0).status().message(),
            "packed row 0 needs more than its 6 positions at sample 0");
}

}  // namespace
}  // namespace tandem::data
