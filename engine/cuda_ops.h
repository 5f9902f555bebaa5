// Device-side pieces of the engine that need a CUDA LibTorch (current stream, allocator
// statistics). With a CPU-only LibTorch they return Unimplemented / 0, and the engine never calls
// them for CPU tensors.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/adamw.h"

namespace tandem::engine {

// Runs the fused AdamW kernel on `device`'s current CUDA stream.
absl::Status RunAdamWOnDevice(const kernels::AdamWBuffers& buffers,
                              const kernels::AdamWHyper& hyper, c10::Device device);

// Peak bytes allocated by the CUDA caching allocator on `device` since the process started.
int64_t DevicePeakBytes(c10::Device device);

// Hands the CUDA caching allocator's free blocks back to the driver (torch.cuda.empty_cache()), so
// memory a finished job held is free for other processes; nothing without a CUDA LibTorch.
void ReleaseCachedDeviceMemory();

}  // namespace tandem::engine
