// ParallelGroup: the communicator of one dimension of a group's layout, tensor (TP) or sequence
// (SP), with the deadline every wait on it uses. Default-constructed it is no group: one rank, and
// every collective of parallel/collectives.h is the identity.
//
// The ranks of a ParallelGroup run the same model in lockstep: every collective below is issued by
// each of them in the same order (engine/communicator.h's contract), which holds because they run
// the same forward and backward on tensors of the same shapes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/communicator.h"

namespace tandem::parallel {

struct ParallelGroup {
  std::shared_ptr<engine::Communicator> comm;  // null: a group of one rank
  std::chrono::milliseconds timeout{300000};

  int size() const { return comm != nullptr ? comm->world_size() : 1; }
  int rank() const { return comm != nullptr ? comm->rank() : 0; }
  bool active() const { return size() > 1; }
};

// A contiguous range [begin, end) of a dimension of `total` elements split over `parts` ranks as
// evenly as possible: the first total % parts ranks hold one element more. Used for the vocabulary,
// whose size need not divide by the TP degree.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
Range EvenSplit(int64_t total, int parts, int rank);

}  // namespace tandem::parallel
