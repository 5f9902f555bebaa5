// Fused Adam/AdamW over one flat partition: one pass over memory, no temporaries (docs/design.md
// §3).
//
// Per element i (g = grad[i] * grad_scale, all arithmetic in fp32):
//   Adam (decoupled == false): g += weight_decay * w
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   AdamW (decoupled == true): w = w * (1 - lr * weight_decay)
//   w = w - (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// This is torch::optim::AdamW's order of operations, so fp32 results match it to rounding.
//
// Where the weights live:
// - `master` (fp32) non-null: w is read from and written to master, and `param` (bf16 or fp32)
// receives a
//   copy of the new w rounded to nearest (classic mixed precision).
// - `master` null: `param` is the master. fp32: updated in place. bf16: rounded per `rounding`:
//   kNearest; kStochastic (seeded by `seed`, stream position `seed_offset + i`); kKahan, which
//   keeps the rounding error of the previous update in `compensation` (bf16, same length) and adds
//   it back.
//
// Moments `exp_avg` and `exp_avg_sq` are fp32 or bf16. bf16 moments are rounded per
// `state_rounding`: kNearest, or kStochastic (seed `seed ^ kExpAvgStream` resp. `seed ^
// kExpAvgSqStream`, position `seed_offset + i`), under which v = beta2 * v decays in expectation
// even where beta2's decrement is below half a bf16 ulp of v (with beta2 = 0.999 it always is, and
// a nearest-rounded v never falls). `grad` is fp32 or bf16. All buffers hold `n` elements and must
// not overlap.
//
// AdamWCpu splits the range into chunks over OpenMP threads (`threads` <= 0:
// omp_get_max_threads()). Each element's result depends only on its inputs, so the result is
// identical for any thread count. AdamWCuda (kernels/adamw_cuda.cu, when built with CUDA) computes
// the same on the given CUDA stream.
#pragma once

#include <cstdint>

namespace tandem::kernels {

enum class Dtype { kFloat32, kBFloat16 };
enum class Rounding { kNearest, kStochastic, kKahan };

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = true;    // AdamW
  int64_t step = 1;         // 1-based step count used for bias correction
  float grad_scale = 1.0f;  // multiplies every gradient (gradient clipping coefficient)
};

struct AdamWBuffers {
  void* param = nullptr;
  Dtype param_dtype = Dtype::kFloat32;
  float* master = nullptr;  // optional fp32 master weights
  const void* grad = nullptr;
  Dtype grad_dtype = Dtype::kFloat32;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  Dtype state_dtype = Dtype::kFloat32;
  Rounding state_rounding = Rounding::kNearest;  // bf16 moments: kNearest or kStochastic
  uint16_t* compensation = nullptr;              // bf16 Kahan buffer, only with Rounding::kKahan
  int64_t n = 0;
  Rounding rounding = Rounding::kNearest;
  uint64_t seed = 0;
  uint64_t seed_offset =
      0;  // stream position of element 0 (the engine: its index in its parameter)
};

void AdamWCpu(const AdamWBuffers& buffers, const AdamWHyper& hyper, int threads = 0);

// Sum of squares of `n` fp32 or bf16 values, accumulated in double per chunk (for gradient
// clipping).
double SumOfSquaresCpu(const void* data, Dtype dtype, int64_t n, int threads = 0);

#ifdef TANDEM_HAVE_CUDA_KERNELS
// `stream` is a cudaStream_t. Returns 0 (cudaSuccess) once launched, else the cudaError_t of the
// launch (cudaGetLastError), or cudaErrorInvalidValue for kKahan without a compensation buffer.
int AdamWCuda(const AdamWBuffers& buffers, const AdamWHyper& hyper, void* stream);
#endif

}  // namespace tandem::kernels
