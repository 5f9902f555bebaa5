#include "platform/report.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/version.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

#ifdef TANDEM_CUDA_TORCH
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif
#ifdef TANDEM_HAVE_NCCL
#include "platform/nccl_probe.h"
#endif

namespace tandem::platform {
namespace {

// The value of `key=` in show_config's comma-separated "Build settings", or "".
std::string BuildSetting(const std::string& config, const std::string& key) {
  const std::string needle = key + "=";
  size_t at = config.find(needle);
  // A whole key: at the start of the list or after ", ".
  while (at != std::string::npos && at > 0 && config[at - 1] != ' ')
    at = config.find(needle, at + 1);
  if (at == std::string::npos) return "";
  const size_t begin = at + needle.size();
  const size_t end = config.find_first_of(",\n", begin);
  return config.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

LibTorchInfo DescribeLibTorch() {
  LibTorchInfo info;
  info.version = TORCH_VERSION;
  const std::string config = at::show_config();
  info.cuda = BuildSetting(config, "USE_CUDA") == "ON";
  if (info.cuda) info.cuda_version = BuildSetting(config, "CUDA_VERSION");
  info.blas_info = BuildSetting(config, "BLAS_INFO");
  std::istringstream lines(config);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("Math Kernel Library") != std::string::npos) {
      info.mkl = std::string(absl::StripPrefix(absl::StripLeadingAsciiWhitespace(line), "- "));
      const size_t tail = info.mkl.find(" for Intel(R) 64 architecture");
      if (tail != std::string::npos) info.mkl.resize(tail);
    }
  }
#ifdef TANDEM_CUDA_TORCH
  info.tandem_cuda = true;
#endif
  info.threads = at::get_num_threads();
  return info;
}

#ifdef TANDEM_CUDA_TORCH

// TFLOP/s of a size x size bf16 matmul on `index`: 3 warm-up calls, then `iterations` timed ones
// between two device synchronisations.
double MeasureGpuMatmul(int index, int size, int iterations) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  const auto options = at::TensorOptions()
                           .device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index)))
                           .dtype(at::kBFloat16);
  const at::Tensor a = at::randn({size, size}, options), b = at::randn({size, size}, options);
  at::Tensor c = at::empty({size, size}, options);
  for (int i = 0; i < 3; ++i) at::mm_out(c, a, b);  // cuBLAS handle, workspace, clocks up
  C10_CUDA_CHECK(cudaDeviceSynchronize());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) at::mm_out(c, a, b);
  C10_CUDA_CHECK(cudaDeviceSynchronize());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 2.0 * size * size * static_cast<double>(size) * iterations / seconds / 1e12;
}

CudaReport DescribeCuda(const LibTorchInfo& libtorch, const ReportOptions& options) {
  CudaReport report;
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // clear it for LibTorch
    // With the NVIDIA kernel driver loaded, a failure is a broken node (a driver older than the
    // CUDA runtime, devices taken away); without it, a machine with no GPU.
    const bool driver = std::filesystem::exists("/proc/driver/nvidia/version");
    report.unusable = driver;
    report.none_reason = absl::StrCat(driver ? "the NVIDIA driver is loaded, but CUDA fails: "
                                             : "no CUDA device (no NVIDIA driver): ",
                                      cudaGetErrorString(error));
    return report;
  }
  if (count == 0) report.none_reason = "no CUDA device";
  for (int i = 0; i < count; ++i) {
    CudaDevice device;
    device.index = i;
    try {
      const cudaDeviceProp* props = at::cuda::getDeviceProperties(i);
      device.name = props->name;
      device.major = props->major;
      device.minor = props->minor;
      device.memory_bytes = static_cast<int64_t>(props->totalGlobalMem);
      device.bf16 = DetectBf16Support(absl::StrCat("cuda:", i));
      if (options.probes) {
        device.bf16_matmul_tflops =
            MeasureGpuMatmul(i, options.gpu_matmul_size, options.iterations);
      }
    } catch (const std::exception& e) {
      device.error = e.what();
    }
    report.devices.push_back(std::move(device));
  }
  return report;
}

#else

CudaReport DescribeCuda(const LibTorchInfo& libtorch, const ReportOptions& options) {
  CudaReport report;
  if (!libtorch.cuda) {
    report.none_reason = absl::StrCat("LibTorch ", libtorch.version, " is built without CUDA");
    return report;
  }
  const int visible = at::detail::getCUDAHooks().getNumGPUs();
  report.unusable = visible > 0;
  report.none_reason =
      visible > 0 ? absl::StrCat(visible,
                                 " CUDA device(s), but this build of Tandem has no CUDA code "
                                 "(it was configured without CUDA or without NCCL)")
                  : "no CUDA device";
  return report;
}

#endif  // TANDEM_CUDA_TORCH

NcclReport DescribeNccl(const CudaReport& cuda, const ReportOptions& options) {
  NcclReport report;
#ifdef TANDEM_HAVE_NCCL
  report.built_in = true;
  report.version = NcclVersion();
  const int gpus = static_cast<int>(cuda.devices.size());
  if (options.probes && gpus >= 2) {
    absl::StatusOr<AllReduceSpeed> speed =
        MeasureAllReduce(gpus, options.all_reduce_bytes, options.iterations);
    if (speed.ok()) {
      report.all_reduce = *speed;
    } else {
      report.error = std::string(speed.status().message());
    }
  }
#endif
  return report;
}

}  // namespace

PlatformReport ReportPlatform(const ReportOptions& options) {
  PlatformReport report;
  report.libtorch = DescribeLibTorch();
  report.blas = DetectBlas();
  report.cpu.features = DetectCpuFeatures();
  report.cpu.bf16 = DetectBf16Support("cpu");
  report.cpu.bf16_override = GetCpuBf16Override();
  if (options.probes) report.cpu.matmul = MeasureCpuMatmul();
  report.cuda = DescribeCuda(report.libtorch, options);
  report.nccl = DescribeNccl(report.cuda, options);
  return report;
}

}  // namespace tandem::platform
