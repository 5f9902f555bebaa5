#include "platform/device.h"

#include <ATen/detail/CUDAHooksInterface.h>

#include <exception>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

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
      cuda_devices == 0 ? "this host has no CUDA device"
      : cuda_devices == 1
          ? "this host has 1 CUDA device (cuda:0)"
          : absl::StrCat("this host has ", cuda_devices, " CUDA devices (cuda:0 to cuda:",
                         cuda_devices - 1, ")");
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
    return absl::InvalidArgumentError(absl::StrCat(
        what, "expected cpu", allow_spread ? ", cuda" : "", " or cuda:N"));
  }
  if (index >= cuda_devices) return absl::InvalidArgumentError(what + there);
  return absl::OkStatus();
}

std::string DeviceOfRank(const std::string& device, int rank, int cuda_devices) {
  if (device != "cuda" || cuda_devices <= 0) return device;
  return absl::StrCat("cuda:", rank % cuda_devices);
}

}  // namespace tandem::platform
