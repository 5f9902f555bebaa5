// absl::Status <-> grpc::Status. Abseil's codes are gRPC's codes, so the mapping is one to one; the
// message is kept. gRPC code only (never included by LibTorch translation units).
#pragma once

#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace tandem::rpc {

inline grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// The code and message as they are, with " (is it running and reachable?)" after UNAVAILABLE's.
inline absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  std::string message = status.error_message();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE)
    message += " (is it running and reachable?)";
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), message);
}

// `what` names the call ("coordinator 127.0.0.1:7070: SubmitJob"); it starts the message.
inline absl::Status FromGrpc(const grpc::Status& status, std::string_view what) {
  absl::Status plain = FromGrpc(status);
  if (plain.ok()) return plain;
  std::string message(what);
  message += ": ";
  message += std::string_view(plain.message().data(), plain.message().size());
  return absl::Status(plain.code(), message);
}

}  // namespace tandem::rpc
