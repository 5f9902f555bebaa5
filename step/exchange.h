// Moving rows between the two groups (docs/design.md §2): a block of rows of a tensor, the tag of
// each transfer, and a tensor as the bytes a Transport sends or fills. Which blocks two replicas
// share is step/batch_plan.h's. LibTorch header.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor_bytes.h"
#include "step/ownership.h"
#include "transport/transport.h"

namespace tandem::step {

// The bytes of a contiguous CPU tensor, in place. InvalidArgument for a dtype no transfer carries
// (the wire knows bf16, fp32 and fp64).
absl::StatusOr<TensorBytes> BytesOf(const at::Tensor& tensor);

// Rows `rows` of a tensor whose first row is row `first_row` (of a plan's exchange order): a
// contiguous view of a contiguous tensor.
inline at::Tensor Rows(const at::Tensor& tensor, SampleRange rows, int64_t first_row) {
  return tensor.narrow(0, rows.begin - first_row, rows.size());
}

// The tag of one transfer of job attempt `transfer_key` (TransferTag::job_id).
transport::TransferTag MakeTag(const std::string& transfer_key, transport::TransferKind kind,
                               int64_t step, int64_t micro_batch, SampleRange samples,
                               int source_rank);

}  // namespace tandem::step
