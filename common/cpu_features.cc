#include "common/cpu_features.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace tandem {
namespace {

std::string Join(const std::vector<const char*>& names, const char* separator) {
  std::string out;
  for (const char* name : names) {
    if (!out.empty()) out += separator;
    out += name;
  }
  return out;
}

#if defined(__x86_64__) || defined(__i386__)
// XCR0: which register states the OS saves on a context switch (so the instructions are usable).
unsigned long long ReadXcr0() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return 0;  // no OSXSAVE
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

CpuFeatures DetectX86() {
  CpuFeatures f;
  f.arch = "x86_64";
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  const unsigned long long xcr0 = ReadXcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;                 // XMM and YMM
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;         // XTILECFG, XTILEDATA
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    const unsigned subleaves = eax;
    f.avx2 = os_avx && (ebx & (1u << 5));
    f.avx512 = os_avx512 && (ebx & (1u << 16));
    f.amx_bf16 = os_amx && (edx & (1u << 22)) && (edx & (1u << 24));
    if (subleaves >= 1) {
      __cpuid_count(7, 1, eax, ebx, ecx, edx);
      f.avx512_bf16 = f.avx512 && (eax & (1u << 5));
    }
  }
  char brand[49] = {};
  if (__get_cpuid_max(0x80000000, nullptr) >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i) {
      __cpuid(0x80000002 + i, eax, ebx, ecx, edx);
      std::memcpy(brand + 16 * i, &eax, 4);
      std::memcpy(brand + 16 * i + 4, &ebx, 4);
      std::memcpy(brand + 16 * i + 8, &ecx, 4);
      std::memcpy(brand + 16 * i + 12, &edx, 4);
    }
  }
  f.model = brand;
  while (!f.model.empty() && f.model.back() == ' ') f.model.pop_back();
  while (!f.model.empty() && f.model.front() == ' ') f.model.erase(0, 1);
  return f;
}
#endif

CpuFeatures Detect() {
#if defined(__x86_64__) || defined(__i386__)
  return DetectX86();
#elif defined(__aarch64__)
  CpuFeatures f;
  f.arch = "aarch64";
#ifdef HWCAP2_BF16
  f.arm_bf16 = (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
#endif
  return f;
#else
  CpuFeatures f;
  f.arch = "unknown";
  return f;
#endif
}

}  // namespace

std::string CpuFeatures::Bf16Instructions() const {
  std::vector<const char*> names;
  if (avx512_bf16) names.push_back("avx512_bf16");
  if (amx_bf16) names.push_back("amx_bf16");
  if (arm_bf16) names.push_back("bf16");
  return Join(names, ", ");
}

std::string CpuFeatures::Summary() const {
  std::vector<const char*> names;
  if (avx2) names.push_back("avx2");
  if (avx512) names.push_back("avx512");
  if (avx512_bf16) names.push_back("avx512_bf16");
  if (amx_bf16) names.push_back("amx_bf16");
  if (arm_bf16) names.push_back("bf16");
  return names.empty() ? "none of avx2, avx512, bf16" : Join(names, " ");
}

const CpuFeatures& DetectCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace tandem
