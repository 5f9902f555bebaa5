// A restart that resumes from snapshots in memory (NOTE [Snapshots in memory] in step/stage.h), as
// the coordinator and an actor speak of it: what an actor holds of a job's snapshots, and how it
// restores its rank's state at AssignJob. Plain C++ (tandem.v1.HeldSnapshotsResponse and
// tandem.v1.MemoryRestore on the wire).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "common/role.h"

namespace tandem {

struct SnapshotHoldings {
  bool holds = false;  // false: nothing of the job
  Role role = Role::kVision;
  int rank = 0;  // in the attempt that took them
  int group_size = 0;
  int peer_group_size = 0;
  std::vector<int64_t> own_steps;  // ascending
  std::map<int, int64_t> copies;   // rank of the other group -> the step of its copy held here
  int64_t bytes = 0;
};

struct MemoryRestore {
  int64_t step = 0;          // 0: no restore from memory
  int from_peer = -1;        // the other group's rank that sends this rank's state; -1: its own
  std::vector<int> send_to;  // the other group's ranks this rank sends their copies to first

  bool operator==(const MemoryRestore&) const = default;
};

}  // namespace tandem
