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

// A symbol that the library loaded at `base` defines itself (dlsym on a handle also searches the
// library's dependencies).
void* SymbolOf(void* handle, const void* base, const char* name) {
  void* symbol = handle != nullptr ? dlsym(handle, name) : nullptr;
  Dl_info where{};
  if (symbol == nullptr || dladdr(symbol, &where) == 0 || where.dli_fbase != base) return nullptr;
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
  // Ask that library (not the whole process) which functions it defines.
  void* handle = dlopen(where.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  using ConfigFn = char* (*)();
  using VersionFn = const char* (*)();
  auto openblas = reinterpret_cast<ConfigFn>(SymbolOf(handle, where.dli_fbase, "openblas_get_config"));
  auto parallel = reinterpret_cast<int (*)()>(SymbolOf(handle, where.dli_fbase, "openblas_get_parallel"));
  auto blis = reinterpret_cast<VersionFn>(SymbolOf(handle, where.dli_fbase, "bli_info_get_version_str"));
  void* mkl = SymbolOf(handle, where.dli_fbase, "mkl_get_version_string");
  info.kind = ClassifyBlas(info.library, openblas != nullptr, blis != nullptr, mkl != nullptr);
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
  return version + " (" + library + ")";
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
        << "OpenBLAS runs its own pthreads (" << blas.library
        << ") beside LibTorch's OpenMP threads, which trains small models 3-4x slower; point "
           "libblas.so.3 at the OpenMP build (scripts/setup does: apt-get install "
           "libopenblas0-openmp; update-alternatives --set libblas.so.3-$(gcc -print-multiarch) "
           ".../openblas-openmp/libblas.so.3)";
    return true;
  }
  return false;
}

}  // namespace tandem
