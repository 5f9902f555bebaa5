// step/batch_plan.h: who works on what of a micro-batch, for any ratio of vision to LLM replicas.
#include "step/batch_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

namespace tandem::step {
namespace {

using ::testing::ElementsAre;

std::vector<SampleLoad> Loads(const std::vector<int64_t>& images,
                              const std::vector<int64_t>& positions) {
  std::vector<SampleLoad> loads;
  for (size_t i = 0; i < images.size(); ++i) loads.push_back({images[i], positions[i]});
  return loads;
}

// What every plan holds: each sample on one LLM replica, in order there; the exchange order is the
// replicas' samples' images in turn; both groups' blocks tile it.
void ExpectConsistent(const MicroBatchPlan& plan, const std::vector<SampleLoad>& loads) {
  std::vector<int> owners(loads.size(), 0);
  std::vector<PlannedImage> order;
  for (size_t r = 0; r < plan.llm_samples.size(); ++r) {
    const auto& mine = plan.llm_samples[r];
    // In micro-batch order within each row.
    int64_t row_begin = 0;
    for (int64_t end : plan.llm_row_ends[r]) {
      EXPECT_LE(row_begin, end);
      row_begin = end;
    }
    EXPECT_EQ(row_begin, static_cast<int64_t>(mine.size()));
    EXPECT_EQ(plan.llm_images[r].begin, static_cast<int64_t>(order.size()));
    for (int64_t s : mine) {
      ++owners[s];
      for (int64_t k = 0; k < loads[s].images; ++k) order.push_back({s, k});
    }
    EXPECT_EQ(plan.llm_images[r].end, static_cast<int64_t>(order.size()));
  }
  EXPECT_THAT(owners, ::testing::Each(1));
  EXPECT_EQ(plan.images, order);
  int64_t next = 0;
  for (const SampleRange& block : plan.vision_images) {
    EXPECT_EQ(block.begin, next);
    EXPECT_GE(block.end, block.begin);
    next = block.end;
  }
  EXPECT_EQ(next, static_cast<int64_t>(order.size()));
}

// One image a sample without balance: the contiguous blocks of step/ownership.h in both groups.
TEST(PlanMicroBatch, OneImageEachWithoutBalanceIsTheContiguousLayout) {
  for (const auto& [vision, llm] :
       std::vector<std::pair<int, int>>{{2, 3}, {3, 2}, {1, 4}, {4, 1}}) {
    const std::vector<SampleLoad> loads(6, SampleLoad{1, 10});
    const MicroBatchPlan plan = PlanMicroBatch(loads, {llm, vision, /*balance=*/false, 8});
    ExpectConsistent(plan, loads);
    for (int r = 0; r < llm; ++r) {
      const SampleRange block = OwnedSamples(r, llm, 6);
      EXPECT_EQ(plan.llm_samples[r].front(), block.begin);
      EXPECT_EQ(plan.llm_samples[r].back(), block.end - 1);
      EXPECT_EQ(plan.llm_images[r].begin, block.begin);
      EXPECT_EQ(plan.llm_images[r].end, block.end);
    }
    for (int v = 0; v < vision; ++v) {
      EXPECT_EQ(plan.vision_images[v].begin, OwnedSamples(v, vision, 6).begin);
      EXPECT_EQ(plan.vision_images[v].end, OwnedSamples(v, vision, 6).end);
    }
  }
}

// Without balance a vision replica takes the images of its block of samples, however many.
TEST(PlanMicroBatch, WithoutBalanceAVisionReplicaTakesItsSamplesImages) {
  const auto loads = Loads({3, 0, 0, 1, 2, 0}, {9, 9, 9, 9, 9, 9});
  const MicroBatchPlan plan = PlanMicroBatch(loads, {2, 3, false, 8});
  ExpectConsistent(plan, loads);
  // Samples {0, 1} {2, 3} {4, 5}: 3, 1 and 2 images.
  EXPECT_EQ(plan.vision_images[0].begin, 0);
  EXPECT_EQ(plan.vision_images[0].end, 3);
  EXPECT_EQ(plan.vision_images[1].end, 4);
  EXPECT_EQ(plan.vision_images[2].end, 6);
  EXPECT_THAT(plan.llm_samples[0], ElementsAre(0, 1, 2));
  EXPECT_THAT(plan.llm_samples[1], ElementsAre(3, 4, 5));
}

// With balance: LPT on the LLM cost, and images by count whatever the samples hold.
TEST(PlanMicroBatch, BalanceSpreadsSamplesByCostAndImagesByCount) {
  // Costs fall with positions: sample 2 (400), 0 (300), 4 (200), 1 (100), 3 (100), 5 (50).
  const auto loads = Loads({4, 0, 2, 0, 1, 1}, {300, 100, 400, 100, 200, 50});
  const MicroBatchPlan plan = PlanMicroBatch(loads, {2, 3, true, 64});
  ExpectConsistent(plan, loads);
  // LPT: 2 -> r0; 0 -> r1; 4 -> r1 (lighter); 1 -> r0; 3 -> r1; 5 -> r0.
  EXPECT_THAT(plan.llm_samples[0], ElementsAre(1, 2, 5));
  EXPECT_THAT(plan.llm_samples[1], ElementsAre(0, 3, 4));
  // Exchange order: r0's images (sample 2's two, sample 5's one), then r1's (0's four, 4's one).
  EXPECT_THAT(plan.images, ElementsAre(PlannedImage{2, 0}, PlannedImage{2, 1}, PlannedImage{5, 0},
                                       PlannedImage{0, 0}, PlannedImage{0, 1}, PlannedImage{0, 2},
                                       PlannedImage{0, 3}, PlannedImage{4, 0}));
  // 8 images over 3 vision replicas: 3, 3, 2.
  EXPECT_EQ(plan.vision_images[0].size(), 3);
  EXPECT_EQ(plan.vision_images[1].size(), 3);
  EXPECT_EQ(plan.vision_images[2].size(), 2);
  // Vision replica 0 sends 3 images to LLM replica 0; replica 1 sends to both.
  const auto overlaps = ImageOverlaps(plan.vision_images[1], plan.llm_images);
  ASSERT_EQ(overlaps.size(), 1u);
  EXPECT_EQ(overlaps[0].first, 1);
  const auto from_llm = ImageOverlaps(plan.llm_images[1], plan.vision_images);
  ASSERT_EQ(from_llm.size(), 2u);
  EXPECT_EQ(from_llm[0].second.size() + from_llm[1].second.size(), 5);
}

// Text only: no image anywhere, and every replica of both groups still has a (possibly empty)
// block; every LLM replica gets a sample while there are enough.
TEST(PlanMicroBatch, TextOnlyMicroBatchesLeaveTheVisionReplicasEmpty) {
  const auto loads = Loads({0, 0, 0}, {5, 50, 500});
  for (bool balance : {false, true}) {
    const MicroBatchPlan plan = PlanMicroBatch(loads, {3, 2, balance, 16});
    ExpectConsistent(plan, loads);
    EXPECT_TRUE(plan.images.empty());
    for (const auto& samples : plan.llm_samples) EXPECT_EQ(samples.size(), 1u);
    for (const auto& block : plan.vision_images) EXPECT_TRUE(block.empty());
    EXPECT_TRUE(ImageOverlaps(plan.llm_images[2], plan.vision_images).empty());
  }
}

// Packing: as many rows as first fit decreasing needs, the samples spread over them longest first
// to the least filled row, the replica's samples listed row by row, and its images in that order.
TEST(PlanMicroBatch, PackingListsEachReplicasSamplesRowByRow) {
  const auto loads = Loads({1, 0, 2, 0, 1}, {50, 70, 30, 60, 20});
  const MicroBatchPlan plan = PlanMicroBatch(loads, {1, 2, false, 8, /*pack_tokens=*/100});
  ExpectConsistent(plan, loads);
  // First fit needs 3 rows (70 + 30, 60 + 20, 50); spread evenly: 70 (1) to row 0, 60 (3) to row
  // 1, 50 (0) to row 2, 30 (2) to row 2 (50), 20 (4) to row 1 (60): rows of 70, 80 and 80.
  EXPECT_THAT(plan.llm_samples[0], ElementsAre(1, 3, 4, 0, 2));
  EXPECT_THAT(plan.llm_row_ends[0], ElementsAre(1, 3, 5));
  EXPECT_THAT(plan.images, ElementsAre(PlannedImage{4, 0}, PlannedImage{0, 0}, PlannedImage{2, 0},
                                       PlannedImage{2, 1}));
  EXPECT_EQ(plan.vision_images[0].size(), 2);
  EXPECT_EQ(plan.vision_images[1].size(), 2);
  // Unpacked, a sample is a row.
  const MicroBatchPlan rows = PlanMicroBatch(loads, {2, 1, false, 8});
  EXPECT_THAT(rows.llm_row_ends[0], ElementsAre(1, 2, 3));
  EXPECT_THAT(rows.llm_row_ends[1], ElementsAre(1, 2));
}

// Packed, a replica costs its rows: rows x L x (12 hidden + 2 L), L its longest row. LPT on the
// samples' own costs gives the 48 alone (one row of 48: 5184) and 32 + 16 + 8 + 8 to the other (one
// row of 64: 8960); moving an 8 evens them at one row of 56 each (6944), the best there is.
TEST(PlanMicroBatch, PackedBalanceEvensTheRowsEachReplicaRuns) {
  const auto loads = Loads({0, 0, 0, 0, 0}, {32, 16, 48, 8, 8});
  const MicroBatchPlan plan = PlanMicroBatch(loads, {2, 1, true, /*hidden=*/1, /*pack_tokens=*/64});
  ExpectConsistent(plan, loads);
  EXPECT_THAT(plan.llm_samples[0], ElementsAre(2, 3));
  EXPECT_THAT(plan.llm_samples[1], ElementsAre(0, 1, 4));
  EXPECT_THAT(plan.llm_row_ends[0], ElementsAre(2));
  EXPECT_THAT(plan.llm_row_ends[1], ElementsAre(3));
  // Unpacked, the same loads keep LPT's split: nothing is packed to even out.
  const MicroBatchPlan unpacked = PlanMicroBatch(loads, {2, 1, true, 1});
  EXPECT_THAT(unpacked.llm_samples[0], ElementsAre(2));
  EXPECT_THAT(unpacked.llm_samples[1], ElementsAre(0, 1, 3, 4));
}

// Random mixes at several ratios: always consistent; balanced LLM loads within the LPT bound
// (the heaviest replica exceeds the mean by at most the largest sample's cost), vision counts
// within one.
TEST(PlanMicroBatch, RandomMixesStayConsistentAndWithinTheirBounds) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int vision = 1 + static_cast<int>(random() % 4);
    const int llm = 1 + static_cast<int>(random() % 4);
    const int samples = llm + static_cast<int>(random() % 12);
    std::vector<SampleLoad> loads;
    for (int i = 0; i < samples; ++i) {
      const int64_t images = static_cast<int64_t>(random() % 5);
      loads.push_back({images, 16 + static_cast<int64_t>(random() % 500) + images * 64});
    }
    const MicroBatchPlan plan = PlanMicroBatch(loads, {llm, vision, true, 32});
    ExpectConsistent(plan, loads);
    const MicroBatchPlan packed = PlanMicroBatch(loads, {llm, vision, true, 32, 2048});
    ExpectConsistent(packed, loads);
    for (int r = 0; r < llm; ++r) {
      int64_t begin = 0;
      for (int64_t end : packed.llm_row_ends[r]) {
        int64_t used = 0;
        for (int64_t i = begin; i < end; ++i) used += loads[packed.llm_samples[r][i]].positions;
        EXPECT_LE(used, 2048);
        begin = end;
      }
      EXPECT_EQ(begin, static_cast<int64_t>(packed.llm_samples[r].size()));
    }
    double total = 0, largest = 0;
    std::vector<double> load(llm, 0.0);
    for (int r = 0; r < llm; ++r) {
      EXPECT_FALSE(plan.llm_samples[r].empty());
      for (int64_t s : plan.llm_samples[r]) load[r] += LlmCost(loads[s].positions, 32);
    }
    for (const auto& l : loads) {
      total += LlmCost(l.positions, 32);
      largest = std::max(largest, LlmCost(l.positions, 32));
    }
    EXPECT_LE(*std::max_element(load.begin(), load.end()), total / llm + largest + 1e-6);
    int64_t low = plan.images.size(), high = 0;
    for (const auto& block : plan.vision_images) {
      low = std::min(low, block.size());
      high = std::max(high, block.size());
    }
    EXPECT_LE(high - low, 1);
  }
}

}  // namespace
}  // namespace tandem::step
