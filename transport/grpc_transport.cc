#include "transport/grpc_transport.h"

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <future>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/tandem/v1/peer.grpc.pb.h"
#include "rpc/channel.h"
#include "rpc/status.h"
#include "transport/wire.h"

namespace tandem::transport {
namespace {

// A send that failed before it started.
class FailedSend final : public SendHandle {
 public:
  explicit FailedSend(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait(std::chrono::milliseconds) override { return status_; }

 private:
  absl::Status status_;
};

// One SendTensor stream on its own thread. Wait (or the destructor) cancels the call when it gives
// up and joins the thread, so the source is never read after Wait returned.
class GrpcSend final : public SendHandle {
 public:
  GrpcSend(std::shared_ptr<tandem::v1::Peer::Stub> stub, const std::string& address, const TransferTag& tag,
           TensorBytes source, const GrpcTransportOptions& options)
      : stub_(std::move(stub)),
        what_(absl::StrCat("peer ", address, ": sending ", DescribeTag(tag))),
        tag_(tag),
        source_(std::move(source)),
        chunk_bytes_(options.chunk_bytes) {
    context_.set_deadline(std::chrono::system_clock::now() + options.timeout);
    std::promise<absl::Status> promise;
    result_ = promise.get_future();
    thread_ = std::thread([this, promise = std::move(promise)]() mutable { promise.set_value(Stream()); });
  }

  ~GrpcSend() override {
    if (!thread_.joinable()) return;
    context_.TryCancel();
    thread_.join();
  }

  absl::Status Wait(std::chrono::milliseconds timeout) override {
    if (outcome_) return *outcome_;
    const bool finished = result_.wait_for(timeout) == std::future_status::ready;
    if (!finished) context_.TryCancel();
    thread_.join();
    absl::Status status = result_.get();
    if (!finished && !status.ok()) {
      status = absl::DeadlineExceededError(
          absl::StrCat(what_, ": not acknowledged within ", timeout.count(), " ms (", status.message(), ")"));
    }
    outcome_ = status;
    return status;
  }

 private:
  absl::Status Stream() {
    tandem::v1::TransferAck ack;
    std::unique_ptr<grpc::ClientWriter<tandem::v1::TensorChunk>> writer = stub_->SendTensor(&context_, &ack);
    tandem::v1::TensorChunk chunk;
    ToProto(tag_, chunk.mutable_tag());
    chunk.set_dtype(ToProto(source_.dtype));
    for (int64_t dim : source_.shape) chunk.add_shape(dim);
    chunk.set_total_bytes(static_cast<int64_t>(source_.size));
    size_t offset = 0;
    for (;;) {
      const size_t n = std::min(chunk_bytes_, source_.size - offset);
      chunk.set_offset(static_cast<int64_t>(offset));
      chunk.set_data(source_.data + offset, n);
      offset += n;
      if (offset == source_.size) {
        writer->WriteLast(chunk, grpc::WriteOptions());
        break;
      }
      if (!writer->Write(chunk)) break;  // the call failed: Finish says why
      // dtype, shape and size travel in the first chunk only.
      chunk.clear_dtype();
      chunk.clear_shape();
      chunk.clear_total_bytes();
    }
    const grpc::Status status = writer->Finish();
    if (!status.ok()) return rpc::FromGrpc(status, what_);
    if (ack.received_bytes() != static_cast<int64_t>(source_.size)) {
      return absl::DataLossError(absl::StrCat(what_, ": the receiver acknowledged ", ack.received_bytes(), " of ",
                                              source_.size, " bytes"));
    }
    return absl::OkStatus();
  }

  std::shared_ptr<tandem::v1::Peer::Stub> stub_;
  const std::string what_;
  const TransferTag tag_;
  const TensorBytes source_;
  const size_t chunk_bytes_;
  grpc::ClientContext context_;
  std::future<absl::Status> result_;
  std::optional<absl::Status> outcome_;
  std::thread thread_;
};

class GrpcTransport final : public Transport {
 public:
  GrpcTransport(std::shared_ptr<Inbox> inbox, std::vector<std::string> peer_addresses, GrpcTransportOptions options)
      : inbox_(std::move(inbox)), addresses_(std::move(peer_addresses)), options_(options) {
    for (const std::string& address : addresses_) {
      stubs_.push_back(std::make_shared<tandem::v1::Peer::Stub>(rpc::MakeChannel(address)));
    }
  }

  absl::Status Expect(const TransferTag& tag, TensorBytes destination) override {
    return inbox_->Expect(tag, std::move(destination));
  }

  absl::Status Await(const TransferTag& tag, std::chrono::milliseconds timeout) override {
    return inbox_->Await(tag, timeout);
  }

  std::unique_ptr<SendHandle> Send(int peer_rank, const TransferTag& tag, TensorBytes source) override {
    if (peer_rank < 0 || peer_rank >= static_cast<int>(addresses_.size())) {
      return std::make_unique<FailedSend>(absl::InvalidArgumentError(absl::StrCat(
          "sending ", DescribeTag(tag), ": peer rank ", peer_rank, " outside [0, ", addresses_.size(), ")")));
    }
    return std::make_unique<GrpcSend>(stubs_[peer_rank], addresses_[peer_rank], tag, std::move(source), options_);
  }

  void Reset() override { inbox_->Reset(); }

 private:
  std::shared_ptr<Inbox> inbox_;
  std::vector<std::string> addresses_;
  GrpcTransportOptions options_;
  std::vector<std::shared_ptr<tandem::v1::Peer::Stub>> stubs_;  // one channel per peer
};

}  // namespace

std::unique_ptr<Transport> CreateGrpcTransport(std::shared_ptr<Inbox> inbox, std::vector<std::string> peer_addresses,
                                               GrpcTransportOptions options) {
  return std::make_unique<GrpcTransport>(std::move(inbox), std::move(peer_addresses), options);
}

}  // namespace tandem::transport
