// NCCL's version and a timed all-reduce across this process's GPUs, for platform/report.h. Defined
// only in a build with NCCL (TANDEM_HAVE_NCCL: nccl_probe.cc is compiled only then); internal to
// platform/. Torch-free and NCCL-free.
//
// Thread-safety: one MeasureAllReduce at a time per process, with nothing else on the GPUs.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "platform/report.h"

namespace tandem::platform {

// The version of the NCCL library loaded (ncclGetVersion), e.g. "2.28.9".
std::string NcclVersion();

// Sums one fp32 buffer of `bytes` per GPU across GPUs 0..gpus-1 (ncclCommInitAll, one grouped
// ncclAllReduce per iteration), 3 warm-up iterations then `iterations` timed ones, and checks the
// result. InvalidArgument for fewer than 2 GPUs; CUDA and NCCL errors name the call, file and line;
// Internal for a wrong sum.
absl::StatusOr<AllReduceSpeed> MeasureAllReduce(int gpus, int64_t bytes, int iterations);

}  // namespace tandem::platform
