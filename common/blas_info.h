// Which BLAS library this process multiplies fp32 matrices with, found in the process itself: the
// library that defines the Fortran symbol sgemm_, named by the functions only it (or the library it
// wraps: Debian's OpenBLAS libblas.so.3 calls libopenblas.so.0) exports.
//
// Why it matters: Debian's LibTorch calls the generic libblas.so.3, which the alternatives system
// points at the reference (netlib) BLAS unless an optimised one is installed. The reference one
// runs fp32 matmuls about 40x slower than OpenBLAS (2.6 against 102 GFLOP/s on a 2-core EPYC), and
// every fp32 step of Tandem with it. scripts/setup installs OpenBLAS; `tandem run` and `tandem
// actor` warn once at start when the reference BLAS is what they got (WarnIfSlowBlas).
//
// OpenBLAS comes in two Debian builds that both provide libblas.so.3: with OpenMP (its threads are
// LibTorch's intra-op threads) and with pthreads (threads of its own, spinning beside LibTorch's,
// which trains small models 3-4x slower on a 2-core machine: 469 against 1995 samples/s colocated
// on the shapes example). apt's automatic choice prefers pthreads; scripts/setup picks OpenMP.
//
// A LibTorch that carries its own BLAS (the PyPI wheel links MKL into libtorch_cpu.so) is no
// libblas.so.3 to choose: when sgemm_ is LibTorch's own, or absent, kind is kNone and the caller
// names LibTorch's build setting (BLAS_INFO) instead.
//
// Thread-safe.
#pragma once

#include <string>

namespace tandem {

struct BlasInfo {
  enum class Kind { kNone, kReference, kOpenBlas, kBlis, kMkl, kOther };
  Kind kind = Kind::kNone;
  std::string library;  // the file that defines sgemm_, links resolved ("" for kNone)
  // The file that does the work when `library` wraps another one, links resolved; "" otherwise.
  // Debian's OpenBLAS libblas.so.3 calls libopenblas.so.0, an alternative of its own that may point
  // at the other build (libblas.so.3 at openblas-openmp, libopenblas.so.0 at openblas-pthread).
  std::string implementation;
  std::string version;    // e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
  std::string threading;  // OpenBLAS: "sequential", "pthreads" or "openmp"; "" otherwise

  // One line for reports: "OpenBLAS 0.3.21 ... (/usr/lib/.../libopenblasp-r0.3.21.so)", or with a
  // wrapper "OpenBLAS 0.3.21 ... (.../openblas-openmp/libblas.so.3 ->
  // .../libopenblasp-r0.3.21.so)".
  std::string Describe() const;
};

BlasInfo DetectBlas();

// Names a library by the symbols it (or the library it wraps) defines and its resolved path:
// OpenBLAS exports openblas_get_config, BLIS bli_info_get_version_str, MKL mkl_get_version_string;
// the reference BLAS exports none of them (its Debian home is .../blas/libblas.so.3). Exposed for
// tests.
BlasInfo::Kind ClassifyBlas(const std::string& library, bool has_openblas, bool has_blis,
                            bool has_mkl);

// Logs one warning (component "blas") when DetectBlas() finds the reference BLAS or the pthreads
// OpenBLAS, saying what it costs and what to install. Returns whether it warned.
bool WarnIfSlowBlas();

}  // namespace tandem
