// Tests for data/batch.cc: the layout of images, tokens and lengths, and its errors.
#include "data/batch.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

}  // namespace
}  // namespace tandem::data
