// tandem.v1.Peer over an Inbox: reads a stream of TensorChunk messages, checks them against what
// the actor expects (Inbox::Begin / Delivery) and copies each chunk's bytes straight into the
// destination tensor. The validation lives in the Inbox; this class only converts proto to plain
// values and maps absl codes one to one to gRPC codes. No exception escapes a handler.
//
// Thread-safe: gRPC runs any number of streams at once. The inbox must outlive the server.
#pragma once

#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/sync_stream.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "proto/tandem/v1/peer.grpc.pb.h"
#include "transport/frame.h"
#include "transport/inbox.h"

namespace tandem::transport {

struct PeerServiceOptions {
  // How long a stream whose transfer the actor does not expect yet waits for it (a sender may run
  // ahead of its receiver by a step), capped by the caller's deadline. Default: 5 minutes.
  std::chrono::milliseconds expect_timeout = std::chrono::minutes(5);
  // The actor's LocalListener, which LocalEndpoint tells senders about; none: UNIMPLEMENTED.
  std::optional<LocalEndpoint> local_endpoint;
};

class PeerService final : public tandem::v1::Peer::Service {
 public:
  explicit PeerService(std::shared_ptr<Inbox> inbox, PeerServiceOptions options = {});

  grpc::Status SendTensor(grpc::ServerContext* context,
                          grpc::ServerReader<tandem::v1::TensorChunk>* reader,
                          tandem::v1::TransferAck* ack) override;
  grpc::Status Transfers(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<tandem::v1::TransferAck, tandem::v1::TensorChunk>* stream) override;

  grpc::Status LocalEndpoint(grpc::ServerContext* context,
                             const tandem::v1::LocalEndpointRequest* request,
                             tandem::v1::LocalEndpointResponse* response) override;

  // Cancels every open Transfers stream and refuses new ones (UNAVAILABLE). A peer's stream stays
  // open between its transfers, so call this before Server::Shutdown, which otherwise waits its
  // whole deadline for them.
  void CloseStreams();

 private:
  absl::StatusOr<int64_t> Receive(grpc::ServerContext& context,
                                  grpc::ServerReader<tandem::v1::TensorChunk>& reader);
  // One Transfers message: a whole tensor in one chunk.
  absl::StatusOr<int64_t> ReceiveWhole(const tandem::v1::TensorChunk& chunk);

  std::shared_ptr<Inbox> inbox_;
  PeerServiceOptions options_;
  std::mutex streams_mu_;
  std::set<grpc::ServerContext*> streams_;  // guarded by streams_mu_: open Transfers streams
  bool closed_ = false;                     // guarded by streams_mu_
};

// HTTP/2 settings for the server that hosts a PeerService; call before BuildAndStart. Turns gRPC's
// bandwidth-delay-product probing off: with it, the receive window is sized from ping round trips,
// and on a busy host a multi-MiB transfer stalls for milliseconds at a time (bench/README.md,
// Transport). Opens a 4 MiB receive window per stream instead, so a few one-chunk transfers queued
// on a Transfers stream behind one the actor does not expect yet still leave their sender at once.
void ConfigurePeerServer(grpc::ServerBuilder& builder);

}  // namespace tandem::transport
