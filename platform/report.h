// What this host offers Tandem, as this process's LibTorch sees it: the LibTorch build, the BLAS
// behind its fp32 matmuls, the CPU and its bf16, the CUDA devices and NCCL; and, unless skipped,
// short timed probes: the CPU's fp32 against bf16 matmul speed and, where CUDA devices are present,
// a bf16 matmul on each and an NCCL all-reduce across them. `tandem doctor` prints it
// (cli/doctor_command.h).
//
//   platform::ReportOptions options;
//   options.probes = false;                       // no timed work: a fraction of a second
//   const platform::PlatformReport report = platform::ReportPlatform(options);
//   if (report.cuda.devices.empty()) std::puts(report.cuda.none_reason.c_str());
//
// Torch-free header of plain structs (the CLI includes it); platform/report.cc asks LibTorch, and
// platform/nccl_probe.cc NCCL (built only with NCCL). The CUDA parts exist only in a build with
// TANDEM_CUDA_TORCH; elsewhere `cuda.none_reason` says why there are no devices.
//
// Errors: a probe that fails records its message in the report (`error` fields); ReportPlatform
// itself always returns a report and never throws.
//
// Thread-safety: ReportPlatform runs its probes on the calling thread (NCCL adds its own); call it
// from one thread at a time, with nothing else computing on the devices.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/blas_info.h"
#include "common/cpu_features.h"
#include "platform/bf16_support.h"

namespace tandem::platform {

struct LibTorchInfo {
  std::string version;       // TORCH_VERSION of the headers built against, e.g. "2.11.0"
  bool cuda = false;         // LibTorch was built with CUDA (USE_CUDA=ON in at::show_config())
  std::string cuda_version;  // the CUDA it was built with, e.g. "13.0"; "" without CUDA
  bool tandem_cuda = false;  // this build of Tandem has its CUDA code (TANDEM_CUDA_TORCH)
  std::string blas_info;  // BLAS_INFO of LibTorch's build: "mkl", "open", "generic" (libblas.so.3)
  std::string mkl;        // the MKL LibTorch carries, e.g. "Intel(R) oneAPI Math Kernel Library
                          // Version 2024.2-Product Build 20240605"; "" when none
  int threads = 0;        // intra-op threads (at::get_num_threads())
};

struct CpuReport {
  CpuFeatures features;
  Bf16Support bf16;  // DetectBf16Support("cpu"), the override applied
  CpuBf16Override bf16_override = CpuBf16Override::kNone;  // from TANDEM_CPU_BF16
  std::optional<MatmulSpeed> matmul;  // MeasureCpuMatmul(); absent when probes are skipped
};

struct CudaDevice {
  int index = 0;
  std::string name;          // e.g. "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;  // compute capability
  int64_t memory_bytes = 0;
  Bf16Support bf16;                          // native from compute capability 8.0
  std::optional<double> bf16_matmul_tflops;  // measured bf16 matmul; absent when skipped or failed
  std::string error;                         // why the matmul probe failed; "" otherwise
};

struct CudaReport {
  std::vector<CudaDevice> devices;
  std::string none_reason;  // why `devices` is empty, e.g. "LibTorch 1.13.0 is built without CUDA",
                            // "no CUDA device (no NVIDIA driver): ..."; "" otherwise
  // CUDA is there but cannot serve: LibTorch sees devices this build of Tandem has no code for, or
  // the NVIDIA driver is loaded and the CUDA runtime still fails (`tandem doctor` warns).
  bool unusable = false;
};

// An all-reduce (sum) of one fp32 buffer per GPU across all of this process's GPUs, timed as
// nccl-tests time it: algbw = bytes / time per all-reduce, busbw = algbw * 2 (n - 1) / n.
struct AllReduceSpeed {
  int gpus = 0;
  int64_t bytes = 0;      // per GPU
  int iterations = 0;     // timed, after warm-up ones
  double seconds = 0;     // per all-reduce
  double algbw_gbps = 0;  // GB/s (1e9 bytes)
  double busbw_gbps = 0;
};

struct NcclReport {
  bool built_in = false;  // this build has the NCCL backend (TANDEM_HAVE_NCCL)
  std::string
      version;  // of the library loaded (ncclGetVersion), e.g. "2.28.9"; "" when not built in
  std::optional<AllReduceSpeed>
      all_reduce;     // measured across 2 or more GPUs, unless skipped or failed
  std::string error;  // why the all-reduce failed; "" otherwise
};

struct PlatformReport {
  LibTorchInfo libtorch;
  BlasInfo blas;  // DetectBlas(): kind kNone when LibTorch carries its own (see libtorch.blas_info)
  CpuReport cpu;
  CudaReport cuda;
  NcclReport nccl;
};

struct ReportOptions {
  // Run the timed probes (CPU matmuls; on GPUs a matmul each and an all-reduce). Default: true.
  bool probes = true;
  // Square bf16 matmul per GPU: 8192 is 1.1 TFLOP a call, about 2 ms on an H100. REQUIRES: > 0.
  int gpu_matmul_size = 8192;
  // Bytes per GPU of the all-reduce (fp32): large enough for NCCL to reach its bus bandwidth.
  int64_t all_reduce_bytes = int64_t{32} << 20;
  // Timed iterations of each GPU probe, after 3 warm-up ones. REQUIRES: > 0.
  int iterations = 20;
};

PlatformReport ReportPlatform(const ReportOptions& options = {});

}  // namespace tandem::platform
