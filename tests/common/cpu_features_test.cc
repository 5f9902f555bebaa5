// common/cpu_features.h against an independent source: the kernel's /proc/cpuinfo flags.
#include "common/cpu_features.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace tandem {
namespace {

std::set<std::string> KernelFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string word; words >> word;) flags.insert(word);
    return flags;
  }
  return {};
}

TEST(CpuFeatures, AgreeWithTheKernelsCpuFlags) {
#if defined(__x86_64__)
  const CpuFeatures& cpu = DetectCpuFeatures();
  const std::set<std::string> flags = KernelFlags();
  ASSERT_FALSE(flags.empty()) << "no flags line in /proc/cpuinfo";
  EXPECT_EQ(cpu.arch, "x86_64");
  EXPECT_EQ(cpu.avx2, flags.count("avx2") == 1);
  EXPECT_EQ(cpu.avx512, flags.count("avx512f") == 1);
  EXPECT_EQ(cpu.avx512_bf16, flags.count("avx512_bf16") == 1);
  EXPECT_EQ(cpu.amx_bf16, flags.count("amx_bf16") == 1 && flags.count("amx_tile") == 1);
  EXPECT_EQ(cpu.native_bf16(), cpu.avx512_bf16 || cpu.amx_bf16);
  EXPECT_EQ(cpu.Bf16Instructions().empty(), !cpu.native_bf16());
  EXPECT_FALSE(cpu.model.empty());
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

TEST(CpuFeatures, SummaryNamesWhatIsPresent) {
  CpuFeatures cpu;
  EXPECT_EQ(cpu.Summary(), "none of avx2, avx512, bf16");
  cpu.avx2 = cpu.avx512 = cpu.avx512_bf16 = true;
  EXPECT_EQ(cpu.Summary(), "avx2 avx512 avx512_bf16");
  EXPECT_EQ(cpu.Bf16Instructions(), "avx512_bf16");
  cpu.amx_bf16 = true;
  EXPECT_EQ(cpu.Bf16Instructions(), "avx512_bf16, amx_bf16");
}

}  // namespace
}  // namespace tandem
