// Moving sample rows between the two groups' layouts (docs/design.md §2): which peer ranks share
// which rows of a micro-batch with this rank (step/ownership.h), the tag of each transfer, and a
// tensor's rows as the bytes a Transport sends or fills. LibTorch header.
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

// Rows `rows` of a tensor whose first row is sample `first_row`: a contiguous view of a contiguous
// tensor.
inline at::Tensor Rows(const at::Tensor& tensor, SampleRange rows, int64_t first_row) {
  return tensor.narrow(0, rows.begin - first_row, rows.size());
}

// The entries `range` of a micro-batch's sample indices.
inline std::vector<int64_t> Sub(const std::vector<int64_t>& all, SampleRange range) {
  return {all.begin() + range.begin, all.begin() + range.end};
}

// The ranks of a peer group of `peers` ranks whose blocks of a `samples`-sample micro-batch overlap
// `mine`, with the overlaps, in rank order.
std::vector<std::pair<int, SampleRange>> PeerOverlaps(SampleRange mine, int peers, int64_t samples);

// The tag of one transfer of job attempt `transfer_key` (TransferTag::job_id).
transport::TransferTag MakeTag(const std::string& transfer_key, transport::TransferKind kind,
                               int64_t step, int64_t micro_batch, SampleRange samples,
                               int source_rank);

}  // namespace tandem::step
