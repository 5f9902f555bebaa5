// A trace of what LibTorch runs, as torch.profiler records it: its operators and, on a GPU, the
// kernels, copies and CUDA runtime calls (PyTorch's Kineto profiler, CUPTI underneath), saved as a
// Chrome trace (chrome://tracing, Perfetto), the file torch.profiler's export_chrome_trace writes.
// `tandem run --colocated --profile FIRST LAST` records the steps FIRST to LAST with it.
//
// The profiler is LibTorch's, and process-wide: one trace at a time. Start it on the thread that
// runs the work; autograd's threads record under it too, and CUDA activity is recorded whichever
// thread launched it. Torch-free header (the CLI includes it).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace tandem::platform {

// OK when this LibTorch can save a trace; Unimplemented naming it when it is built without Kineto
// (Debian's 1.13). The first call asks LibTorch (an empty trace, saved), later ones remember.
absl::Status TracingAvailable();

// Starts recording CPU operators, and CUDA activity when `cuda`. FailedPrecondition while a trace
// is recording; Unimplemented naming the LibTorch when it is built without Kineto (Debian's 1.13),
// found out before anything is traced.
absl::Status StartTrace(bool cuda);

// Stops the trace StartTrace began and writes it to `path` (its directory must exist).
// FailedPrecondition when none is recording; Internal with LibTorch's message when it cannot write.
absl::Status SaveTrace(const std::string& path);

}  // namespace tandem::platform
