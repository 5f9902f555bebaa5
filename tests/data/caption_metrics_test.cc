// Tests for data/caption_metrics.cc against the definition in its header.
#include "data/caption_metrics.h"

#include <vector>

#include "data/tokenizer.h"
#include "gtest/gtest.h"

namespace tandem::data {
namespace {

// A single sample's score.
CaptionScore Score(const std::vector<int64_t>& generated, const std::vector<int64_t>& reference) {
  CaptionScore score;
  Accumulate(generated, reference, &score);
  return score;
}

TEST(CaptionMetrics, ExactCaptionScoresEveryWordAndTheEnd) {
  const CaptionScore score = Score({4, 5, 6}, {4, 5, 6});
  EXPECT_EQ(score.samples, 1);
  EXPECT_EQ(score.exact, 1);
  EXPECT_EQ(score.tokens_correct, 4);
  EXPECT_EQ(score.tokens_total, 4);
  EXPECT_EQ(score.exact_match(), 1.0);
  EXPECT_EQ(score.token_accuracy(), 1.0);
}

TEST(CaptionMetrics, OneWrongWordKeepsTheOthersAndTheEnd) {
  const CaptionScore score = Score({4, 9, 6}, {4, 5, 6});
  EXPECT_EQ(score.exact, 0);
  EXPECT_EQ(score.tokens_correct, 3);
  EXPECT_EQ(score.tokens_total, 4);
}

TEST(CaptionMetrics, RunningOnMissesOnlyTheEnd) {
  const CaptionScore score = Score({4, 5, 6, 6}, {4, 5, 6});
  EXPECT_EQ(score.exact, 0);
  EXPECT_EQ(score.tokens_correct, 3);
}

TEST(CaptionMetrics, StoppingEarlyMissesTheRestAndTheEnd) {
  const CaptionScore score = Score({4}, {4, 5, 6});
  EXPECT_EQ(score.tokens_correct, 1);
  EXPECT_EQ(Score({}, {4, 5, 6}).tokens_correct, 0);
  EXPECT_EQ(Score({}, {}).tokens_correct, 1);  // an empty reference: stopping at once is right
  EXPECT_EQ(Score({}, {}).exact, 1);
}

// An end token's id is the tokenizer's: id 2 is the word tokenizer's <eos> but an ordinary token
// of Qwen2 and Llama 3, so nothing is cut here.
TEST(CaptionMetrics, EveryIdCounts) {
  const CaptionScore score = Score({4, 5, Tokenizer::kEos, 7}, {4, 5, Tokenizer::kEos, 8});
  EXPECT_EQ(score.exact, 0);
  EXPECT_EQ(score.tokens_correct, 4);  // 4, 5, 2, and the end after four tokens
  EXPECT_EQ(score.tokens_total, 5);
}

TEST(CaptionMetrics, AccumulatesOverSamplesAndMerges) {
  CaptionScore score;
  Accumulate({4, 5}, {4, 5}, &score);     // 3 of 3, exact
  Accumulate({4, 7, 8}, {4, 5}, &score);  // 1 of 3
  EXPECT_EQ(score.samples, 2);
  EXPECT_EQ(score.exact, 1);
  EXPECT_EQ(score.tokens_correct, 4);
  EXPECT_EQ(score.tokens_total, 6);
  EXPECT_DOUBLE_EQ(score.exact_match(), 0.5);
  EXPECT_DOUBLE_EQ(score.token_accuracy(), 4.0 / 6.0);

  CaptionScore other;
  Accumulate({9}, {4}, &other);  // 1 of 2: the word is wrong, but it stopped at the right place
  score += other;
  EXPECT_EQ(score.samples, 3);
  EXPECT_EQ(score.exact, 1);
  EXPECT_EQ(score.tokens_correct, 5);
  EXPECT_EQ(score.tokens_total, 8);
  EXPECT_DOUBLE_EQ(score.token_accuracy(), 5.0 / 8.0);
}

TEST(CaptionMetrics, EmptyScoreReadsZero) {
  const CaptionScore score;
  EXPECT_EQ(score.exact_match(), 0.0);
  EXPECT_EQ(score.token_accuracy(), 0.0);
}

}  // namespace
}  // namespace tandem::data
