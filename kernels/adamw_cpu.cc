// CPU implementation of the fused Adam/AdamW update and the sum of squares (kernels/adamw.h).
//
// NOTE [AdamW element update]
// Host-side constants, computed once per call in double and cast to float:
//   one_minus_beta1 = 1 - beta1, one_minus_beta2 = 1 - beta2, decay = 1 - lr * weight_decay,
//   step_size = lr / (1 - beta1^step), sqrt_bc2 = sqrt(1 - beta2^step).
// Each element then does, in fp32 and in exactly this order (torch::optim::AdamW / Adam,
// LibTorch 1.13):
//   g = grad * grad_scale
//   Adam only:  g = g + weight_decay * w
//   m = beta1 * m + one_minus_beta1 * g
//   v = beta2 * v + (one_minus_beta2 * g) * g
//   AdamW only: w = w * decay
//   w_new = w - (step_size * m) / (sqrt(v) / sqrt_bc2 + eps)
// with w read from `master` if present, else from `param`. bf16 moments are stored rounded to
// nearest, or with state_rounding kStochastic as FloatToBf16Stochastic(m, CounterRandom(seed ^
// kExpAvgStream, seed_offset + i)) and v likewise with kExpAvgSqStream; w_new itself uses the
// unrounded fp32 m and v. The weight is written as:
//   master present:    master = w_new; param = w_new (fp32) or FloatToBf16Nearest(w_new) (bf16)
//   fp32 param:        param = w_new
//   bf16, kNearest:    param = FloatToBf16Nearest(w_new)
//   bf16, kStochastic: param = FloatToBf16Stochastic(w_new, CounterRandom(seed, seed_offset + i))
//   bf16, kKahan:      with w = float(param) and c = float(compensation) before the update,
//                        delta = (w_new - w) + c
//                        param = FloatToBf16Nearest(w + delta)
//                        compensation = FloatToBf16Nearest(delta - (float(param) - w))
// No FMA contraction anywhere (see UpdateRange), so the result is the same on every x86 code path,
// and the same as kernels/adamw_cuda.cu, which spells each rounding step out with intrinsics.
//
// Work layout: the range is cut into kChunk-element chunks spread over OpenMP threads with
// schedule(static); each chunk is one `omp simd` loop in a function instantiated per (param dtype,
// master present, grad dtype, state dtype and its rounding, rounding, Adam or AdamW), so the hot
// loop never branches on a dtype. On x86-64 each instantiation also exists compiled for AVX2 and
// AVX-512, picked at run time.
//
// Build requirement: -fno-math-errno. With errno-setting sqrt GCC keeps a libm call in the loop and
// does not vectorise it (3-4x slower); the #error below makes a missing flag a build failure.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "kernels/adamw.h"
#include "kernels/bf16.h"

#if !defined(__NO_MATH_ERRNO__)
#error "kernels/adamw_cpu.cc must be compiled with -fno-math-errno (see kernels/README.md)"
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define TANDEM_X86_CLONES 1
#else
#define TANDEM_X86_CLONES 0
#endif

namespace tandem::kernels {
namespace {

constexpr int64_t kChunk = 4096;   // elements per OpenMP work item
constexpr int kBlock = 256;        // elements per vectorised loop
constexpr int kSumLanes = 8;       // independent double accumulators per SumOfSquares part
constexpr int kMaxSumParts = 256;  // SumOfSquares partials, added in a fixed order

// Storage traits: an element of a buffer read as float, and a float written back rounded to
// nearest. StoreMoment writes a moment: `random` is the element's draw, used only by Bf16Stochastic
// (a dead computation elsewhere, which the compiler drops).
struct F32 {
  using Storage = float;
  static float Load(float x) { return x; }
  static float Store(float x) { return x; }
  static float StoreMoment(float x, uint32_t /*random*/) { return x; }
};
struct Bf16 {
  using Storage = uint16_t;
  static float Load(uint16_t x) { return Bf16ToFloat(x); }
  static uint16_t Store(float x) { return FloatToBf16Nearest(x); }
  static uint16_t StoreMoment(float x, uint32_t /*random*/) { return FloatToBf16Nearest(x); }
};
// bf16 moments rounded stochastically (AdamWBuffers::state_rounding).
struct Bf16Stochastic {
  using Storage = uint16_t;
  static float Load(uint16_t x) { return Bf16ToFloat(x); }
  static uint16_t StoreMoment(float x, uint32_t random) { return FloatToBf16Stochastic(x, random); }
};

struct Constants {
  float beta1;
  float beta2;
  float one_minus_beta1;
  float one_minus_beta2;
  float decay;         // AdamW: 1 - lr * weight_decay
  float weight_decay;  // Adam: added to the gradient
  float step_size;     // lr / (1 - beta1^step)
  float sqrt_bc2;      // sqrt(1 - beta2^step)
  float eps;
  float grad_scale;
  uint64_t seed;
  uint64_t exp_avg_seed;  // stochastic rounding of the moments: streams apart from the weights'
  uint64_t exp_avg_sq_seed;
};

Constants MakeConstants(const AdamWBuffers& b, const AdamWHyper& h) {
  const double lr = h.lr;
  const double beta1 = h.beta1;
  const double beta2 = h.beta2;
  const auto step = static_cast<double>(h.step);
  Constants c;
  c.beta1 = h.beta1;
  c.beta2 = h.beta2;
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.decay = static_cast<float>(1.0 - lr * h.weight_decay);
  c.weight_decay = h.weight_decay;
  c.step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, step)));
  c.sqrt_bc2 = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, step)));
  c.eps = h.eps;
  c.grad_scale = h.grad_scale;
  c.seed = b.seed;
  c.exp_avg_seed = b.seed ^ kExpAvgStream;
  c.exp_avg_sq_seed = b.seed ^ kExpAvgSqStream;
  return c;
}

// Updates `len` <= kBlock elements as in NOTE [AdamW element update]; the pointers point at the
// block's first element, whose global index (for stochastic rounding) is `index`. Buffers never
// overlap (header contract). Keep the loop body in this shape: GCC 12 stopped if-converting (and so
// vectorising) the stochastic-rounding variants when the step lived in a helper taking m and v by
// reference. -fopt-info-vec shows whether every `omp simd` loop is vectorised.
template <class P, bool kMaster, class G, class S, Rounding kRounding, bool kDecoupled>
[[gnu::always_inline]] inline void UpdateBlock(typename P::Storage* __restrict param,
                                               float* __restrict master,
                                               const typename G::Storage* __restrict grad,
                                               typename S::Storage* __restrict exp_avg,
                                               typename S::Storage* __restrict exp_avg_sq,
                                               uint16_t* __restrict compensation,
                                               const Constants& c, uint64_t index, int len) {
#pragma omp simd
  for (int j = 0; j < len; ++j) {
    float g = G::Load(grad[j]) * c.grad_scale;
    float w;
    if constexpr (kMaster) {
      w = master[j];
    } else {
      w = P::Load(param[j]);
    }
    if constexpr (!kDecoupled) g = g + c.weight_decay * w;
    const float m = c.beta1 * S::Load(exp_avg[j]) + c.one_minus_beta1 * g;
    const float v = c.beta2 * S::Load(exp_avg_sq[j]) + (c.one_minus_beta2 * g) * g;
    exp_avg[j] = S::StoreMoment(m, CounterRandom(c.exp_avg_seed, index + j));
    exp_avg_sq[j] = S::StoreMoment(v, CounterRandom(c.exp_avg_sq_seed, index + j));
    const float decayed = kDecoupled ? w * c.decay : w;
    const float w_new = decayed - (c.step_size * m) / (std::sqrt(v) / c.sqrt_bc2 + c.eps);
    if constexpr (kMaster) {
      master[j] = w_new;
      param[j] = P::Store(w_new);
    } else if constexpr (std::is_same_v<P, F32> || kRounding == Rounding::kNearest) {
      param[j] = P::Store(w_new);
    } else if constexpr (kRounding == Rounding::kStochastic) {
      param[j] = FloatToBf16Stochastic(w_new, CounterRandom(c.seed, index + j));
    } else {  // kKahan
      const float delta = (w_new - w) + Bf16ToFloat(compensation[j]);
      const uint16_t w_out = FloatToBf16Nearest(w + delta);
      param[j] = w_out;
      compensation[j] = FloatToBf16Nearest(delta - (Bf16ToFloat(w_out) - w));
    }
  }
}

// Updates elements [begin, end) block by block: full blocks see a constant trip count, which
// measured 20-30% faster on bf16 buffers than one loop over the whole range.
template <class P, bool kMaster, class G, class S, Rounding kRounding, bool kDecoupled>
[[gnu::always_inline]] inline void UpdateRangeBody(const AdamWBuffers& b, const Constants& c,
                                                   int64_t begin, int64_t end) {
  auto* const param = static_cast<typename P::Storage*>(b.param);
  const auto* const grad = static_cast<const typename G::Storage*>(b.grad);
  auto* const exp_avg = static_cast<typename S::Storage*>(b.exp_avg);
  auto* const exp_avg_sq = static_cast<typename S::Storage*>(b.exp_avg_sq);
  for (int64_t i = begin; i < end; i += kBlock) {
    const int len = end - i < kBlock ? static_cast<int>(end - i) : kBlock;
    UpdateBlock<P, kMaster, G, S, kRounding, kDecoupled>(
        param + i, kMaster ? b.master + i : nullptr, grad + i, exp_avg + i, exp_avg_sq + i,
        b.compensation != nullptr ? b.compensation + i : nullptr, c, b.seed_offset + i, len);
  }
}

// The per-ISA entry points. fp-contract=off keeps GCC from fusing a * b + c into an FMA (it would
// under -march flags with FMA, and always in the AVX-512 clone), which would change the rounding.
template <class P, bool kMaster, class G, class S, Rounding kRounding, bool kDecoupled>
[[gnu::optimize("fp-contract=off")]] void UpdateRange(const AdamWBuffers& b, const Constants& c,
                                                      int64_t begin, int64_t end) {
  UpdateRangeBody<P, kMaster, G, S, kRounding, kDecoupled>(b, c, begin, end);
}

#if TANDEM_X86_CLONES
template <class P, bool kMaster, class G, class S, Rounding kRounding, bool kDecoupled>
[[gnu::target("avx2"), gnu::optimize("fp-contract=off")]] void UpdateRangeAvx2(
    const AdamWBuffers& b, const Constants& c, int64_t begin, int64_t end) {
  UpdateRangeBody<P, kMaster, G, S, kRounding, kDecoupled>(b, c, begin, end);
}

template <class P, bool kMaster, class G, class S, Rounding kRounding, bool kDecoupled>
[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq"), gnu::optimize("fp-contract=off")]] void
UpdateRangeAvx512(const AdamWBuffers& b, const Constants& c, int64_t begin, int64_t end) {
  UpdateRangeBody<P, kMaster, G, S, kRounding, kDecoupled>(b, c, begin, end);
}
#endif

enum class Isa { kBaseline, kAvx2, kAvx512 };

Isa DetectIsa() {
#if TANDEM_X86_CLONES
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2")) return Isa::kAvx2;
#endif
  return Isa::kBaseline;
}

using RangeFn = void (*)(const AdamWBuffers&, const Constants&, int64_t, int64_t);

template <class P, bool kMaster, class G, class S, Rounding kRounding, bool kDecoupled>
RangeFn RangeFnFor(Isa isa) {
#if TANDEM_X86_CLONES
  if (isa == Isa::kAvx512) return &UpdateRangeAvx512<P, kMaster, G, S, kRounding, kDecoupled>;
  if (isa == Isa::kAvx2) return &UpdateRangeAvx2<P, kMaster, G, S, kRounding, kDecoupled>;
#endif
  return &UpdateRange<P, kMaster, G, S, kRounding, kDecoupled>;
}

// Compile-time dispatch: each helper calls `f` with a tag type standing for the runtime value.
template <class F>
RangeFn WithDtype(Dtype dtype, F&& f) {
  return dtype == Dtype::kBFloat16 ? f(Bf16{}) : f(F32{});
}
template <class F>
RangeFn WithStateDtype(Dtype dtype, Rounding rounding, F&& f) {
  if (dtype != Dtype::kBFloat16) return f(F32{});
  return rounding == Rounding::kStochastic ? f(Bf16Stochastic{}) : f(Bf16{});
}
template <class F>
RangeFn WithBool(bool value, F&& f) {
  return value ? f(std::true_type{}) : f(std::false_type{});
}
template <class F>
RangeFn WithRounding(Rounding rounding, F&& f) {
  switch (rounding) {
    case Rounding::kStochastic:
      return f(std::integral_constant<Rounding, Rounding::kStochastic>{});
    case Rounding::kKahan:
      return f(std::integral_constant<Rounding, Rounding::kKahan>{});
    case Rounding::kNearest:
      break;
  }
  return f(std::integral_constant<Rounding, Rounding::kNearest>{});
}

RangeFn SelectRangeFn(const AdamWBuffers& b, bool decoupled, Isa isa) {
  return WithDtype(b.param_dtype, [&](auto p) {
    return WithBool(b.master != nullptr, [&](auto has_master) {
      return WithDtype(b.grad_dtype, [&](auto g) {
        return WithStateDtype(b.state_dtype, b.state_rounding, [&](auto s) {
          return WithBool(decoupled, [&](auto d) {
            using P = decltype(p);
            using G = decltype(g);
            using S = decltype(s);
            constexpr bool kMaster = decltype(has_master)::value;
            constexpr bool kDecoupled = decltype(d)::value;
            // Rounding only matters for a bf16 param that is its own master.
            if constexpr (std::is_same_v<P, Bf16> && !kMaster) {
              return WithRounding(b.rounding, [&](auto r) {
                return RangeFnFor<P, false, G, S, decltype(r)::value, kDecoupled>(isa);
              });
            } else {
              return RangeFnFor<P, kMaster, G, S, Rounding::kNearest, kDecoupled>(isa);
            }
          });
        });
      });
    });
  });
}

int ResolveThreads(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

template <class T>
double SumOfSquaresRange(const typename T::Storage* x, int64_t begin, int64_t end) {
  // kSumLanes fixed accumulators rather than an `omp simd reduction`, whose association would
  // depend on the vector width the compiler picks.
  double acc[kSumLanes] = {};
  int64_t i = begin;
  for (; i + kSumLanes <= end; i += kSumLanes) {
    for (int l = 0; l < kSumLanes; ++l) {
      const double d = T::Load(x[i + l]);
      acc[l] += d * d;  // exact: a float squared fits in a double
    }
  }
  for (int l = 0; i < end; ++i, ++l) {
    const double d = T::Load(x[i]);
    acc[l] += d * d;
  }
  double total = 0.0;
  for (int l = 0; l < kSumLanes; ++l) total += acc[l];
  return total;
}

template <class T>
double SumOfSquaresImpl(const void* data, int64_t n, int threads) {
  const auto* x = static_cast<const typename T::Storage*>(data);
  // The parts depend on n only and their sums are added in order, so the result does not depend
  // on the thread count.
  const int64_t parts = std::min<int64_t>(kMaxSumParts, (n + kChunk - 1) / kChunk);
  const int64_t part_size = (n + parts - 1) / parts;
  double partial[kMaxSumParts];
#pragma omp parallel for schedule(static) num_threads(ResolveThreads(threads)) if (parts > 1)
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t begin = std::min(n, p * part_size);
    partial[p] = SumOfSquaresRange<T>(x, begin, std::min(n, begin + part_size));
  }
  double total = 0.0;
  for (int64_t p = 0; p < parts; ++p) total += partial[p];
  return total;
}

}  // namespace

void AdamWCpu(const AdamWBuffers& buffers, const AdamWHyper& hyper, int threads) {
  if (buffers.n <= 0) return;
  if (buffers.param_dtype == Dtype::kBFloat16 && buffers.master == nullptr &&
      buffers.rounding == Rounding::kKahan && buffers.compensation == nullptr) {
    std::fprintf(stderr, "AdamWCpu: Rounding::kKahan without a compensation buffer\n");
    std::abort();  // a programmer error, like a CHECK
  }
  const Constants c = MakeConstants(buffers, hyper);
  const RangeFn update = SelectRangeFn(buffers, hyper.decoupled, DetectIsa());
  const int64_t n = buffers.n;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) num_threads(ResolveThreads(threads)) if (chunks > 1)
  for (int64_t k = 0; k < chunks; ++k) {
    update(buffers, c, k * kChunk, std::min(n, (k + 1) * kChunk));
  }
}

double SumOfSquaresCpu(const void* data, Dtype dtype, int64_t n, int threads) {
  if (n <= 0) return 0.0;
  return dtype == Dtype::kBFloat16 ? SumOfSquaresImpl<Bf16>(data, n, threads)
                                   : SumOfSquaresImpl<F32>(data, n, threads);
}

}  // namespace tandem::kernels
