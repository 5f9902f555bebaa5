// bfloat16 <-> float conversions shared by the CPU kernels and (as __host__ __device__) the CUDA
// ones.
//
// FloatToBf16Nearest rounds to nearest even, as PyTorch does (NaN stays NaN). FloatToBf16Stochastic
// rounds up with probability equal to the discarded fraction, using `random` (any uniformly
// distributed 32-bit value; its low 16 bits are used), so E[result] == x. CounterRandom is a
// stateless hash: the same (seed, index) gives the same value on CPU and GPU.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TANDEM_HD __host__ __device__ __forceinline__
#else
#define TANDEM_HD inline
#endif

namespace tandem::kernels {

TANDEM_HD float Bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

TANDEM_HD uint16_t FloatToBf16Nearest(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

TANDEM_HD uint16_t FloatToBf16Stochastic(float f, uint32_t random) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7f800000u) == 0x7f800000u) return FloatToBf16Nearest(f);  // inf / NaN unchanged
  u += (random & 0xffffu);
  return static_cast<uint16_t>(u >> 16);
}

// Seeds of the moments' stochastic rounding are the step's seed xor these, so the weights', the
// first and the second moments' draws of one element are independent streams.
constexpr uint64_t kExpAvgStream = 0x243f6a8885a308d3ull;
constexpr uint64_t kExpAvgSqStream = 0x13198a2e03707344ull;

// SplitMix64-style mix of (seed, index): a different stream per element and per step.
TANDEM_HD uint32_t CounterRandom(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<uint32_t>(z);
}

}  // namespace tandem::kernels
