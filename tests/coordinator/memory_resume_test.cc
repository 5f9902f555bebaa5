// coordinator/memory_resume.h: a restart's plan from what the actors hold of a job's snapshots.
#include "coordinator/memory_resume.h"

#include <gtest/gtest.h>

#include <vector>

namespace tandem::coordinator {
namespace {

// Rank `rank` of `role` in groups of `vision` and `llm` ranks, holding its own snapshots of
// `own_steps` and copies of the other group's ranks.
SnapshotHoldings Held(Role role, int rank, int vision, int llm, std::vector<int64_t> own_steps,
                      std::map<int, int64_t> copies) {
  SnapshotHoldings held;
  held.holds = true;
  held.role = role;
  held.rank = rank;
  held.group_size = role == Role::kVision ? vision : llm;
  held.peer_group_size = role == Role::kVision ? llm : vision;
  held.own_steps = std::move(own_steps);
  held.copies = std::move(copies);
  return held;
}

// 2 vision and 3 LLM ranks after snapshots at steps 2 and 4 (vision v's buddy is LLM v mod 3, LLM
// l's vision l mod 2): vision rank 0 holds LLM ranks 0 and 2's copies, vision 1 LLM 1's, LLM 0
// vision 0's, LLM 1 vision 1's.
std::vector<SnapshotHoldings> Vision() {
  return {Held(Role::kVision, 0, 2, 3, {2, 4}, {{0, 4}, {2, 4}}),
          Held(Role::kVision, 1, 2, 3, {2, 4}, {{1, 4}})};
}
std::vector<SnapshotHoldings> Llm() {
  return {Held(Role::kLlm, 0, 2, 3, {2, 4}, {{0, 4}}), Held(Role::kLlm, 1, 2, 3, {2, 4}, {{1, 4}}),
          Held(Role::kLlm, 2, 2, 3, {2, 4}, {})};
}

TEST(MemoryResume, EveryActorBackKeepsItsRankAndRestoresItsOwnNewestSnapshot) {
  const std::optional<MemoryResumePlan> plan = PlanMemoryResume(Vision(), Llm(), 0, 10);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->step, 4);
  EXPECT_EQ(plan->vision_ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan->llm_ranks, (std::vector<int>{0, 1, 2}));
  for (const MemoryRestore& restore : plan->vision) EXPECT_EQ(restore, (MemoryRestore{4, -1, {}}));
  for (const MemoryRestore& restore : plan->llm) EXPECT_EQ(restore, (MemoryRestore{4, -1, {}}));
  EXPECT_EQ(plan->copies, "");
}

// LLM rank 2's actor is gone; its place goes to a newcomer (listed first: the order actors came in
// does not matter), which receives the copy vision rank 0 held; the others keep their ranks.
TEST(MemoryResume, ALostRanksPlaceGoesToANewcomerThatReceivesItsBuddysCopy) {
  std::vector<SnapshotHoldings> llm = Llm();
  llm[2] = SnapshotHoldings{};  // a spare, or the restarted process
  std::swap(llm[0], llm[2]);
  const std::optional<MemoryResumePlan> plan = PlanMemoryResume(Vision(), llm, 2, 10);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->step, 4);
  EXPECT_EQ(plan->llm_ranks, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(plan->llm[0], (MemoryRestore{4, 0, {}}));  // from vision rank 0
  EXPECT_EQ(plan->llm[1], (MemoryRestore{4, -1, {}}));
  EXPECT_EQ(plan->llm[2], (MemoryRestore{4, -1, {}}));
  EXPECT_EQ(plan->vision[0], (MemoryRestore{4, -1, {2}}));  // sends LLM rank 2 its copy
  EXPECT_EQ(plan->vision[1], (MemoryRestore{4, -1, {}}));
  EXPECT_EQ(plan->copies, "llm rank 2 from vision rank 0's copy");
}

// Two ranks of one group lost at once (LLM 0 and 2, whose copies vision rank 0 holds): both places
// go to newcomers, and vision rank 0 sends both copies.
TEST(MemoryResume, TwoRanksOfAGroupLostAtOnceAreBothRestoredFromTheirBuddysCopies) {
  std::vector<SnapshotHoldings> llm = Llm();
  llm[0] = SnapshotHoldings{};
  llm[2] = SnapshotHoldings{};
  const std::optional<MemoryResumePlan> plan = PlanMemoryResume(Vision(), llm, 0, 10);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->step, 4);
  EXPECT_EQ(plan->llm_ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plan->llm[0], (MemoryRestore{4, 0, {}}));
  EXPECT_EQ(plan->llm[2], (MemoryRestore{4, 0, {}}));
  EXPECT_EQ(plan->vision[0], (MemoryRestore{4, -1, {0, 2}}));
  EXPECT_EQ(plan->copies,
            "llm rank 0 from vision rank 0's copy, llm rank 2 from vision rank 0's copy");
}

// Step 4's copy of a lost rank never arrived (its buddy has step 2's): every rank goes back to step
// 2, which all kept.
TEST(MemoryResume, ACopyThatDidNotArriveTakesEveryRankBackToTheSnapshotBefore) {
  std::vector<SnapshotHoldings> vision = Vision();
  std::vector<SnapshotHoldings> llm = Llm();
  vision[1] = SnapshotHoldings{};
  llm[1].copies = {{1, 2}};
  const std::optional<MemoryResumePlan> plan = PlanMemoryResume(vision, llm, 0, 10);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->step, 2);
  EXPECT_EQ(plan->vision[1], (MemoryRestore{2, 1, {}}));
  EXPECT_EQ(plan->llm[1], (MemoryRestore{2, -1, {1}}));
}

// No plan: a rank and its buddy both lost; a step older than the last checkpoint; other group
// sizes; nothing held at all. A step newer than the run's last record is passed over.
TEST(MemoryResume, WithoutEveryRanksStateTheRestartResumesFromDisk) {
  std::vector<SnapshotHoldings> vision = Vision();
  std::vector<SnapshotHoldings> llm = Llm();
  vision[0] = SnapshotHoldings{};  // holds LLM 0's and 2's copies
  llm[0] = SnapshotHoldings{};     // vision 0's buddy
  EXPECT_FALSE(PlanMemoryResume(vision, llm, 0, 10).has_value());
  EXPECT_FALSE(PlanMemoryResume(Vision(), Llm(), 5, 10).has_value());
  // Steps 2 and 4 held, the run recorded step 3 last: step 2, if nothing newer is on disk.
  EXPECT_EQ(PlanMemoryResume(Vision(), Llm(), 0, 3)->step, 2);
  EXPECT_FALSE(PlanMemoryResume(Vision(), Llm(), 3, 3).has_value());
  std::vector<SnapshotHoldings> fewer = Llm();
  fewer.pop_back();
  EXPECT_FALSE(PlanMemoryResume(Vision(), fewer, 0, 10).has_value());
  EXPECT_FALSE(PlanMemoryResume({SnapshotHoldings{}, SnapshotHoldings{}},
                                std::vector<SnapshotHoldings>(3), 0, 10)
                   .has_value());
}

}  // namespace
}  // namespace tandem::coordinator
