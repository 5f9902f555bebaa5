// main() of every test binary: GoogleTest's, after applying TANDEM_CPU_BF16 as the `tandem` binary
// does (platform/bf16_support.h), so `TANDEM_CPU_BF16=absent scripts/test` runs the whole suite as
// on a CPU without native bf16.
#include <gtest/gtest.h>

#include <cstdio>

#include "platform/bf16_support.h"

int main(int argc, char** argv) {
  const absl::Status bf16 = tandem::platform::ApplyCpuBf16OverrideFromEnvironment();
  if (!bf16.ok()) {
    std::fprintf(stderr, "%s\n", std::string(bf16.message()).c_str());
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
