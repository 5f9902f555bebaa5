#include "coordinator/laggards.h"

#include <gtest/gtest.h>

namespace tandem::coordinator {
namespace {

TEST(LaggardsTest, NamesEachRankBehindItsGroupWithTheCollectiveItMissed) {
  const std::vector<RankProgress> ranks = {
      {"vision", 0, "vision-0 (10.0.0.5:7071)", 12},
      {"llm", 0, "llm-0 (10.0.0.6:7071)", 42},
      {"llm", 1, "llm-1 (10.0.0.7:7071)", 41},
      {"llm", 2, "llm-2 (10.0.0.8:7071)", 42},
  };
  EXPECT_EQ(DescribeLaggards(ranks),
            "llm rank 1 (llm-1 (10.0.0.7:7071)) did not enter collective #42 of group llm (its "
            "last: #41)");
}

TEST(LaggardsTest, EveryRankBehindIsNamedAndGroupsAreSeparate) {
  const std::vector<RankProgress> ranks = {
      {"vision", 0, "vision-0", 7}, {"vision", 1, "vision-1", 5}, {"llm", 0, "llm-0", 3},
      {"llm", 1, "llm-1", 2},       {"llm", 2, "llm-2", 1},
  };
  EXPECT_EQ(DescribeLaggards(ranks),
            "vision rank 1 (vision-1) did not enter collective #7 of group vision (its last: #5); "
            "llm rank 1 (llm-1) did not enter collective #3 of group llm (its last: #2); "
            "llm rank 2 (llm-2) did not enter collective #3 of group llm (its last: #1)");
}

TEST(LaggardsTest, NothingWhenEveryGroupIsLevel) {
  EXPECT_EQ(DescribeLaggards(
                {{"vision", 0, "vision-0", 4}, {"llm", 0, "llm-0", 9}, {"llm", 1, "llm-1", 9}}),
            "");
  EXPECT_EQ(DescribeLaggards({}), "");
}

}  // namespace
}  // namespace tandem::coordinator
