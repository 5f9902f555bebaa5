// The order in which training samples are visited: a fresh permutation of the dataset every epoch,
// a pure function of (size, seed, epoch) built from SplitMix64 (data/random.h), so it is the same
// on every machine and standard library, and a checkpoint restores it exactly from a Position.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::data {

// A permutation of [0, size): Fisher-Yates from the last element down, element i swapped with
// j = Below(i + 1) of the stream HashKey({seed, epoch}). Empty for size <= 0.
std::vector<int64_t> EpochPermutation(int64_t size, uint64_t seed, int64_t epoch);

// Walks EpochPermutation(dataset_size, seed, 0), then epoch 1, and so on.
//
// Not thread-safe: one owner (the trainer) draws from it.
class Sampler {
 public:
  // Where the next index comes from: element `offset` of epoch `epoch`'s permutation.
  // Always normalised: 0 <= offset < dataset_size.
  struct Position {
    int64_t epoch = 0;
    int64_t offset = 0;

    friend bool operator==(const Position&, const Position&) = default;
  };

  // REQUIRES: dataset_size > 0 (with 0, Next returns nothing).
  Sampler(int64_t dataset_size, uint64_t seed);

  // The next `count` indices, continuing into the next epoch (or several) as needed.
  std::vector<int64_t> Next(int64_t count);

  Position position() const { return position_; }

  // Continues from `position`, e.g. one saved in a checkpoint. An offset >= dataset_size carries
  // into later epochs (so {e, dataset_size} is {e + 1, 0}). REQUIRES: epoch >= 0, offset >= 0.
  void Seek(Position position);

 private:
  int64_t dataset_size_;
  uint64_t seed_;
  Position position_;
  int64_t cached_epoch_ = -1;  // the epoch `permutation_` belongs to
  std::vector<int64_t> permutation_;
};

}  // namespace tandem::data
