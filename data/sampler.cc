#include "data/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "data/random.h"

namespace tandem::data {
namespace {

// Streams of an epoch's windowed order, apart from EpochPermutation's {seed, epoch}.
constexpr uint64_t kShardStream = 1;
constexpr uint64_t kWindowStream = 2;
constexpr uint64_t kMixtureStream = 3;

std::vector<int64_t> Permutation(int64_t size, uint64_t key) {
  if (size <= 0) return {};
  std::vector<int64_t> order(size);
  std::iota(order.begin(), order.end(), 0);
  Rng rng(key);
  for (int64_t i = size - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace

std::vector<int64_t> EpochPermutation(int64_t size, uint64_t seed, int64_t epoch) {
  return Permutation(size, HashKey({seed, static_cast<uint64_t>(epoch)}));
}

int64_t SampleOrder::size() const {
  if (!mixture.empty()) {
    int64_t total = 0;
    for (const MixturePart& part : mixture) total += part.order.size();
    return total;
  }
  return std::accumulate(shards.begin(), shards.end(), int64_t{0});
}

size_t NextMixtureSource(const std::vector<double>& weights, const std::vector<int64_t>& counts,
                         int64_t drawn) {
  double total = 0;
  for (double w : weights) total += w;
  size_t best = 0;
  double behind = 0;
  for (size_t s = 0; s < weights.size(); ++s) {
    const double deficit =
        weights[s] / total * static_cast<double>(drawn + 1) - static_cast<double>(counts[s]);
    if (s == 0 || deficit > behind) {
      best = s;
      behind = deficit;
    }
  }
  return best;
}

std::vector<int64_t> MixtureCounts(const std::vector<double>& weights, int64_t draws) {
  std::vector<int64_t> counts(weights.size(), 0);
  for (int64_t n = 0; n < draws; ++n) ++counts[NextMixtureSource(weights, counts, n)];
  return counts;
}

int64_t SampleOrder::ShardEnd(int64_t index) const {
  if (!mixture.empty()) {
    int64_t first = 0;
    for (const MixturePart& part : mixture) {
      if (index < first + part.order.size()) return first + part.order.ShardEnd(index - first);
      first += part.order.size();
    }
    return first;
  }
  int64_t end = 0;
  for (int64_t samples : shards) {
    end += samples;
    if (index < end) return end;
  }
  return end;
}

Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;

Sampler::Sampler(SampleOrder order, uint64_t seed)
    : order_(std::move(order)), size_(order_.size()), seed_(seed) {
  int64_t first = 0;
  for (size_t s = 0; s < order_.mixture.size(); ++s) {
    const MixturePart& part = order_.mixture[s];
    weights_.push_back(part.weight);
    part_begin_.push_back(first);
    first += part.order.size();
    // Each source its own stream, so that equal sources are not drawn in step.
    parts_.emplace_back(part.order, HashKey({seed, kMixtureStream, static_cast<uint64_t>(s)}));
  }
  counts_.assign(weights_.size(), 0);
  shard_begin_.reserve(order_.shards.size());
  int64_t begin = 0;
  for (int64_t samples : order_.shards) {
    shard_begin_.push_back(begin);
    begin += samples;
  }
}

int64_t Sampler::At(int64_t offset) {
  const int64_t epoch = position_.epoch;
  const bool whole = order_.whole();
  if (cached_epoch_ != epoch) {
    cached_epoch_ = epoch;
    cached_window_ = -1;
    if (whole) {
      permutation_ = EpochPermutation(size_, seed_, epoch);
    } else {
      const auto e = static_cast<uint64_t>(epoch);
      shard_order_ = Permutation(static_cast<int64_t>(order_.shards.size()),
                                 HashKey({seed_, e, kShardStream}));
      stream_begin_.assign(1, 0);
      for (int64_t shard : shard_order_)
        stream_begin_.push_back(stream_begin_.back() + order_.shards[shard]);
    }
  }
  if (whole) return permutation_[offset];
  const int64_t window = offset / order_.window;
  const int64_t first = window * order_.window;
  if (cached_window_ != window) {
    cached_window_ = window;
    permutation_ = Permutation(std::min(order_.window, size_ - first),
                               HashKey({seed_, static_cast<uint64_t>(epoch), kWindowStream,
                                        static_cast<uint64_t>(window)}));
  }
  const int64_t stream = first + permutation_[offset - first];
  // The shard of the stream holding position `stream` (the last one beginning at or before it,
  // so empty shards are passed over).
  const auto k = std::upper_bound(stream_begin_.begin(), stream_begin_.end(), stream) -
                 stream_begin_.begin() - 1;
  return shard_begin_[shard_order_[k]] + (stream - stream_begin_[k]);
}

std::vector<int64_t> Sampler::Next(int64_t count) {
  std::vector<int64_t> indices;
  if (size_ <= 0 || count <= 0) return indices;
  indices.reserve(count);
  if (!parts_.empty()) {
    for (int64_t k = 0; k < count; ++k) {
      const size_t s = NextMixtureSource(weights_, counts_, position_.offset);
      ++counts_[s];
      ++position_.offset;
      indices.push_back(part_begin_[s] + parts_[s].Next(1)[0]);
    }
    return indices;
  }
  while (static_cast<int64_t>(indices.size()) < count) {
    indices.push_back(At(position_.offset));
    if (++position_.offset == size_) position_ = {position_.epoch + 1, 0};
  }
  return indices;
}

void Sampler::Seek(Position position) {
  if (!parts_.empty()) {
    position = {0, position.epoch * size_ + position.offset};
    counts_ = MixtureCounts(weights_, position.offset);
    for (size_t s = 0; s < parts_.size(); ++s) parts_[s].Seek({0, counts_[s]});
    position_ = position;
    return;
  }
  if (size_ > 0) {
    position.epoch += position.offset / size_;
    position.offset %= size_;
  }
  position_ = position;
}

}  // namespace tandem::data
