// Which rank of a group owns which samples of a micro-batch (docs/design.md §2): sample i of a
// micro-batch of b samples belongs to rank floor(i * N / b) of a group of N ranks, so each rank
// holds one contiguous block, blocks differ in size by at most one, and two groups of different
// sizes exchange contiguous slices. Plain arithmetic, shared by the actors of both groups.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tandem::step {

struct SampleRange {
  int64_t begin = 0;  // [begin, end)
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

// The samples of a `samples`-sample micro-batch that rank `rank` of `ranks` owns.
// REQUIRES: 0 <= rank < ranks, samples >= 0.
inline SampleRange OwnedSamples(int rank, int ranks, int64_t samples) {
  auto first = [&](int64_t r) { return (r * samples + ranks - 1) / ranks; };  // ceil(r * b / N)
  return {first(rank), first(rank + 1)};
}

inline SampleRange Intersect(SampleRange a, SampleRange b) {
  return {std::max(a.begin, b.begin), std::max(std::max(a.begin, b.begin), std::min(a.end, b.end))};
}

}  // namespace tandem::step
