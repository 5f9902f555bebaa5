// Tests for data/sampler.cc: permutations, determinism, epoch boundaries and Seek.
#include "data/sampler.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::data {
namespace {

using ::testing::ElementsAre;

std::vector<int64_t> Concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(EpochPermutation, IsAPermutationFixedBySeedAndEpoch) {
  const std::vector<int64_t> order = EpochPermutation(1000, 42, 3);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(order, identity);
  EXPECT_EQ(EpochPermutation(1000, 42, 3), order);
  EXPECT_NE(EpochPermutation(1000, 42, 4), order);
  EXPECT_NE(EpochPermutation(1000, 43, 3), order);
  EXPECT_TRUE(EpochPermutation(0, 1, 0).empty());
  EXPECT_THAT(EpochPermutation(1, 1, 0), ElementsAre(0));
}

TEST(EpochPermutation, IsPinnedForSeedZero) {
  // Guards the data order against accidental change (it depends on SplitMix64 alone).
  EXPECT_THAT(EpochPermutation(8, 0, 0), ElementsAre(2, 6, 4, 0, 1, 5, 3, 7));
}

TEST(Sampler, WalksEpochPermutationsAcrossTheBoundary) {
  Sampler sampler(5, 9);
  EXPECT_EQ(sampler.position(), (Sampler::Position{0, 0}));
  const std::vector<int64_t> first = sampler.Next(3);
  const std::vector<int64_t> second = sampler.Next(9);  // 2 of epoch 0, 5 of epoch 1, 2 of epoch 2
  EXPECT_EQ(sampler.position(), (Sampler::Position{2, 2}));
  const std::vector<int64_t> expected = Concat(
      Concat(EpochPermutation(5, 9, 0), EpochPermutation(5, 9, 1)), EpochPermutation(5, 9, 2));
  EXPECT_EQ(Concat(first, second), std::vector<int64_t>(expected.begin(), expected.begin() + 12));
}

TEST(Sampler, EndingAnEpochExactlyMovesToTheNext) {
  Sampler sampler(4, 1);
  sampler.Next(4);
  EXPECT_EQ(sampler.position(), (Sampler::Position{1, 0}));
  EXPECT_TRUE(sampler.Next(0).empty());
}

TEST(Sampler, SeekRestoresTheExactSequenceAcrossAnEpochBoundary) {
  Sampler original(7, 123);
  original.Next(5);
  const Sampler::Position saved = original.position();  // {0, 5}
  const std::vector<int64_t> continued = original.Next(20);

  Sampler restored(7, 123);
  restored.Next(11);  // somewhere else entirely
  restored.Seek(saved);
  EXPECT_EQ(restored.position(), saved);
  EXPECT_EQ(restored.Next(20), continued);
  EXPECT_EQ(restored.position(), original.position());
}

TEST(Sampler, SeekNormalisesAnOffsetPastTheEnd) {
  Sampler sampler(4, 2);
  sampler.Seek({1, 9});
  EXPECT_EQ(sampler.position(), (Sampler::Position{3, 1}));
  EXPECT_EQ(sampler.Next(1)[0], EpochPermutation(4, 2, 3)[1]);
}

}  // namespace
}  // namespace tandem::data
