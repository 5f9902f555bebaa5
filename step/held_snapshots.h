// What one rank holds of its job's snapshots in memory (NOTE [Snapshots in memory] in
// step/stage.h): its own state after its last two snapshot steps, and the copies of the other
// group's ranks it is the buddy of. Plain C++, so that an actor (actors/worker.h) can keep them
// across a restart of the job.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace tandem::step {

struct HeldSnapshots {
  // This rank's state after a step (engine::EncodeCheckpointSnapshot's bytes), by step.
  std::map<int64_t, std::string> own;
  // Per rank of the other group this rank is the buddy of: its latest snapshot that arrived
  // whole, (step, bytes).
  std::map<int, std::pair<int64_t, std::string>> copies;

  int64_t bytes() const {
    int64_t total = 0;
    for (const auto& [step, bytes] : own) total += static_cast<int64_t>(bytes.size());
    for (const auto& [rank, copy] : copies) total += static_cast<int64_t>(copy.second.size());
    return total;
  }
};

}  // namespace tandem::step
