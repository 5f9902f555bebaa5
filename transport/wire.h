// Plain transport values <-> their tandem.v1 messages, for the gRPC half of the transport.
#pragma once

#include "absl/status/statusor.h"
#include "common/tensor_bytes.h"
#include "proto/tandem/v1/peer.pb.h"
#include "transport/inbox.h"
#include "transport/transport.h"

namespace tandem::transport {

void ToProto(const TransferTag& tag, tandem::v1::TransferTag* out);
tandem::v1::DType ToProto(DType dtype);

// InvalidArgument for a kind or dtype this build does not know (or UNSPECIFIED).
absl::StatusOr<TransferTag> FromProto(const tandem::v1::TransferTag& tag);
absl::StatusOr<DType> FromProto(tandem::v1::DType dtype);

// Fills a transfer's first chunk (or only message) with the tag, dtype, shape and total size.
void StartChunk(const TransferTag& tag, const TensorBytes& source, tandem::v1::TensorChunk& chunk);

// What a first chunk declares; InvalidArgument for an unknown kind or dtype.
absl::StatusOr<TransferHeader> HeaderFromProto(const tandem::v1::TensorChunk& chunk);

}  // namespace tandem::transport
