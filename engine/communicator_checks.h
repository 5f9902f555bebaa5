// What every Communicator backend (communicator.h) shares: the Work of an operation that ended
// when it was issued (an argument error, an exception while issuing, world size 1), the checks of
// its tensor arguments, and the "<what>: " prefix of its errors.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "engine/communicator.h"

namespace tandem::engine {

class ReadyWork final : public Work {
 public:
  explicit ReadyWork(absl::Status status) : status_(std::move(status)) {}
  bool IsCompleted() override { return true; }
  absl::Status Wait(std::chrono::milliseconds) override { return status_; }

 private:
  const absl::Status status_;
};

// InvalidArgument "<name> is undefined" or "<name> is not contiguous"; the device and dtype are the
// backend's to check.
absl::Status CheckTensorLayout(const at::Tensor& t, const char* name);

// CheckTensorLayout, then the dtype of a CPU reduction: "<name> has dtype Half; need fp32 or bf16".
absl::Status CheckTensor(const at::Tensor& t, const char* name);

// `status` with "<what>: " before its message; OK stays OK.
absl::Status WithContext(const std::string& what, const absl::Status& status);

}  // namespace tandem::engine
