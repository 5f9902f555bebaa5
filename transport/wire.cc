#include "transport/wire.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::transport {

void ToProto(const TransferTag& tag, tandem::v1::TransferTag* out) {
  out->set_job_id(tag.job_id);
  out->set_kind(static_cast<tandem::v1::TransferKind>(tag.kind));
  out->set_step(tag.step);
  out->set_micro_batch(tag.micro_batch);
  out->set_sample_begin(tag.sample_begin);
  out->set_sample_end(tag.sample_end);
  out->set_source_rank(tag.source_rank);
}

tandem::v1::DType ToProto(DType dtype) { return static_cast<tandem::v1::DType>(dtype); }

absl::StatusOr<TransferTag> FromProto(const tandem::v1::TransferTag& tag) {
  switch (tag.kind()) {
    case tandem::v1::TRANSFER_KIND_EMBEDDINGS:
    case tandem::v1::TRANSFER_KIND_GRADIENTS:
    case tandem::v1::TRANSFER_KIND_EVAL_EMBEDDINGS:
    case tandem::v1::TRANSFER_KIND_GRAD_SQUARES:
    case tandem::v1::TRANSFER_KIND_BAD_SAMPLES:
    case tandem::v1::TRANSFER_KIND_TEXT_TOKENS:
    case tandem::v1::TRANSFER_KIND_SNAPSHOT:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown transfer kind ", tag.kind()));
  }
  TransferTag out;
  out.job_id = tag.job_id();
  out.kind = static_cast<TransferKind>(tag.kind());
  out.step = tag.step();
  out.micro_batch = tag.micro_batch();
  out.sample_begin = tag.sample_begin();
  out.sample_end = tag.sample_end();
  out.source_rank = tag.source_rank();
  return out;
}

absl::StatusOr<DType> FromProto(tandem::v1::DType dtype) {
  switch (dtype) {
    case tandem::v1::DTYPE_FLOAT32:
    case tandem::v1::DTYPE_BFLOAT16:
    case tandem::v1::DTYPE_FLOAT16:
    case tandem::v1::DTYPE_FLOAT64:
    case tandem::v1::DTYPE_UINT8:
      return static_cast<DType>(dtype);
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", dtype));
  }
}

void StartChunk(const TransferTag& tag, const TensorBytes& source, tandem::v1::TensorChunk& chunk) {
  ToProto(tag, chunk.mutable_tag());
  chunk.set_dtype(ToProto(source.dtype));
  for (int64_t dim : source.shape) chunk.add_shape(dim);
  chunk.set_total_bytes(static_cast<int64_t>(source.size));
}

absl::StatusOr<TransferHeader> HeaderFromProto(const tandem::v1::TensorChunk& chunk) {
  TransferHeader header;
  ASSIGN_OR_RETURN(header.tag, FromProto(chunk.tag()));
  ASSIGN_OR_RETURN(header.dtype, FromProto(chunk.dtype()));
  header.shape.assign(chunk.shape().begin(), chunk.shape().end());
  header.total_bytes = chunk.total_bytes();
  return header;
}

}  // namespace tandem::transport
