// `tandem doctor`: what to run first on a new node. It reports what this host offers Tandem (the
// LibTorch build, the BLAS, the CPU and its bf16, the CUDA devices, NCCL: platform/report.h),
// whether local links between actors can work here (platform/local_socket_probe.h) and, given
// --coordinator, whether the coordinator answers (its health service, then one call with the
// cluster's token); unless --skip-probes, it also times CPU matmuls and, on GPUs, a bf16 matmul
// each and an NCCL all-reduce across them. It ends with one verdict line:
//   "ready"                          nothing stands in the way
//   "ready with warnings: A; B"      it works, slower or with less than it could (reference BLAS,
//                                    pthreads OpenBLAS, no local links), or CUDA is there and
//                                    cannot serve (devices this build has no code for, a loaded
//                                    NVIDIA driver under which CUDA fails)
//   "not ready: A; B"                a coordinator that was asked for and does not answer, a GPU
//                                    probe that failed
// Notes (no native bf16 on the CPU, no CUDA device) are printed but change nothing.
// `--output json` prints the same as one object (docs/service.md, "Checking a node", lists its
// fields). Exit code 0 when ready (warnings allowed), 1 when not, 2 for bad flags (cli/main.cc).
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::cli {

void AddDoctorCommand(CLI::App& app, int* exit_code);

}  // namespace tandem::cli
