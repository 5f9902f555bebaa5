// What this process's CPU offers for training arithmetic, read from the processor itself (cpuid and
// the OS-enabled register state on x86-64, the kernel's hwcaps on aarch64): no LibTorch, no files.
//
// "Native bf16" means the CPU multiplies bf16 matrices in hardware: AVX512_BF16 or AMX-BF16 (with
// the OS saving their registers) on x86-64, the BF16 extension on aarch64. Without it LibTorch
// emulates bf16 matmuls in fp32 loops, 20-30x slower than fp32 (engine_config/CONFIG.md,
// torch_autocast.dtype "auto").
//
// Thread-safe: DetectCpuFeatures reads the CPU once and caches the answer; UsableCpus asks the
// kernel each time.
#pragma once

#include <string>

namespace tandem {

struct CpuFeatures {
  std::string model;  // brand string, e.g. "AMD EPYC 9454 48-Core Processor"; "" if unknown
  std::string arch;   // "x86_64", "aarch64", ...
  bool avx2 = false;
  bool avx512 = false;       // AVX512F with the OS saving the ZMM state
  bool avx512_bf16 = false;  // AVX512_BF16 (and AVX512 enabled by the OS)
  bool amx_bf16 = false;     // AMX-BF16 (and the OS saving the tile state)
  bool arm_bf16 = false;     // aarch64 BF16 extension

  bool native_bf16() const { return avx512_bf16 || amx_bf16 || arm_bf16; }
  // The instructions behind native_bf16(), e.g. "avx512_bf16", "avx512_bf16, amx_bf16", or "" when
  // none.
  std::string Bf16Instructions() const;
  // Vector extensions for a report line, e.g. "avx2 avx512 avx512_bf16".
  std::string Summary() const;
};

const CpuFeatures& DetectCpuFeatures();

// The CPUs this process may run on (its affinity mask, as taskset or a container's cpuset sets it),
// at least 1. A CPU quota (cgroup cpu.max) is not counted.
int UsableCpus();

}  // namespace tandem
