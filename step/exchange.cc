#include "step/exchange.h"

#include <c10/util/Exception.h>

#include "absl/strings/str_cat.h"

namespace tandem::step {

absl::StatusOr<TensorBytes> BytesOf(const at::Tensor& tensor) {
  TensorBytes bytes;
  switch (tensor.scalar_type()) {
    case at::kBFloat16:
      bytes.dtype = DType::kBFloat16;
      break;
    case at::kFloat:
      bytes.dtype = DType::kFloat32;
      break;
    case at::kDouble:
      bytes.dtype = DType::kFloat64;
      break;
    case at::kByte:
      bytes.dtype = DType::kUInt8;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("a ", c10::toString(tensor.scalar_type()),
                       " tensor cannot cross between the groups "
                       "(transfers carry bfloat16, float32, float64, uint8)"));
  }
  bytes.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
  bytes.data = static_cast<std::byte*>(tensor.data_ptr());
  bytes.size = tensor.numel() * tensor.element_size();
  return bytes;
}

transport::TransferTag MakeTag(const std::string& transfer_key, transport::TransferKind kind,
                               int64_t step, int64_t micro_batch, SampleRange samples,
                               int source_rank) {
  transport::TransferTag tag;
  tag.job_id = transfer_key;
  tag.kind = kind;
  tag.step = step;
  tag.micro_batch = micro_batch;
  tag.sample_begin = samples.begin;
  tag.sample_end = samples.end;
  tag.source_rank = source_rank;
  return tag;
}

}  // namespace tandem::step
