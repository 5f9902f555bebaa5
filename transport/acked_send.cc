#include "transport/acked_send.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "rpc/status.h"

namespace tandem::transport {

tandem::v1::TransferAck AckOf(const absl::StatusOr<int64_t>& received) {
  tandem::v1::TransferAck ack;
  if (received.ok()) {
    ack.set_received_bytes(*received);
  } else {
    ack.set_code(static_cast<int>(received.status().code()));
    ack.set_message(std::string(received.status().message()));
  }
  return ack;
}

absl::Status CheckReceived(const std::string& what, int64_t received, int64_t expected) {
  if (received == expected) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat(what, ": the receiver acknowledged ", received, " of ", expected, " bytes"));
}

absl::Status AckStatus(const std::string& what, const tandem::v1::TransferAck& ack, int64_t bytes) {
  if (ack.code() == 0) return CheckReceived(what, ack.received_bytes(), bytes);
  return rpc::FromGrpc(grpc::Status(static_cast<grpc::StatusCode>(ack.code()), ack.message()),
                       what);
}

absl::Status AckedSend::Wait(std::chrono::milliseconds timeout) {
  if (outcome_) return *outcome_;
  const auto now = std::chrono::steady_clock::now();
  const auto until = std::min(now + timeout, deadline_);
  if (ack_.wait_until(until) != std::future_status::ready) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
    outcome_ = absl::DeadlineExceededError(
        absl::StrCat(what_, ": not acknowledged within ", waited.count(), " ms"));
    return *outcome_;
  }
  outcome_ = AckStatus(what_, ack_.get(), bytes_);
  return *outcome_;
}

}  // namespace tandem::transport
