// Counter-based pseudo-random numbers for the data pipeline.
//
// Images, captions and the data order must depend on the seed alone: not on the order in which
// samples are requested, the thread that asks, nor the standard library (std::mt19937 is portable
// but std::uniform_*_distribution is not). So every draw here is SplitMix64 (Steele, Lea and Flood,
// "Fast splittable pseudorandom number generators", 2014), written out, and a stream is keyed by
// hashing its coordinates, e.g. HashKey(seed, split, index).
//
// Header-only, no state shared between objects: thread-safe as long as one Rng is used by one
// thread.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace tandem::data {

// SplitMix64's increment: 2^64 divided by the golden ratio, odd.
inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// SplitMix64's output function: a bijection on 64-bit words with full avalanche.
constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Hashes a list of words in order into one stream key. For fixed leading words it is a bijection
// in the last one, so distinct indices always give distinct keys.
constexpr uint64_t HashKey(std::initializer_list<uint64_t> words) {
  uint64_t key = 0;
  for (uint64_t word : words) key = Mix64(key ^ Mix64(word + kGoldenGamma));
  return key;
}

// The SplitMix64 sequence starting at `state`: Next() returns Mix64(state += kGoldenGamma).
// Rng(0) yields 0xe220a8397b1dcdaf first, as the reference implementation does.
class Rng {
 public:
  explicit constexpr Rng(uint64_t state) : state_(state) {}

  constexpr uint64_t Next() {
    state_ += kGoldenGamma;
    return Mix64(state_);
  }

  // Uniform in [0, 1), with 53 random bits.
  constexpr double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Uniform in [low, high).
  constexpr double Uniform(double low, double high) { return low + (high - low) * Uniform(); }

  // Uniform in [0, n) for n > 0, by Lemire's multiply-shift (bias below n / 2^64, irrelevant here).
  constexpr uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace tandem::data
