// Tests for data/sampler.cc: permutations, determinism, epoch boundaries, Seek, and the windowed
// order of sharded data.
#include "data/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
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

// Shards of 10, 0, 7, 10 and 3 samples (indices 0-9, none, 10-16, 17-26, 27-29).
SampleOrder Shards(int64_t window) { return SampleOrder{{10, 0, 7, 10, 3}, window, {}}; }

int ShardOf(int64_t index) {
  const std::vector<int64_t> ends = {10, 10, 17, 27, 30};
  return static_cast<int>(std::upper_bound(ends.begin(), ends.end(), index) - ends.begin());
}

TEST(SampleOrder, IsShuffledWholeWhenTheWindowHoldsEverything) {
  EXPECT_EQ(Shards(0).size(), 30);
  EXPECT_TRUE(Shards(0).whole());
  EXPECT_TRUE(Shards(30).whole());
  EXPECT_FALSE(Shards(29).whole());
  // Whole, the shards do not matter: the order is the permutation of all samples.
  Sampler sampler(Shards(30), 5);
  EXPECT_EQ(sampler.Next(30), EpochPermutation(30, 5, 0));
}

TEST(Sampler, WindowedEpochsVisitEverySampleOnceInAnOrderOfTheirOwn) {
  Sampler sampler(Shards(8), 3);
  std::vector<int64_t> identity(30);
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    epochs.push_back(sampler.Next(30));
    std::vector<int64_t> sorted = epochs.back();
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity) << "epoch " << e;
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  Sampler again(Shards(8), 3);
  EXPECT_EQ(again.Next(30), epochs[0]);
  Sampler other_seed(Shards(8), 4);
  EXPECT_NE(other_seed.Next(30), epochs[0]);
}

TEST(Sampler, AWindowDrawsFromConsecutiveShardsOfTheEpochsStream) {
  // Windows of 10 over shards of 10, 7, 10 and 3: each window covers 10 consecutive samples of the
  // stream, so at most two shards, and the four windows together cover each shard whole.
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Sampler sampler(Shards(10), seed);
    std::vector<int> first_window_shard;
    for (int w = 0; w < 3; ++w) {
      std::set<int> shards;
      for (int64_t index : sampler.Next(10)) shards.insert(ShardOf(index));
      EXPECT_LE(shards.size(), 2u) << "seed " << seed << " window " << w;
    }
  }
  // Mixed inside a window: the first half of a window of two whole shards interleaves them
  // rather than reading one shard after the other.
  Sampler sampler(SampleOrder{{10, 10, 10}, 20, {}}, 1);
  std::set<int64_t> shards;
  for (int64_t index : sampler.Next(10)) shards.insert(index / 10);
  EXPECT_EQ(shards.size(), 2u);
}

TEST(Sampler, WindowedOrderIsPinnedForSeedZero) {
  // Guards the sharded data order against accidental change.
  Sampler sampler(SampleOrder{{3, 3, 2}, 4, {}}, 0);
  // Shards 2 then 1 then 0 in the stream: a window of shard 2 and half of shard 1, then the rest.
  EXPECT_THAT(sampler.Next(8), ElementsAre(6, 3, 7, 4, 0, 5, 2, 1));
}

TEST(Sampler, SeekInsideAWindowRestoresTheWindowedSequence) {
  Sampler original(Shards(8), 11);
  original.Next(37);  // epoch 1, inside its second window
  const Sampler::Position saved = original.position();
  EXPECT_EQ(saved, (Sampler::Position{1, 7}));
  const std::vector<int64_t> continued = original.Next(40);
  Sampler restored(Shards(8), 11);
  restored.Next(3);
  restored.Seek(saved);
  EXPECT_EQ(restored.Next(40), continued);
}

TEST(MixtureCounts, EachSourceStaysWithinOneSampleOfItsShare) {
  const std::vector<double> weights = {3, 1, 0.5};
  std::vector<int64_t> counts(3, 0);
  for (int64_t n = 0; n < 2000; ++n) {
    ++counts[NextMixtureSource(weights, counts, n)];
    for (size_t s = 0; s < 3; ++s) {
      const double share = weights[s] / 4.5 * static_cast<double>(n + 1);
      ASSERT_LT(std::abs(static_cast<double>(counts[s]) - share), 1.0)
          << "source " << s << " after " << n + 1;
    }
  }
  EXPECT_EQ(MixtureCounts(weights, 2000), counts);
  EXPECT_EQ(MixtureCounts(weights, 9), (std::vector<int64_t>{6, 2, 1}));
}

// Two sources of 5 and 3 samples (indices 0-4, 5-7) weighted 1:1: each draw alternates, each
// source walks its own permutations (source 1, smaller, goes through more epochs), and a seek to
// a saved position gives the same draws.
TEST(Sampler, AMixtureDrawsEachSourceInProportionInItsOwnOrder) {
  const SampleOrder order{{}, 0, {{1, SampleOrder{{5}, 0, {}}}, {1, SampleOrder{{3}, 0, {}}}}};
  EXPECT_EQ(order.size(), 8);
  EXPECT_EQ(order.ShardEnd(6), 8);
  Sampler sampler(order, 4);
  const std::vector<int64_t> drawn = sampler.Next(30);
  EXPECT_EQ(sampler.position(), (Sampler::Position{0, 30}));
  std::vector<int64_t> first, second;
  for (size_t k = 0; k < drawn.size(); ++k) {
    (k % 2 == 0 ? first : second).push_back(drawn[k]);
    EXPECT_EQ(drawn[k] < 5, k % 2 == 0) << k;
  }
  // Each epoch of a source is a permutation of its samples.
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> epoch(first.begin() + 5 * e, first.begin() + 5 * e + 5);
    std::sort(epoch.begin(), epoch.end());
    EXPECT_EQ(epoch, (std::vector<int64_t>{0, 1, 2, 3, 4})) << "epoch " << e;
  }
  for (int e = 0; e < 5; ++e) {
    std::vector<int64_t> epoch(second.begin() + 3 * e, second.begin() + 3 * e + 3);
    std::sort(epoch.begin(), epoch.end());
    EXPECT_EQ(epoch, (std::vector<int64_t>{5, 6, 7})) << "epoch " << e;
  }
  Sampler resumed(order, 4);
  resumed.Seek({0, 13});
  EXPECT_EQ(resumed.Next(17), std::vector<int64_t>(drawn.begin() + 13, drawn.end()));
  resumed.Seek({1, 5});  // an epoch counts as size() draws: draw 13 again
  EXPECT_EQ(resumed.Next(1)[0], drawn[13]);
}

}  // namespace
}  // namespace tandem::data
