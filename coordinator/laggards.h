// Who a timed-out collective waited for. Each actor's heartbeat carries the sequence number of the
// last collective it entered (WorkerStatus.last_collective); when a command of a job times out, the
// ranks of a group whose number is behind the group's highest are the ones the others waited for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::coordinator {

struct RankProgress {
  std::string group;  // "vision" or "llm"
  int rank = 0;
  std::string actor;  // "llm-1 (10.0.0.7:7071)"
  int64_t last_collective = 0;
};

// "llm rank 1 (llm-1, 10.0.0.7:7071) did not enter collective #42 of group llm (its last: #41)",
// one clause per rank behind, joined by "; "; "" when no group has a rank behind.
std::string DescribeLaggards(const std::vector<RankProgress>& ranks);

}  // namespace tandem::coordinator
