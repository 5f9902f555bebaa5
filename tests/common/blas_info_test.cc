// common/blas_info.h: naming a BLAS library by what it exports and where it lives, and finding the
// one this process uses (every test binary links LibTorch, which loads libblas.so.3 or its own).
#include "common/blas_info.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace tandem {
namespace {

using Kind = BlasInfo::Kind;

TEST(ClassifyBlas, NamesLibrariesByTheirSymbolsThenTheirPath) {
  EXPECT_EQ(ClassifyBlas("", false, false, false), Kind::kNone);
  EXPECT_EQ(
      ClassifyBlas("/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3", true, false, false),
      Kind::kOpenBlas);
  EXPECT_EQ(ClassifyBlas("/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3", false, true, false),
            Kind::kBlis);
  EXPECT_EQ(ClassifyBlas("/opt/intel/lib/libmkl_rt.so.2", false, false, true), Kind::kMkl);
  // Debian's reference BLAS: the alternative's home is .../blas/.
  EXPECT_EQ(ClassifyBlas("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0", false, false, false),
            Kind::kReference);
  EXPECT_EQ(ClassifyBlas("/usr/lib/librefblas.so.3", false, false, false), Kind::kReference);
  // A libblas.so.3 elsewhere that exports none of the known functions: not claimed as reference.
  EXPECT_EQ(ClassifyBlas("/usr/lib/x86_64-linux-gnu/atlas/libblas.so.3", false, false, false),
            Kind::kOther);
}

TEST(DetectBlas, FindsTheLibraryThatDefinesSgemm) {
  const BlasInfo blas = DetectBlas();
  if (blas.kind == Kind::kNone) {
    EXPECT_EQ(blas.Describe(), "none found in the process (sgemm_ is not exported)");
    GTEST_SKIP() << "LibTorch carries its own BLAS here";
  }
  EXPECT_TRUE(std::filesystem::exists(blas.library)) << blas.library;
  if (blas.implementation.empty()) {
    EXPECT_EQ(blas.Describe(), blas.version + " (" + blas.library + ")");
  } else {  // a wrapper: Debian's OpenBLAS libblas.so.3 over libopenblas.so.0
    EXPECT_TRUE(std::filesystem::exists(blas.implementation)) << blas.implementation;
    EXPECT_NE(blas.implementation, blas.library);
    EXPECT_EQ(blas.Describe(),
              blas.version + " (" + blas.library + " -> " + blas.implementation + ")");
  }
  switch (blas.kind) {
    case Kind::kOpenBlas:
      EXPECT_EQ(blas.version.rfind("OpenBLAS ", 0), 0u) << blas.version;
      EXPECT_TRUE(blas.threading == "sequential" || blas.threading == "pthreads" ||
                  blas.threading == "openmp")
          << blas.threading;
      break;
    case Kind::kReference:
      EXPECT_EQ(blas.version, "reference BLAS (netlib)");
      break;
    default:
      EXPECT_FALSE(blas.version.empty());
  }
}

}  // namespace
}  // namespace tandem
