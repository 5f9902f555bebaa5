#include "platform/device.h"

#include <ATen/detail/CUDAHooksInterface.h>

#include <exception>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

#ifdef TANDEM_CUDA_TORCH
#include <ATen/cuda/CUDAContext.h>
#endif

namespace tandem::platform {

int CudaDeviceCount() {
  try {
    return at::detail::getCUDAHooks().getNumGPUs();
  } catch (const std::exception&) {
    return 0;  // a CUDA LibTorch without a usable driver
  }
}

absl::Status CheckDevice(const std::string& flag, const std::string& device, int cuda_devices,
                         bool allow_spread) {
  const std::string what = absl::StrCat(flag, flag.empty() ? "" : " ", device, ": ");
  const std::string there =
      cuda_devices == 0   ? "this host has no CUDA device"
      : cuda_devices == 1 ? "this host has 1 CUDA device (cuda:0)"
                          : absl::StrCat("this host has ", cuda_devices,
                                         " CUDA devices (cuda:0 to cuda:", cuda_devices - 1, ")");
  if (device == "cpu") return absl::OkStatus();
  if (device == "cuda" && allow_spread) {
    if (cuda_devices == 0) return absl::InvalidArgumentError(what + there);
    return absl::OkStatus();
  }
  absl::string_view index_text = device;
  int index = -1;
  if (!absl::ConsumePrefix(&index_text, "cuda:") || index_text.empty() ||
      index_text.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(index_text, &index)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "expected cpu", allow_spread ? ", cuda" : "", " or cuda:N"));
  }
  if (index >= cuda_devices) return absl::InvalidArgumentError(what + there);
  return absl::OkStatus();
}

std::string DeviceOfRank(const std::string& device, int rank, int cuda_devices) {
  if (device != "cuda" || cuda_devices <= 0) return device;
  return absl::StrCat("cuda:", rank % cuda_devices);
}

namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

int64_t HostMemoryBytes(const std::string& meminfo, const std::string& limit) {
  int64_t total = 0;
  std::istringstream lines(meminfo);
  for (std::string line; std::getline(lines, line);) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "MemTotal:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    int64_t kib = 0;
    if (absl::ConsumeSuffix(&rest, "kB") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib))
      total = kib * 1024;
  }
  int64_t cap = 0;
  // cgroup v1 reports "no limit" as a number near 2^63: any cap above the total is none.
  if (absl::SimpleAtoi(absl::StripAsciiWhitespace(limit), &cap) && cap > 0 &&
      (total == 0 || cap < total))
    return cap;
  return total;
}

int64_t DeviceMemoryBytes(const std::string& device) {
  if (device == "cpu") {
    std::string limit = ReadText("/sys/fs/cgroup/memory.max");
    if (limit.empty()) limit = ReadText("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    return HostMemoryBytes(ReadText("/proc/meminfo"), limit);
  }
#ifdef TANDEM_CUDA_TORCH
  absl::string_view index_text = device;
  int index = 0;
  if (absl::ConsumePrefix(&index_text, "cuda:") && absl::SimpleAtoi(index_text, &index) &&
      index >= 0 && index < CudaDeviceCount()) {
    try {
      return static_cast<int64_t>(at::cuda::getDeviceProperties(index)->totalGlobalMem);
    } catch (const std::exception&) {
      return 0;
    }
  }
#endif
  return 0;
}

}  // namespace tandem::platform
