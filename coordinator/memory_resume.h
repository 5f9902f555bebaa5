// Where a restarted job resumes from memory (NOTE [Snapshots in memory] in step/stage.h): from what
// each actor of the new attempt holds of the job's snapshots, the newest snapshot step whose state
// every rank of both groups can have, and who restores what. A rank that kept its own snapshot of
// that step keeps its place; a rank whose actor is gone is taken by one of the others (a spare, or
// the restarted process), which receives the copy its buddy in the other group holds. None when a
// lost rank's buddy is gone too, the group sizes changed, or no step lies in [at_least, at_most]
// (from the last checkpoint's to the last step metrics.jsonl records): the restart then resumes
// from disk.
//
//   std::optional<MemoryResumePlan> plan = PlanMemoryResume(vision, llm, checkpoint, recorded);
//   member i of the vision group takes rank plan->vision_ranks[i] and plan->vision[i]'s restore.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/memory_restore.h"

namespace tandem::coordinator {

struct MemoryResumePlan {
  int64_t step = 0;
  // Per member of each group, in the order given: the rank it takes, and how it restores.
  std::vector<int> vision_ranks, llm_ranks;
  std::vector<MemoryRestore> vision, llm;
  // "vision rank 1 from llm rank 1's copy": the ranks restored from a buddy's copy ("" if none).
  std::string copies;
};

// `vision` and `llm`: what each member of the new attempt's groups holds (its HeldSnapshots).
std::optional<MemoryResumePlan> PlanMemoryResume(const std::vector<SnapshotHoldings>& vision,
                                                 const std::vector<SnapshotHoldings>& llm,
                                                 int64_t at_least, int64_t at_most);

}  // namespace tandem::coordinator
