// An in-process communicator group for tests: `world_size` Communicators whose collectives meet in
// shared memory, one rank per thread. Results are exactly those of a real group (sums in fp32 for
// bf16).
//
// Failure injection: FailOperation(seq, status) makes the operation with sequence number `seq` on
// every rank complete with `status`; StallRank(rank) makes that rank's operations never arrive, so
// the other ranks' Wait times out with DeadlineExceeded naming the rank that did not answer.
//
// Thread-safe: each rank's Communicator is used by its own thread.
#pragma once

#include <memory>
#include <vector>

#include "engine/communicator.h"

namespace tandem::engine {

class FakeGroup {
 public:
  FakeGroup(int world_size, std::string group_name = "fake");
  ~FakeGroup();

  std::shared_ptr<Communicator> rank(int r);
  void FailOperation(int64_t sequence, absl::Status status);
  void StallRank(int rank);

  struct State;

 private:
  std::shared_ptr<State> state_;
  std::vector<std::shared_ptr<Communicator>> ranks_;
};

}  // namespace tandem::engine
