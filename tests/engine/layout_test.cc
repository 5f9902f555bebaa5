#include "engine/layout.h"

#include <gtest/gtest.h>

namespace tandem::engine {
namespace {

ParamSpec Spec(const std::string& name, int64_t numel, int group = -1) {
  return ParamSpec{name, {numel}, numel, group};
}

TEST(Layout, SplitsConsecutiveParametersByBucketSizeAndPadsUnevenUnits) {
  auto layout = Layout::Build({Spec("a", 5), Spec("b", 4), Spec("c", 7)}, /*world_size=*/3,
                              /*bucket_elements=*/10);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->units().size(), 2u);  // a+b = 9 fits, c starts a new unit
  const Unit& first = layout->units()[0];
  EXPECT_EQ(first.numel, 9);
  EXPECT_EQ(first.padded, 9);
  EXPECT_EQ(first.shard, 3);
  const Unit& second = layout->units()[1];
  EXPECT_EQ(second.numel, 7);
  EXPECT_EQ(second.padded, 9);  // 7 rounded up to a multiple of 3
  EXPECT_EQ(second.shard, 3);
  EXPECT_EQ(second.full_offset, 9);
  EXPECT_EQ(second.shard_offset, 3);
  EXPECT_EQ(layout->full_elements(), 18);
  EXPECT_EQ(layout->shard_elements(), 6);
  EXPECT_EQ(layout->num_elements(), 16);
  EXPECT_EQ(layout->slots()[1].unit, 0);
  EXPECT_EQ(layout->slots()[1].offset, 5);
  EXPECT_EQ(layout->slots()[2].unit, 1);
  EXPECT_EQ(layout->slots()[2].offset, 0);
}

TEST(Layout, GivesEachBlockItsOwnUnitRegardlessOfBucketSize) {
  auto layout = Layout::Build({Spec("stem", 3), Spec("b0.w", 8, 0), Spec("b0.b", 2, 0),
                               Spec("b1.w", 8, 1), Spec("head", 3)},
                              2, /*bucket_elements=*/4);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->units().size(), 4u);
  EXPECT_EQ(layout->units()[1].group, 0);
  EXPECT_EQ(layout->units()[1].numel, 10);  // larger than the bucket, still one unit
  EXPECT_EQ(layout->units()[2].group, 1);
  EXPECT_EQ(layout->units()[3].group, -1);
}

TEST(Layout, RejectsBlockWhoseParametersAreNotConsecutive) {
  auto layout = Layout::Build({Spec("b0.w", 4, 0), Spec("x", 2), Spec("b0.b", 2, 0)}, 2, 100);
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("not consecutive (at b0.b)"), std::string::npos)
      << layout.status();
}

TEST(Layout, NoParametersGiveNoUnits) {
  // A model whose parameters are all frozen has nothing to lay out.
  auto layout = Layout::Build({}, 2, 100);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_TRUE(layout->units().empty());
  EXPECT_EQ(layout->num_elements(), 0);
  EXPECT_EQ(layout->full_elements(), 0);
  EXPECT_EQ(layout->shard_elements(), 0);
}

}  // namespace
}  // namespace tandem::engine
