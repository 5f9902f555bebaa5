// Tests for data/random.h: SplitMix64 matches the reference implementation, and the helpers stay
// in range.
#include "data/random.h"

#include <set>

#include "gtest/gtest.h"

namespace tandem::data {
namespace {

TEST(Rng, MatchesReferenceSplitMix64) {
  // splitmix64.c (Vigna) with x = 0.
  Rng rng(0);
  EXPECT_EQ(rng.Next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.Next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(rng.Next(), 0x06c45d188009454fULL);
}

TEST(Rng, UniformAndBelowStayInRange) {
  Rng rng(17);
  std::set<uint64_t> seen;
  for (int i = 0; i < 10000; ++i) {
    const double u = rng.Uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
    const uint64_t k = rng.Below(7);
    EXPECT_LT(k, 7u);
    seen.insert(k);
  }
  EXPECT_EQ(seen.size(), 7u);
}

TEST(HashKey, DependsOnEveryWordAndItsOrder) {
  EXPECT_EQ(HashKey({1, 2, 3}), HashKey({1, 2, 3}));
  EXPECT_NE(HashKey({1, 2, 3}), HashKey({1, 2, 4}));
  EXPECT_NE(HashKey({1, 2, 3}), HashKey({2, 1, 3}));
  EXPECT_NE(HashKey({0}), HashKey({0, 0}));
}

}  // namespace
}  // namespace tandem::data
