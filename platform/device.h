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

// The device of the `rank`-th actor of a group under a checked `device`: "cuda" spreads the ranks over
// the `cuda_devices` devices, any other value is every rank's.
std::string DeviceOfRank(const std::string& device, int rank, int cuda_devices);

}  // namespace tandem::platform
