#include "coordinator/memory_resume.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::coordinator {
namespace {

// What a group's members hold, for one step.
struct Group {
  Role role;
  const std::vector<SnapshotHoldings>& members;
  int size() const { return static_cast<int>(members.size()); }
};

// Whether `held` is of `group`'s role and the attempt's shape.
bool Fits(const SnapshotHoldings& held, const Group& group, const Group& other) {
  return held.holds && held.role == group.role && held.group_size == group.size() &&
         held.peer_group_size == other.size() && held.rank >= 0 && held.rank < group.size();
}

bool HasOwn(const SnapshotHoldings& held, int64_t step) {
  return std::find(held.own_steps.begin(), held.own_steps.end(), step) != held.own_steps.end();
}

// Ranks for `group`'s members at `step`: a member that kept its own snapshot keeps its rank, the
// others take the ranks left, in order. Returns per member its rank, and marks in `own` the ranks
// restored from their own snapshot.
std::vector<int> Place(const Group& group, const Group& other, int64_t step,
                       std::vector<bool>* own) {
  std::vector<int> ranks(group.members.size(), -1);
  own->assign(group.members.size(), false);
  std::vector<bool> taken(group.members.size(), false);
  for (size_t i = 0; i < group.members.size(); ++i) {
    const SnapshotHoldings& held = group.members[i];
    if (!Fits(held, group, other) || !HasOwn(held, step) || taken[held.rank]) continue;
    ranks[i] = held.rank;
    taken[held.rank] = true;
    (*own)[held.rank] = true;
  }
  int next = 0;
  for (int& rank : ranks) {
    if (rank >= 0) continue;
    while (taken[next]) ++next;
    rank = next;
    taken[next] = true;
  }
  return ranks;
}

// For each rank of `group` without its own snapshot: the rank (in the new attempt) of the member
// of `other` that holds its copy of `step`, else nullopt for the whole plan.
std::optional<std::vector<int>> Sources(const Group& group, const Group& other,
                                        const std::vector<bool>& own,
                                        const std::vector<int>& other_ranks, int64_t step) {
  std::vector<int> from(group.size(), -1);
  for (int rank = 0; rank < group.size(); ++rank) {
    if (own[rank]) continue;
    for (size_t j = 0; j < other.members.size() && from[rank] < 0; ++j) {
      const SnapshotHoldings& held = other.members[j];
      if (!Fits(held, other, group)) continue;
      auto copy = held.copies.find(rank);
      if (copy != held.copies.end() && copy->second == step) from[rank] = other_ranks[j];
    }
    if (from[rank] < 0) return std::nullopt;
  }
  return from;
}

}  // namespace

std::optional<MemoryResumePlan> PlanMemoryResume(const std::vector<SnapshotHoldings>& vision,
                                                 const std::vector<SnapshotHoldings>& llm,
                                                 int64_t at_least, int64_t at_most) {
  const Group groups[2] = {{Role::kVision, vision}, {Role::kLlm, llm}};
  if (vision.empty() || llm.empty()) return std::nullopt;
  std::set<int64_t, std::greater<>> steps;
  for (int g = 0; g < 2; ++g) {
    for (const SnapshotHoldings& held : groups[g].members) {
      if (Fits(held, groups[g], groups[1 - g]))
        steps.insert(held.own_steps.begin(), held.own_steps.end());
    }
  }
  for (const int64_t step : steps) {
    if (step <= 0 || step < at_least) break;
    if (step > at_most) continue;  // the run's record of it was lost with the failure
    std::vector<bool> own[2];
    const std::vector<int> ranks[2] = {Place(groups[0], groups[1], step, &own[0]),
                                       Place(groups[1], groups[0], step, &own[1])};
    const std::optional<std::vector<int>> from[2] = {
        Sources(groups[0], groups[1], own[0], ranks[1], step),
        Sources(groups[1], groups[0], own[1], ranks[0], step)};
    if (!from[0] || !from[1]) continue;
    MemoryResumePlan plan;
    plan.step = step;
    plan.vision_ranks = ranks[0];
    plan.llm_ranks = ranks[1];
    std::vector<MemoryRestore>* restores[2] = {&plan.vision, &plan.llm};
    std::vector<std::string> copies;
    for (int g = 0; g < 2; ++g) {
      // By rank first, then in member order.
      std::vector<MemoryRestore> by_rank(groups[g].members.size());
      for (int rank = 0; rank < groups[g].size(); ++rank) {
        by_rank[rank].step = step;
        by_rank[rank].from_peer = (*from[g])[rank];
        if ((*from[g])[rank] < 0) continue;
        copies.push_back(absl::StrCat(RoleName(groups[g].role), " rank ", rank, " from ",
                                      RoleName(groups[1 - g].role), " rank ", (*from[g])[rank],
                                      "'s copy"));
      }
      // The holders send the copies.
      for (int rank = 0; rank < groups[1 - g].size(); ++rank) {
        const int holder = (*from[1 - g])[rank];
        if (holder >= 0) by_rank[holder].send_to.push_back(rank);
      }
      for (size_t i = 0; i < groups[g].members.size(); ++i)
        restores[g]->push_back(by_rank[ranks[g][i]]);
    }
    plan.copies = absl::StrJoin(copies, ", ");
    return plan;
  }
  return std::nullopt;
}

}  // namespace tandem::coordinator
