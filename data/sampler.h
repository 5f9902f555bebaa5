// The order in which training samples are visited, a pure function of (seed, epoch, offset) built
// from SplitMix64 (data/random.h), so it is the same on every machine, standard library and rank,
// and a checkpoint restores it exactly from a Position whatever the group sizes.
//
// A data set held whole (jsonl, conversations, shapes, or shards no bigger than the window) is
// shuffled whole: a fresh permutation every epoch. A sharded one is shuffled as WebDataset's
// shuffle(n) mixes a stream, but without the buffer's history: each epoch visits the shards in a
// seeded order, cuts that stream of samples into windows of `window` samples, and visits each
// window in a seeded order of its own. A window's samples come from a few consecutive shards of
// the stream, so a reader holds those shards' tables only (data/shard_dataset.h), and the sampler
// itself holds the shard order and one window's permutation: O(shards + window), not O(samples).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem::data {

// A permutation of [0, size): Fisher-Yates from the last element down, element i swapped with
// j = Below(i + 1) of the stream HashKey({seed, epoch}). Empty for size <= 0.
std::vector<int64_t> EpochPermutation(int64_t size, uint64_t seed, int64_t epoch);

struct MixturePart;

// How a data set's samples are grouped for shuffling.
struct SampleOrder {
  // Samples of each shard, in index order: shard s holds the indices after those of shards < s.
  std::vector<int64_t> shards;
  // Samples shuffled together; <= 0, or at least the whole data set: shuffled whole.
  int64_t window = 0;
  // A mixture (data/mixture_dataset.h): its sources' orders, their samples one source after another
  // in index order; `shards` and `window` are then unused. Each draw takes the next sample of the
  // source furthest behind its share (NextMixtureSource), so the position is the count of draws
  // (epoch 0, offset n) and each source walks its own order, epochs and all.
  std::vector<MixturePart> mixture;

  int64_t size() const;  // samples in all shards
  // One past the last index of the shard holding `index`. REQUIRES: 0 <= index < size().
  int64_t ShardEnd(int64_t index) const;
  // Shuffled whole: one epoch is EpochPermutation(size(), seed, epoch).
  bool whole() const { return window <= 0 || window >= size(); }
};

struct MixturePart {
  double weight = 1;  // relative to the other parts'
  SampleOrder order;
};

// The source of draw `drawn` (0-based) of a mixture whose sources have given `counts` so far: the
// one furthest behind its share, weights[s] / sum * (drawn + 1) - counts[s], the first of equals.
// After n draws each source has given its share n w / W to within one sample.
size_t NextMixtureSource(const std::vector<double>& weights, const std::vector<int64_t>& counts,
                         int64_t drawn);
// Each source's count after `draws` draws (NextMixtureSource, replayed: O(draws x sources)).
std::vector<int64_t> MixtureCounts(const std::vector<double>& weights, int64_t draws);

// Walks epoch 0's order, then epoch 1's, and so on.
//
// Not thread-safe: one owner (a stage) draws from it.
class Sampler {
 public:
  // Where the next index comes from: element `offset` of epoch `epoch`'s order.
  // Always normalised: 0 <= offset < size.
  struct Position {
    int64_t epoch = 0;
    int64_t offset = 0;

    friend bool operator==(const Position&, const Position&) = default;
  };

  // REQUIRES: order.size() > 0 (with 0, Next returns nothing); no shard has a negative count; a
  // mixture's weights are > 0 and its parts are not mixtures.
  Sampler(SampleOrder order, uint64_t seed);
  ~Sampler();
  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) noexcept;
  // A data set of dataset_size samples shuffled whole.
  Sampler(int64_t dataset_size, uint64_t seed)
      : Sampler(SampleOrder{{dataset_size}, 0, {}}, seed) {}

  // The next `count` indices, continuing into the next epoch (or several) as needed.
  std::vector<int64_t> Next(int64_t count);

  Position position() const { return position_; }

  // Continues from `position`, e.g. one saved in a checkpoint. An offset >= size carries into later
  // epochs (so {e, size} is {e + 1, 0}); a mixture's position is {0, draws} (an epoch counts as
  // size() draws). REQUIRES: epoch >= 0, offset >= 0.
  void Seek(Position position);

 private:
  // The index at `offset` of epoch position_.epoch.
  int64_t At(int64_t offset);

  SampleOrder order_;
  int64_t size_;
  uint64_t seed_;
  std::vector<int64_t> shard_begin_;  // first index of each shard
  Position position_;
  int64_t cached_epoch_ = -1;  // the epoch the members below belong to
  // Shuffled whole: the epoch's permutation. Windowed: the shards in the epoch's order and where
  // each begins in the epoch's stream (one more entry: size_), and one window's permutation.
  std::vector<int64_t> permutation_;
  std::vector<int64_t> shard_order_;
  std::vector<int64_t> stream_begin_;
  int64_t cached_window_ = -1;
  // A mixture: its sources' weights, samplers, first indices and counts drawn.
  std::vector<double> weights_;
  std::vector<Sampler> parts_;
  std::vector<int64_t> part_begin_;
  std::vector<int64_t> counts_;
};

}  // namespace tandem::data
