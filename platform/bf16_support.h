// Whether a device multiplies bf16 matrices in hardware, and how this process treats its CPU's
// bf16. Torch-free header (the CLI includes it); the implementation asks LibTorch about CUDA
// devices.
//
// Native bf16: a CPU with AVX512_BF16 or AMX-BF16 (common/cpu_features.h) whose LibTorch can reach
// them through oneDNN; a CUDA device of compute capability 8.0 or more (A100, H100, ...). Elsewhere
// LibTorch emulates bf16 matmuls in fp32 loops, 20-30x slower than fp32. torch_autocast.dtype
// "auto" computes in bf16 where it is native and in fp32 elsewhere (engine/compute.h,
// engine_config/CONFIG.md).
//
// The override shows on any CPU what a CPU without native bf16 does. Each main reads it from
// TANDEM_CPU_BF16 and sets it once, before the first LibTorch op:
//   absent    as a CPU without native bf16: "auto" computes in fp32, an explicit bf16 runs emulated
//   emulated  the same CPU with autocast forced to bf16: "auto" picks bf16 too, emulated
// Both turn oneDNN off in ATen (torch.backends.mkldnn.enabled = False), which routes bf16 matmuls
// to the same fp32-loop kernels a CPU without AVX512 takes (measured: 4.0 against 92 GFLOP/s).
//
// Thread-safety: set the override before any other thread runs; the queries are thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem::platform {

enum class CpuBf16Override { kNone, kAbsent, kEmulated };

// "" or "detect" -> kNone, "absent", "emulated"; anything else is InvalidArgument naming the
// values.
absl::StatusOr<CpuBf16Override> ParseCpuBf16Override(std::string_view text);
// kAbsent and kEmulated turn oneDNN off; going back to kNone turns it on again.
void SetCpuBf16Override(CpuBf16Override mode);
CpuBf16Override GetCpuBf16Override();

// Reads TANDEM_CPU_BF16 from the environment and applies it; for mains only. An invalid value is
// InvalidArgument naming the variable and the values it takes.
absl::Status ApplyCpuBf16OverrideFromEnvironment();

struct Bf16Support {
  bool native = false;        // bf16 matmuls run in hardware
  bool auto_is_bf16 = false;  // torch_autocast.dtype "auto" computes in bf16 on this device
  std::string detail;         // why, e.g. "avx512_bf16", "compute capability 9.0",
                              // "no avx512_bf16 or amx_bf16 (AVX2 only)", "TANDEM_CPU_BF16=absent"
};

// `device` as LibTorch prints it: "cpu", "cuda", "cuda:1".
Bf16Support DetectBf16Support(const std::string& device);

// Measures bf16 against fp32 matrix multiplication on the CPU (256 x 256, the best of three timed
// windows; about 0.1 s where bf16 is emulated): what an explicit bf16 costs, for the warning that
// names it and for `tandem doctor`.
struct MatmulSpeed {
  double fp32_gflops = 0;
  double bf16_gflops = 0;
  double slowdown() const { return bf16_gflops > 0 ? fp32_gflops / bf16_gflops : 0; }
};
MatmulSpeed MeasureCpuMatmul(int size = 256);

}  // namespace tandem::platform
