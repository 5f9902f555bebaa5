#include "engine/communicator_checks.h"

#include "absl/strings/str_cat.h"

namespace tandem::engine {

absl::Status CheckTensorLayout(const at::Tensor& t, const char* name) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(name, " is undefined"));
  if (!t.is_contiguous())
    return absl::InvalidArgumentError(absl::StrCat(name, " is not contiguous"));
  return absl::OkStatus();
}

absl::Status CheckTensor(const at::Tensor& t, const char* name) {
  if (absl::Status layout = CheckTensorLayout(t, name); !layout.ok()) return layout;
  if (t.scalar_type() != at::kFloat && t.scalar_type() != at::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " has dtype ", c10::toString(t.scalar_type()), "; need fp32 or bf16"));
  }
  return absl::OkStatus();
}

absl::Status WithContext(const std::string& what, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

}  // namespace tandem::engine
