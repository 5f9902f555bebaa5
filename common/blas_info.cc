#include "common/blas_info.h"

#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <cstdlib>

#include "common/logging.h"

namespace tandem {
namespace {

std::string Resolved(const char* path) {
  char buffer[PATH_MAX];
  if (path != nullptr && realpath(path, buffer) != nullptr) return buffer;
  return path != nullptr ? path : "";
}

// A symbol of the library `handle` or of a library it depends on (dlsym on a handle searches both):
// Debian's OpenBLAS libblas.so.3 is a thin wrapper whose work, and openblas_get_config, live in
// libopenblas.so.0. A reference BLAS depends on no other BLAS, so nothing it loads defines the
// names asked for here. `file` receives the resolved file that defines the symbol.
void* SymbolOf(void* handle, const char* name, std::string* file) {
  void* symbol = handle != nullptr ? dlsym(handle, name) : nullptr;
  Dl_info where{};
  if (symbol == nullptr || dladdr(symbol, &where) == 0 || where.dli_fname == nullptr)
    return nullptr;
  *file = Resolved(where.dli_fname);
  return symbol;
}

}  // namespace

BlasInfo::Kind ClassifyBlas(const std::string& library, bool has_openblas, bool has_blis,
                            bool has_mkl) {
  if (library.empty()) return BlasInfo::Kind::kNone;
  if (has_openblas) return BlasInfo::Kind::kOpenBlas;
  if (has_blis) return BlasInfo::Kind::kBlis;
  if (has_mkl) return BlasInfo::Kind::kMkl;
  const std::string::size_type slash = library.find_last_of('/');
  const std::string file = library.substr(slash == std::string::npos ? 0 : slash + 1);
  const std::string dir = slash == std::string::npos ? "" : library.substr(0, slash);
  // Debian and Ubuntu install netlib's reference BLAS as .../blas/libblas.so.3(.x.y); the optimised
  // ones live in .../openblas-*/, .../blis-*/, .../atlas/ under the same alternative name.
  const bool reference_dir = dir.size() >= 5 && dir.compare(dir.size() - 5, 5, "/blas") == 0;
  if (file.rfind("libblas.so", 0) == 0 && (reference_dir || dir.empty())) {
    return BlasInfo::Kind::kReference;
  }
  if (file.rfind("librefblas", 0) == 0) return BlasInfo::Kind::kReference;
  return BlasInfo::Kind::kOther;
}

BlasInfo DetectBlas() {
  BlasInfo info;
  void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info where{};
  if (sgemm == nullptr || dladdr(sgemm, &where) == 0 || where.dli_fname == nullptr) return info;
  info.library = Resolved(where.dli_fname);
  // LibTorch's own BLAS (the PyPI wheel links MKL into libtorch_cpu.so, which then exports sgemm_):
  // the caller names LibTorch's build setting (BLAS_INFO) instead.
  const std::string::size_type slash = info.library.find_last_of('/');
  if (info.library.compare(slash == std::string::npos ? 0 : slash + 1, 8, "libtorch") == 0) {
    info.library.clear();
    return info;
  }
  // Ask that library and what it loads (not the whole process) which functions they define.
  void* handle = dlopen(where.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  using ConfigFn = char* (*)();
  using VersionFn = const char* (*)();
  std::string openblas_file, blis_file, mkl_file, unused;
  auto openblas =
      reinterpret_cast<ConfigFn>(SymbolOf(handle, "openblas_get_config", &openblas_file));
  auto parallel = reinterpret_cast<int (*)()>(SymbolOf(handle, "openblas_get_parallel", &unused));
  auto blis = reinterpret_cast<VersionFn>(SymbolOf(handle, "bli_info_get_version_str", &blis_file));
  void* mkl = SymbolOf(handle, "mkl_get_version_string", &mkl_file);
  info.kind = ClassifyBlas(info.library, openblas != nullptr, blis != nullptr, mkl != nullptr);
  const std::string& implementation = openblas != nullptr ? openblas_file
                                      : blis != nullptr   ? blis_file
                                                          : mkl_file;
  if (!implementation.empty() && implementation != info.library)
    info.implementation = implementation;
  switch (info.kind) {
    case BlasInfo::Kind::kOpenBlas:
      info.version = openblas();
      if (info.version.rfind("OpenBLAS", 0) != 0) info.version = "OpenBLAS " + info.version;
      if (parallel != nullptr) {
        const int mode = parallel();
        info.threading = mode == 0 ? "sequential" : mode == 1 ? "pthreads" : "openmp";
      }
      break;
    case BlasInfo::Kind::kBlis:
      info.version = std::string("BLIS ") + blis();
      break;
    case BlasInfo::Kind::kMkl:
      info.version = "Intel MKL";
      break;
    case BlasInfo::Kind::kReference:
      info.version = "reference BLAS (netlib)";
      break;
    case BlasInfo::Kind::kOther:
      info.version = "unrecognised BLAS";
      break;
    case BlasInfo::Kind::kNone:
      break;
  }
  if (handle != nullptr) dlclose(handle);
  return info;
}

std::string BlasInfo::Describe() const {
  if (kind == Kind::kNone) return "none found in the process (sgemm_ is not exported)";
  return version + " (" + library + (implementation.empty() ? "" : " -> " + implementation) + ")";
}

bool WarnIfSlowBlas() {
  const BlasInfo blas = DetectBlas();
  if (blas.kind == BlasInfo::Kind::kReference) {
    TANDEM_LOG(kWarning, "blas")
        << "LibTorch multiplies fp32 matrices with the reference BLAS (" << blas.library
        << "), about 40x slower than an optimised one; install OpenBLAS (scripts/setup does: "
           "apt-get install libopenblas0-openmp) and libblas.so.3 switches to it";
    return true;
  }
  if (blas.kind == BlasInfo::Kind::kOpenBlas && blas.threading == "pthreads") {
    TANDEM_LOG(kWarning, "blas")
        << "OpenBLAS runs its own pthreads ("
        << (blas.implementation.empty() ? blas.library
                                        : blas.library + " -> " + blas.implementation)
        << ") beside LibTorch's OpenMP threads, which trains small models 3-4x slower; point "
           "libblas.so.3 and libopenblas.so.0 at the OpenMP build (apt-get install "
           "libopenblas0-openmp; update-alternatives --set libblas.so.3-$(gcc -print-multiarch) "
           ".../openblas-openmp/libblas.so.3, and libopenblas.so.0-$(gcc -print-multiarch) "
           ".../openblas-openmp/libopenblas.so.0)";
    return true;
  }
  return false;
}

}  // namespace tandem
