#include "transport/peer_service.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rpc/security.h"
#include "rpc/status.h"
#include "transport/acked_send.h"
#include "transport/wire.h"

namespace tandem::transport {

PeerService::PeerService(std::shared_ptr<Inbox> inbox, PeerServiceOptions options)
    : inbox_(std::move(inbox)), options_(options) {}

grpc::Status PeerService::SendTensor(grpc::ServerContext* context,
                                     grpc::ServerReader<tandem::v1::TensorChunk>* reader,
                                     tandem::v1::TransferAck* ack) {
  TANDEM_AUTHORIZE(context);
  absl::StatusOr<int64_t> received;
  try {
    received = Receive(*context, *reader);
  } catch (const std::exception& e) {
    received = absl::InternalError(
        absl::StrCat("receiving a tensor from ", context->peer(), ": ", e.what()));
  }
  if (!received.ok()) return rpc::ToGrpc(received.status());
  ack->set_received_bytes(*received);
  return grpc::Status::OK;
}

absl::StatusOr<int64_t> PeerService::Receive(grpc::ServerContext& context,
                                             grpc::ServerReader<tandem::v1::TensorChunk>& reader) {
  tandem::v1::TensorChunk chunk;
  if (!reader.Read(&chunk))
    return absl::InvalidArgumentError("the stream ended before its first chunk");
  ASSIGN_OR_RETURN(const TransferHeader header, HeaderFromProto(chunk));

  // Wait for the actor to expect the transfer no longer than the sender waits for the answer.
  const auto caller_left = std::chrono::duration_cast<std::chrono::milliseconds>(
      context.deadline() - std::chrono::system_clock::now());
  const auto wait = std::clamp(caller_left, std::chrono::milliseconds(0), options_.expect_timeout);
  ASSIGN_OR_RETURN(Inbox::Delivery delivery, inbox_->Begin(header, wait));

  RETURN_IF_ERROR(delivery.Write(header.tag, chunk.offset(), chunk.data()));
  while (reader.Read(&chunk)) {
    ASSIGN_OR_RETURN(TransferTag tag, FromProto(chunk.tag()));
    RETURN_IF_ERROR(delivery.Write(tag, chunk.offset(), chunk.data()));
  }
  return delivery.Finish();
}

grpc::Status PeerService::LocalEndpoint(grpc::ServerContext* context,
                                        const tandem::v1::LocalEndpointRequest*,
                                        tandem::v1::LocalEndpointResponse* response) {
  TANDEM_AUTHORIZE(context);
  if (!options_.local_endpoint) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this actor serves no local links");
  }
  response->set_socket_name(options_.local_endpoint->socket_name);
  response->set_nonce(options_.local_endpoint->nonce);
  return grpc::Status::OK;
}

void PeerService::CloseStreams() {
  std::lock_guard<std::mutex> lock(streams_mu_);
  closed_ = true;
  for (grpc::ServerContext* context : streams_) context->TryCancel();
}

grpc::Status PeerService::Transfers(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<tandem::v1::TransferAck, tandem::v1::TensorChunk>* stream) {
  TANDEM_AUTHORIZE(context);
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    if (closed_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the actor is shutting down");
    streams_.insert(context);
  }
  struct Unregister {
    PeerService* service;
    grpc::ServerContext* context;
    ~Unregister() {
      std::lock_guard<std::mutex> lock(service->streams_mu_);
      service->streams_.erase(context);
    }
  } unregister{this, context};
  tandem::v1::TensorChunk chunk;
  while (stream->Read(&chunk)) {
    absl::StatusOr<int64_t> received;
    try {
      received = ReceiveWhole(chunk);
    } catch (const std::exception& e) {
      received = absl::InternalError(absl::StrCat("receiving a tensor: ", e.what()));
    }
    if (!stream->Write(AckOf(received))) break;
  }
  return grpc::Status::OK;
}

absl::StatusOr<int64_t> PeerService::ReceiveWhole(const tandem::v1::TensorChunk& chunk) {
  ASSIGN_OR_RETURN(const TransferHeader header, HeaderFromProto(chunk));
  if (chunk.offset() != 0 || static_cast<int64_t>(chunk.data().size()) != header.total_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        DescribeTag(header.tag), ": a Transfers message must hold the whole tensor, but it holds ",
        chunk.data().size(), " bytes at offset ", chunk.offset(), " of ", header.total_bytes));
  }
  const auto wait = std::clamp(std::chrono::milliseconds(chunk.expect_within_ms()),
                               std::chrono::milliseconds(0), options_.expect_timeout);
  ASSIGN_OR_RETURN(Inbox::Delivery delivery, inbox_->Begin(header, wait));
  RETURN_IF_ERROR(delivery.Write(header.tag, 0, chunk.data()));
  return delivery.Finish();
}

void ConfigurePeerServer(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 4 << 20);
}

}  // namespace tandem::transport
