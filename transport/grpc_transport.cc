#include "transport/grpc_transport.h"

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "proto/tandem/v1/peer.grpc.pb.h"
#include "rpc/channel.h"
#include "rpc/security.h"
#include "rpc/status.h"
#include "transport/acked_send.h"
#include "transport/local_link.h"
#include "transport/wire.h"

namespace tandem::transport {
namespace {

// A tensor of several chunks: one SendTensor stream on its own thread, since its later chunks wait
// until the receiver expects the transfer. Wait (or the destructor) cancels the call when it gives
// up and joins the thread, so the source is never read after Wait returned.
class StreamedSend final : public SendHandle {
 public:
  StreamedSend(std::shared_ptr<tandem::v1::Peer::Stub> stub, std::string what,
               const TransferTag& tag, TensorBytes source, const GrpcTransportOptions& options)
      : stub_(std::move(stub)),
        what_(std::move(what)),
        tag_(tag),
        source_(std::move(source)),
        chunk_bytes_(options.chunk_bytes) {
    rpc::AttachToken(context_);
    context_.set_deadline(std::chrono::system_clock::now() + options.timeout);
    context_.set_initial_metadata_corked(true);  // the headers leave with the first chunk
    std::promise<absl::Status> promise;
    result_ = promise.get_future();
    thread_ = std::thread(
        [this, promise = std::move(promise)]() mutable { promise.set_value(Stream()); });
  }

  ~StreamedSend() override {
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
      status = absl::DeadlineExceededError(absl::StrCat(
          what_, ": not acknowledged within ", timeout.count(), " ms (", status.message(), ")"));
    }
    outcome_ = status;
    return status;
  }

 private:
  absl::Status Stream() {
    tandem::v1::TransferAck ack;
    std::unique_ptr<grpc::ClientWriter<tandem::v1::TensorChunk>> writer =
        stub_->SendTensor(&context_, &ack);
    tandem::v1::TensorChunk chunk;
    StartChunk(tag_, source_, chunk);
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
    return CheckReceived(what_, ack.received_bytes(), static_cast<int64_t>(source_.size));
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

// One peer's Transfers stream, for tensors of one chunk: each goes out as one message, written on
// the caller's thread (the message holds a copy of the bytes, so the source is free once Send
// returns), and a reader thread hands each acknowledgement to the send it answers; they come in
// send order. No call is set up per transfer and no thread hand-off lies between Send and the bytes
// on the wire: on a busy host each costs a few hundred microseconds, more than the write itself.
// The stream opens at the first send and again at the next send after it broke; the sends pending
// when it broke fail with its status.
class PeerStream {
 public:
  explicit PeerStream(std::shared_ptr<tandem::v1::Peer::Stub> stub) : stub_(std::move(stub)) {}

  ~PeerStream() {
    std::lock_guard<std::mutex> write_lock(write_mu_);
    Close();
  }

  // A send not acknowledged within `timeout` fails with DeadlineExceeded; the receiver waits no
  // longer than that for the transfer to be expected.
  std::unique_ptr<SendHandle> Send(const std::string& what, const TransferTag& tag,
                                   TensorBytes source, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    tandem::v1::TensorChunk chunk;
    StartChunk(tag, source, chunk);
    chunk.set_offset(0);
    chunk.set_data(source.data, source.size);
    chunk.set_expect_within_ms(timeout.count());
    std::promise<tandem::v1::TransferAck> acked;
    std::future<tandem::v1::TransferAck> ack = acked.get_future();
    {
      std::lock_guard<std::mutex> write_lock(write_mu_);
      Open();
      bool write = true;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (broken_) {  // it broke since Open looked: the next send opens it again
          acked.set_value(lost_);
          write = false;
        } else {
          pending_.push_back(std::move(acked));
        }
      }
      // A failed write ends the stream; the reader then fails this send with the stream's status.
      if (write) stream_->Write(chunk);
    }
    return std::make_unique<AckedSend>(what, std::move(ack), static_cast<int64_t>(source.size),
                                       deadline);
  }

 private:
  // REQUIRES: write_mu_ held.
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stream_ && !broken_) return;
    }
    Close();
    context_ = rpc::NewContext();
    context_->set_initial_metadata_corked(true);  // the headers leave with the first message
    stream_ = stub_->Transfers(context_.get());
    {
      std::lock_guard<std::mutex> lock(mu_);
      broken_ = false;
    }
    reader_ = std::thread([this] { ReadAcks(); });
  }

  // Cancels the stream and waits until its reader failed what was pending. REQUIRES: write_mu_
  // held.
  void Close() {
    if (!stream_) return;
    context_->TryCancel();
    reader_.join();
    stream_.reset();
    context_.reset();
  }

  void ReadAcks() {
    tandem::v1::TransferAck ack;
    while (stream_->Read(&ack)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.empty()) break;  // an acknowledgement of nothing: the stream is out of step
      pending_.front().set_value(ack);
      pending_.pop_front();
    }
    // Cancelling first ends a write blocked on another thread; Finish then returns at once.
    context_->TryCancel();
    const grpc::Status status = stream_->Finish();
    tandem::v1::TransferAck lost;
    lost.set_code(status.ok() ? static_cast<int>(grpc::StatusCode::UNAVAILABLE)
                              : status.error_code());
    lost.set_message(status.ok() ? "the transfer stream closed before the acknowledgement"
                                 : status.error_message());
    std::deque<std::promise<tandem::v1::TransferAck>> failed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      broken_ = true;
      lost_ = lost;
      failed.swap(pending_);
    }
    for (auto& promise : failed) promise.set_value(lost);
  }

  std::shared_ptr<tandem::v1::Peer::Stub> stub_;
  std::mutex write_mu_;  // one writer at a time; guards context_, stream_ and reader_
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<tandem::v1::TensorChunk, tandem::v1::TransferAck>>
      stream_;
  std::thread reader_;
  std::mutex mu_;
  std::deque<std::promise<tandem::v1::TransferAck>> pending_;  // guarded by mu_, in send order
  bool broken_ = false;                                        // guarded by mu_
  tandem::v1::TransferAck lost_;  // guarded by mu_: what sends get once the stream broke
};

// A peer's local link, tried at the first send to it: when the peer serves a local endpoint and
// this process can connect to it, its sends go there instead of gRPC. A peer without one
// (UNIMPLEMENTED) or out of reach of a Unix socket (another host or network namespace) keeps gRPC
// for the transport's life; any other failure, or a link that broke, is tried again after a pause,
// sending over gRPC meanwhile.
class LocalRoute {
 public:
  LocalRoute(std::shared_ptr<tandem::v1::Peer::Stub> stub, std::string address)
      : stub_(std::move(stub)), address_(std::move(address)) {}

  // The link to send on, or null for gRPC.
  std::shared_ptr<LocalLink> Link() {
    std::lock_guard<std::mutex> lock(mu_);
    if (link_ && !link_->broken()) return link_;
    if (never_ || std::chrono::steady_clock::now() < retry_at_) return nullptr;
    link_.reset();
    absl::StatusOr<std::shared_ptr<LocalLink>> link = Connect();
    if (link.ok()) {
      link_ = *std::move(link);
      return link_;
    }
    const absl::StatusCode code = link.status().code();
    never_ = code == absl::StatusCode::kUnimplemented || code == absl::StatusCode::kNotFound;
    retry_at_ = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    if (!logged_) {
      TANDEM_LOG(kInfo, "transport") << link.status().message() << "; sending over gRPC"
                                     << (never_ ? "" : " and trying again in 10 s");
      logged_ = true;
    }
    return nullptr;
  }

 private:
  absl::StatusOr<std::shared_ptr<LocalLink>> Connect() {
    const std::string what = absl::StrCat("peer ", address_, ": local link");
    tandem::v1::LocalEndpointResponse response;
    const grpc::Status status =
        stub_->LocalEndpoint(rpc::ContextWithTimeout(std::chrono::seconds(5)).get(),
                             tandem::v1::LocalEndpointRequest(), &response);
    if (!status.ok()) return rpc::FromGrpc(status, what);
    return LocalLink::Connect({response.socket_name(), response.nonce()}, what);
  }

  std::shared_ptr<tandem::v1::Peer::Stub> stub_;
  const std::string address_;
  std::mutex mu_;
  std::shared_ptr<LocalLink> link_;                 // guarded by mu_
  bool never_ = false;                              // guarded by mu_
  std::chrono::steady_clock::time_point retry_at_;  // guarded by mu_
  bool logged_ = false;                             // guarded by mu_
};

class GrpcTransport final : public Transport {
 public:
  GrpcTransport(std::shared_ptr<Inbox> inbox, std::vector<std::string> peer_addresses,
                GrpcTransportOptions options)
      : inbox_(std::move(inbox)), addresses_(std::move(peer_addresses)), options_(options) {
    for (const std::string& address : addresses_) {
      stubs_.push_back(std::make_shared<tandem::v1::Peer::Stub>(rpc::MakeChannel(address)));
      streams_.push_back(std::make_unique<PeerStream>(stubs_.back()));
      if (options_.local_links)
        local_.push_back(std::make_unique<LocalRoute>(stubs_.back(), address));
    }
  }

  absl::Status Expect(const TransferTag& tag, TensorBytes destination) override {
    return inbox_->Expect(tag, std::move(destination));
  }

  absl::Status Await(const TransferTag& tag, std::chrono::milliseconds timeout) override {
    return inbox_->Await(tag, timeout);
  }

  std::unique_ptr<SendHandle> Send(int peer_rank, const TransferTag& tag,
                                   TensorBytes source) override {
    if (peer_rank < 0 || peer_rank >= static_cast<int>(addresses_.size())) {
      return std::make_unique<FailedSend>(absl::InvalidArgumentError(
          absl::StrCat("sending ", DescribeTag(tag), ": peer rank ", peer_rank, " outside [0, ",
                       addresses_.size(), ")")));
    }
    std::string what = absl::StrCat("peer ", addresses_[peer_rank], ": sending ", DescribeTag(tag));
    if (!local_.empty()) {
      if (std::shared_ptr<LocalLink> link = local_[peer_rank]->Link())
        return link->Send(what, tag, std::move(source), options_.timeout);
    }
    if (source.size <= options_.chunk_bytes) {
      return streams_[peer_rank]->Send(what, tag, std::move(source), options_.timeout);
    }
    return std::make_unique<StreamedSend>(stubs_[peer_rank], std::move(what), tag,
                                          std::move(source), options_);
  }

  void Reset() override { inbox_->Reset(); }

 private:
  std::shared_ptr<Inbox> inbox_;
  std::vector<std::string> addresses_;
  GrpcTransportOptions options_;
  std::vector<std::shared_ptr<tandem::v1::Peer::Stub>> stubs_;  // one channel per peer
  std::vector<std::unique_ptr<PeerStream>> streams_;            // one Transfers stream per peer
  std::vector<std::unique_ptr<LocalRoute>> local_;  // per peer; empty without options.local_links
};

}  // namespace

std::unique_ptr<Transport> CreateGrpcTransport(std::shared_ptr<Inbox> inbox,
                                               std::vector<std::string> peer_addresses,
                                               GrpcTransportOptions options) {
  return std::make_unique<GrpcTransport>(std::move(inbox), std::move(peer_addresses), options);
}

}  // namespace tandem::transport
