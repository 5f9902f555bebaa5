#include "engine/cuda_ops.h"

#ifdef TANDEM_CUDA_TORCH
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "absl/strings/str_cat.h"
#include "engine/compat.h"

namespace tandem::engine {

#if defined(TANDEM_CUDA_TORCH) && defined(TANDEM_HAVE_CUDA_KERNELS)

absl::Status RunAdamWOnDevice(const kernels::AdamWBuffers& buffers,
                              const kernels::AdamWHyper& hyper, c10::Device device) {
  c10::cuda::CUDAGuard guard(device);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  if (const int error = kernels::AdamWCuda(buffers, hyper, stream); error != cudaSuccess) {
    const auto code = static_cast<cudaError_t>(error);
    return absl::InternalError(absl::StrCat(__FILE__, ":", __LINE__, ": AdamW kernel on ",
                                            device.str(), ": ", cudaGetErrorName(code), ": ",
                                            cudaGetErrorString(code)));
  }
  return absl::OkStatus();
}

int64_t DevicePeakBytes(c10::Device device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  constexpr auto kAggregate = static_cast<size_t>(TANDEM_CUDA_ALLOCATOR_STAT_TYPE::AGGREGATE);
  return stats.allocated_bytes[kAggregate].peak;
}

#endif

#ifdef TANDEM_CUDA_TORCH
void ReleaseCachedDeviceMemory() { c10::cuda::CUDACachingAllocator::emptyCache(); }
#else
void ReleaseCachedDeviceMemory() {}
#endif

#if !(defined(TANDEM_CUDA_TORCH) && defined(TANDEM_HAVE_CUDA_KERNELS))

absl::Status RunAdamWOnDevice(const kernels::AdamWBuffers&, const kernels::AdamWHyper&,
                              c10::Device device) {
  return absl::UnimplementedError(absl::StrCat("engine: parameters are on ", device.str(),
                                               " but Tandem was built without CUDA support"));
}

int64_t DevicePeakBytes(c10::Device) { return 0; }

#endif

}  // namespace tandem::engine
