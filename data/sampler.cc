#include "data/sampler.h"

#include <numeric>
#include <utility>

#include "data/random.h"

namespace tandem::data {

std::vector<int64_t> EpochPermutation(int64_t size, uint64_t seed, int64_t epoch) {
  if (size <= 0) return {};
  std::vector<int64_t> order(size);
  std::iota(order.begin(), order.end(), 0);
  Rng rng(HashKey({seed, static_cast<uint64_t>(epoch)}));
  for (int64_t i = size - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

Sampler::Sampler(int64_t dataset_size, uint64_t seed) : dataset_size_(dataset_size), seed_(seed) {}

std::vector<int64_t> Sampler::Next(int64_t count) {
  std::vector<int64_t> indices;
  if (dataset_size_ <= 0 || count <= 0) return indices;
  indices.reserve(count);
  while (static_cast<int64_t>(indices.size()) < count) {
    if (cached_epoch_ != position_.epoch) {
      permutation_ = EpochPermutation(dataset_size_, seed_, position_.epoch);
      cached_epoch_ = position_.epoch;
    }
    indices.push_back(permutation_[position_.offset]);
    if (++position_.offset == dataset_size_) position_ = {position_.epoch + 1, 0};
  }
  return indices;
}

void Sampler::Seek(Position position) {
  if (dataset_size_ > 0) {
    position.epoch += position.offset / dataset_size_;
    position.offset %= dataset_size_;
  }
  position_ = position;
}

}  // namespace tandem::data
