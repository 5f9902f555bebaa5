// Send handles shared by the transport's senders (the gRPC streams and local links): a send that
// failed before it started, and one that waits for the receiver's TransferAck. Internal to the
// transport's .cc files.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/tandem/v1/peer.pb.h"
#include "transport/transport.h"

namespace tandem::transport {

class FailedSend final : public SendHandle {
 public:
  explicit FailedSend(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait(std::chrono::milliseconds) override { return status_; }

 private:
  absl::Status status_;
};

// The acknowledgement of a receive's outcome: the bytes received, or the error's code and message.
tandem::v1::TransferAck AckOf(const absl::StatusOr<int64_t>& received);

// OK when the receiver acknowledged all `expected` bytes, else DataLoss naming the shortfall.
absl::Status CheckReceived(const std::string& what, int64_t received, int64_t expected);

// The outcome an acknowledgement reports: its code and message as the receiver's status (naming
// `what`), or CheckReceived of its byte count.
absl::Status AckStatus(const std::string& what, const tandem::v1::TransferAck& ack, int64_t bytes);

// Waits for the acknowledgement of one message, until the send's deadline at the latest.
class AckedSend final : public SendHandle {
 public:
  AckedSend(std::string what, std::future<tandem::v1::TransferAck> ack, int64_t bytes,
            std::chrono::steady_clock::time_point deadline)
      : what_(std::move(what)), ack_(std::move(ack)), bytes_(bytes), deadline_(deadline) {}

  absl::Status Wait(std::chrono::milliseconds timeout) override;

 private:
  const std::string what_;
  std::future<tandem::v1::TransferAck> ack_;
  const int64_t bytes_;
  const std::chrono::steady_clock::time_point deadline_;
  std::optional<absl::Status> outcome_;
};

}  // namespace tandem::transport
