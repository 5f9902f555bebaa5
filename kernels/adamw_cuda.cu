// CUDA implementation of the fused Adam/AdamW update (kernels/adamw.h): AdamWCuda.
//
// Same formulas, order and rounding as the CPU kernel (NOTE [AdamW element update] in
// kernels/adamw_cpu.cc). Every fp32 operation is an explicit round-to-nearest intrinsic (__fmul_rn,
// __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn): nvcc would otherwise contract a * b + c into an
// FMA, and these intrinsics are never contracted. So, with denormals kept (no -ftz /
// --use_fast_math), a GPU step gives the same bits as a CPU step, stochastic rounding included
// (CounterRandom is shared).
//
// One grid-stride kernel per (param dtype, master present, grad dtype, state dtype, rounding, Adam
// or AdamW), chosen on the host, so the device loop never branches on a dtype. Launched on the
// caller's stream; nothing is synchronised or allocated.
#ifdef TANDEM_HAVE_CUDA_KERNELS

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/adamw.h"
#include "kernels/bf16.h"

namespace tandem::kernels {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kBlocksPerSm = 8;  // enough resident warps to saturate memory bandwidth

struct F32 {
  using Storage = float;
  __device__ __forceinline__ static float Load(float x) { return x; }
  __device__ __forceinline__ static float Store(float x) { return x; }
  __device__ __forceinline__ static float StoreMoment(float x, uint64_t, uint64_t) { return x; }
};
struct Bf16 {
  using Storage = uint16_t;
  __device__ __forceinline__ static float Load(uint16_t x) { return Bf16ToFloat(x); }
  __device__ __forceinline__ static uint16_t Store(float x) { return FloatToBf16Nearest(x); }
  __device__ __forceinline__ static uint16_t StoreMoment(float x, uint64_t, uint64_t) {
    return FloatToBf16Nearest(x);
  }
};
// bf16 moments rounded stochastically (AdamWBuffers::state_rounding): draws as on the CPU.
struct Bf16Stochastic {
  using Storage = uint16_t;
  __device__ __forceinline__ static float Load(uint16_t x) { return Bf16ToFloat(x); }
  __device__ __forceinline__ static uint16_t StoreMoment(float x, uint64_t seed, uint64_t index) {
    return FloatToBf16Stochastic(x, CounterRandom(seed, index));
  }
};

// Host-computed constants, exactly as on the CPU (double, then cast to float).
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
};

Constants MakeConstants(const AdamWHyper& h) {
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
  return c;
}

template <bool kDecoupled>
__device__ __forceinline__ float AdamStep(const Constants& c, float w, float g, float& m,
                                          float& v) {
  if constexpr (!kDecoupled) g = __fadd_rn(g, __fmul_rn(c.weight_decay, w));
  m = __fadd_rn(__fmul_rn(c.beta1, m), __fmul_rn(c.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(c.beta2, v), __fmul_rn(__fmul_rn(c.one_minus_beta2, g), g));
  if constexpr (kDecoupled) w = __fmul_rn(w, c.decay);
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), c.sqrt_bc2), c.eps);
  return __fsub_rn(w, __fdiv_rn(__fmul_rn(c.step_size, m), denom));
}

template <class P, bool kMaster, class G, class S, Rounding kRounding, bool kDecoupled>
__global__ void __launch_bounds__(kThreadsPerBlock) AdamWKernel(AdamWBuffers b, Constants c) {
  auto* const param = static_cast<typename P::Storage*>(b.param);
  float* const master = b.master;
  const auto* const grad = static_cast<const typename G::Storage*>(b.grad);
  auto* const exp_avg = static_cast<typename S::Storage*>(b.exp_avg);
  auto* const exp_avg_sq = static_cast<typename S::Storage*>(b.exp_avg_sq);
  uint16_t* const compensation = b.compensation;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < b.n;
       i += stride) {
    float w;
    if constexpr (kMaster) {
      w = master[i];
    } else {
      w = P::Load(param[i]);
    }
    float m = S::Load(exp_avg[i]);
    float v = S::Load(exp_avg_sq[i]);
    const float w_new = AdamStep<kDecoupled>(c, w, __fmul_rn(G::Load(grad[i]), c.grad_scale), m, v);
    const uint64_t index = b.seed_offset + static_cast<uint64_t>(i);
    exp_avg[i] = S::StoreMoment(m, b.seed ^ kExpAvgStream, index);
    exp_avg_sq[i] = S::StoreMoment(v, b.seed ^ kExpAvgSqStream, index);
    if constexpr (kMaster) {
      master[i] = w_new;
      param[i] = P::Store(w_new);
    } else if constexpr (std::is_same_v<P, F32> || kRounding == Rounding::kNearest) {
      param[i] = P::Store(w_new);
    } else if constexpr (kRounding == Rounding::kStochastic) {
      param[i] = FloatToBf16Stochastic(
          w_new, CounterRandom(b.seed, b.seed_offset + static_cast<uint64_t>(i)));
    } else {  // kKahan
      const float delta = __fadd_rn(__fsub_rn(w_new, w), Bf16ToFloat(compensation[i]));
      const uint16_t w_out = FloatToBf16Nearest(__fadd_rn(w, delta));
      param[i] = w_out;
      compensation[i] = FloatToBf16Nearest(__fsub_rn(delta, __fsub_rn(Bf16ToFloat(w_out), w)));
    }
  }
}

using LaunchFn = void (*)(const AdamWBuffers&, const Constants&, int blocks, cudaStream_t);

template <class P, bool kMaster, class G, class S, Rounding kRounding, bool kDecoupled>
void Launch(const AdamWBuffers& b, const Constants& c, int blocks, cudaStream_t stream) {
  AdamWKernel<P, kMaster, G, S, kRounding, kDecoupled>
      <<<blocks, kThreadsPerBlock, 0, stream>>>(b, c);
}

// Compile-time dispatch: each helper calls `f` with a tag type standing for the runtime value.
template <class F>
LaunchFn WithDtype(Dtype dtype, F&& f) {
  return dtype == Dtype::kBFloat16 ? f(Bf16{}) : f(F32{});
}
template <class F>
LaunchFn WithStateDtype(Dtype dtype, Rounding rounding, F&& f) {
  if (dtype != Dtype::kBFloat16) return f(F32{});
  return rounding == Rounding::kStochastic ? f(Bf16Stochastic{}) : f(Bf16{});
}
template <class F>
LaunchFn WithBool(bool value, F&& f) {
  return value ? f(std::true_type{}) : f(std::false_type{});
}
template <class F>
LaunchFn WithRounding(Rounding rounding, F&& f) {
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

LaunchFn SelectLaunchFn(const AdamWBuffers& b, bool decoupled) {
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
              return WithRounding(b.rounding, [&](auto r) -> LaunchFn {
                return &Launch<P, false, G, S, decltype(r)::value, kDecoupled>;
              });
            } else {
              return static_cast<LaunchFn>(
                  &Launch<P, kMaster, G, S, Rounding::kNearest, kDecoupled>);
            }
          });
        });
      });
    });
  });
}

}  // namespace

int AdamWCuda(const AdamWBuffers& buffers, const AdamWHyper& hyper, void* stream) {
  if (buffers.n <= 0) return cudaSuccess;
  if (buffers.param_dtype == Dtype::kBFloat16 && buffers.master == nullptr &&
      buffers.rounding == Rounding::kKahan && buffers.compensation == nullptr) {
    return cudaErrorInvalidValue;  // kKahan needs a compensation buffer
  }
  int device = 0;
  int sms = 0;
  if (cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) return error;
  if (cudaError_t error = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      error != cudaSuccess) {
    return error;
  }
  const int64_t needed = (buffers.n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const int blocks = static_cast<int>(std::min<int64_t>(needed, int64_t{sms} * kBlocksPerSm));
  SelectLaunchFn(buffers, hyper.decoupled)(buffers, MakeConstants(hyper), blocks,
                                           static_cast<cudaStream_t>(stream));
  return cudaGetLastError();
}

}  // namespace tandem::kernels

#endif  // TANDEM_HAVE_CUDA_KERNELS
