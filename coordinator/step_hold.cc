#include "coordinator/step_hold.h"

#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "common/atomic_file.h"

namespace tandem::coordinator {

StepHold::StepHold(const std::string& dir, const std::string& job_name,
                   std::chrono::milliseconds poll)
    : path_(dir.empty() ? "" : (std::filesystem::path(dir) / (job_name + ".hold")).string()),
      poll_(poll) {}

std::optional<int64_t> StepHold::HeldStep() const {
  if (path_.empty()) return std::nullopt;
  absl::StatusOr<std::string> text = ReadFile(path_);
  int64_t step = 0;
  if (!text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &step) || step < 0) {
    return std::nullopt;
  }
  return step;
}

bool StepHold::WaitWhileHeld(int64_t step) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!interrupted_) {
    lock.unlock();
    const bool held = HeldStep() == step;
    lock.lock();
    if (!held) return !interrupted_;
    interrupted_cv_.wait_for(lock, poll_, [&] { return interrupted_; });
  }
  return false;
}

void StepHold::Interrupt() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    interrupted_ = true;
  }
  interrupted_cv_.notify_all();
}

}  // namespace tandem::coordinator
