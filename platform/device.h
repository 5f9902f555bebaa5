// Which device a process trains on: the `--device` flags of `tandem run` and `tandem actor`.
// Torch-free header (the CLI includes it); the implementation asks LibTorch how many CUDA devices
// this process sees.
//
//   cpu      the CPU
//   cuda:N   CUDA device N (0 <= N < the devices visible, $CUDA_VISIBLE_DEVICES applied)
//   cuda     `tandem run` only: the r-th actor of each group on device r mod the devices visible,
//            so a host's GPUs are shared out, and a group with no more actors than devices never
//            puts two ranks of one NCCL communicator on one device
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace tandem::platform {

// CUDA devices this process sees; 0 without a CUDA LibTorch, a driver or a device.
int CudaDeviceCount();

// OK when `device` names a device of this host (`cuda_devices` of them). `allow_spread` admits the
// bare "cuda". Errors are InvalidArgument naming `flag` and the devices there are, e.g.
// "--device cuda:2: this host has 1 CUDA device (cuda:0)"; an empty `flag` leaves it out.
absl::Status CheckDevice(const std::string& flag, const std::string& device, int cuda_devices,
                         bool allow_spread);

// The device of the `rank`-th actor of a group under a checked `device`: "cuda" spreads the ranks
// over the `cuda_devices` devices, any other value is every rank's.
std::string DeviceOfRank(const std::string& device, int rank, int cuda_devices);

// The memory a job may use on `device`: a CUDA device's total memory; for "cpu" the host's
// physical memory (MemTotal of /proc/meminfo), or its cgroup's limit (memory.max, v1's
// memory.limit_in_bytes) when that is lower, as in a Kubernetes pod. 0 when unknown.
int64_t DeviceMemoryBytes(const std::string& device);

// The smaller of MemTotal in `meminfo` (the text of /proc/meminfo) and a cgroup limit `limit` (the
// text of memory.max: a byte count or "max"); 0 when neither gives a number. Exposed for tests.
int64_t HostMemoryBytes(const std::string& meminfo, const std::string& limit);

}  // namespace tandem::platform
