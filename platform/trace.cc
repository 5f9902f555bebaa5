#include "platform/trace.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/version.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"

namespace tandem::platform {
namespace {

namespace profiler = torch::profiler::impl;

std::mutex g_mutex;
bool g_recording = false;  // guarded by g_mutex: LibTorch's profiler is one per process

std::string Message(const std::exception& e) {
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  return error != nullptr ? error->what_without_backtrace() : e.what();
}

void Enable(const std::set<profiler::ActivityType>& activities) {
  const profiler::ProfilerConfig config(profiler::ProfilerState::KINETO);
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
}

// A LibTorch built without Kineto (Debian's 1.13) records, and only refuses when the trace is
// saved: an empty trace saved once tells before any work is traced.
absl::Status CheckKineto() {
  char path[] = "/tmp/tandem-trace-probe-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return absl::InternalError("cannot create a temporary file for the profiler's probe");
  close(fd);
  absl::Status status;
  try {
    Enable({profiler::ActivityType::CPU});
    torch::autograd::profiler::disableProfiler()->save(path);
  } catch (const std::exception& e) {
    const std::string message = Message(e);
    status = message.find("Kineto") != std::string::npos
                 ? absl::UnimplementedError(absl::StrCat("LibTorch ", TORCH_VERSION,
                                                         " is built without the Kineto profiler"))
                 : absl::InternalError(absl::StrCat("LibTorch's profiler: ", message));
  }
  std::remove(path);
  return status;
}

}  // namespace

absl::Status TracingAvailable() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_recording) return absl::OkStatus();  // it is, and the probe would end the trace
  static const absl::Status kineto = CheckKineto();
  return kineto;
}

absl::Status StartTrace(bool cuda) {
  if (absl::Status available = TracingAvailable(); !available.ok()) return available;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_recording) return absl::FailedPreconditionError("a trace is recording already");
  std::set<profiler::ActivityType> activities{profiler::ActivityType::CPU};
  if (cuda) activities.insert(profiler::ActivityType::CUDA);
  try {
    Enable(activities);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cannot start LibTorch's profiler: ", Message(e)));
  }
  g_recording = true;
  return absl::OkStatus();
}

absl::Status SaveTrace(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_recording) return absl::FailedPreconditionError("no trace is recording");
  g_recording = false;
  try {
    std::unique_ptr<torch::autograd::profiler::ProfilerResult> result =
        torch::autograd::profiler::disableProfiler();
    result->save(path);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cannot write the trace ", path, ": ", Message(e)));
  }
  return absl::OkStatus();
}

}  // namespace tandem::platform
