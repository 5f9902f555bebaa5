#include "platform/bf16_support.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/cpu_features.h"

#ifdef TANDEM_CUDA_TORCH
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace tandem::platform {
namespace {

std::atomic<CpuBf16Override> g_override{CpuBf16Override::kNone};

Bf16Support CpuSupport() {
  Bf16Support support;
  switch (GetCpuBf16Override()) {
    case CpuBf16Override::kAbsent:
      support.detail = "TANDEM_CPU_BF16=absent";
      return support;
    case CpuBf16Override::kEmulated:
      support.auto_is_bf16 = true;
      support.detail = "TANDEM_CPU_BF16=emulated";
      return support;
    case CpuBf16Override::kNone:
      break;
  }
  const CpuFeatures& cpu = DetectCpuFeatures();
  if (!cpu.native_bf16()) {
    support.detail = cpu.avx512 ? "no avx512_bf16 or amx_bf16" : "no avx512_bf16 or amx_bf16 (";
    if (!cpu.avx512) support.detail += cpu.avx2 ? "AVX2 only)" : "no AVX2)";
    return support;
  }
  // LibTorch reaches the bf16 instructions through oneDNN; without it (not built in, or turned
  // off) its bf16 matmuls are the emulated loops whatever the CPU.
  if (!at::hasMKLDNN() || !at::globalContext().userEnabledMkldnn()) {
    support.detail = absl::StrCat(cpu.Bf16Instructions(), " present, but LibTorch's oneDNN is ",
                                  at::hasMKLDNN() ? "turned off" : "not built in");
    return support;
  }
  support.native = support.auto_is_bf16 = true;
  support.detail = cpu.Bf16Instructions();
  return support;
}

Bf16Support CudaSupport(const std::string& device) {
  Bf16Support support;
#ifdef TANDEM_CUDA_TORCH
  const c10::Device d(device);
  const int index = d.has_index() ? d.index() : c10::cuda::current_device();
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(index);
  support.native = support.auto_is_bf16 = props->major >= 8;
  support.detail =
      absl::StrCat(props->name, ", compute capability ", props->major, ".", props->minor);
#else
  support.native = support.auto_is_bf16 = true;
  support.detail = "CUDA device (capability unknown: LibTorch without CUDA)";
#endif
  return support;
}

// The best of three timed windows of at least `min_seconds` each, after three warm-up calls. A
// cold process pays once for paging in LibTorch's kernels and building oneDNN's primitive; that
// was seen to make a single short window report 7 GFLOP/s for a 700 GFLOP/s bf16 matmul.
double Gflops(at::ScalarType dtype, int size, double min_seconds) {
  // Constant operands: the speed does not depend on the values, and the global generator, which
  // seeds the models, is left alone.
  const at::Tensor a = at::full({size, size}, 0.5, at::TensorOptions().dtype(dtype));
  const at::Tensor b = at::full({size, size}, 0.25, at::TensorOptions().dtype(dtype));
  for (int i = 0; i < 3; ++i) at::mm(a, b);
  double best = 0;
  for (int window = 0; window < 3; ++window) {
    int reps = 0;
    const auto start = std::chrono::steady_clock::now();
    double seconds = 0;
    do {
      at::mm(a, b);
      ++reps;
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (seconds < min_seconds);
    best = std::max(best, 2.0 * size * size * size * reps / seconds / 1e9);
  }
  return best;
}

}  // namespace

absl::StatusOr<CpuBf16Override> ParseCpuBf16Override(std::string_view text) {
  if (text.empty() || text == "detect") return CpuBf16Override::kNone;
  if (text == "absent") return CpuBf16Override::kAbsent;
  if (text == "emulated") return CpuBf16Override::kEmulated;
  return absl::InvalidArgumentError(
      absl::StrCat("TANDEM_CPU_BF16: must be \"detect\", \"absent\" or \"emulated\", got \"",
                   std::string(text), "\""));
}

void SetCpuBf16Override(CpuBf16Override mode) {
  const CpuBf16Override previous = g_override.exchange(mode);
  if (mode != CpuBf16Override::kNone) {
    at::globalContext().setUserEnabledMkldnn(false);
  } else if (previous != CpuBf16Override::kNone) {
    at::globalContext().setUserEnabledMkldnn(true);  // undo what the override turned off
  }
}

CpuBf16Override GetCpuBf16Override() { return g_override; }

absl::Status ApplyCpuBf16OverrideFromEnvironment() {
  const char* value = std::getenv("TANDEM_CPU_BF16");
  absl::StatusOr<CpuBf16Override> mode = ParseCpuBf16Override(value ? value : "");
  if (!mode.ok()) return mode.status();
  SetCpuBf16Override(*mode);
  return absl::OkStatus();
}

Bf16Support DetectBf16Support(const std::string& device) {
  if (device.rfind("cuda", 0) == 0) return CudaSupport(device);
  return CpuSupport();
}

MatmulSpeed MeasureCpuMatmul(int size) {
  MatmulSpeed speed;
  speed.fp32_gflops = Gflops(at::kFloat, size, 0.02);
  speed.bf16_gflops = Gflops(at::kBFloat16, size, 0.02);
  return speed;
}

}  // namespace tandem::platform
