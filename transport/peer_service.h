// tandem.v1.Peer over an Inbox: reads a stream of TensorChunk messages, checks them against what the
// actor expects (Inbox::Begin / Delivery) and copies each chunk's bytes straight into the destination
// tensor. The validation lives in the Inbox; this class only converts proto to plain values and maps
// absl codes one to one to gRPC codes. No exception escapes a handler.
//
// Thread-safe: gRPC runs any number of streams at once. The inbox must outlive the server.
#pragma once

#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/sync_stream.h>

#include <chrono>
#include <memory>

#include "proto/tandem/v1/peer.grpc.pb.h"
#include "transport/inbox.h"

namespace tandem::transport {

struct PeerServiceOptions {
  // How long a stream whose transfer the actor does not expect yet waits for it (a sender may run
  // ahead of its receiver by a step), capped by the caller's deadline. Default: 5 minutes.
  std::chrono::milliseconds expect_timeout = std::chrono::minutes(5);
};

class PeerService final : public tandem::v1::Peer::Service {
 public:
  explicit PeerService(std::shared_ptr<Inbox> inbox, PeerServiceOptions options = {});

  grpc::Status SendTensor(grpc::ServerContext* context, grpc::ServerReader<tandem::v1::TensorChunk>* reader,
                          tandem::v1::TransferAck* ack) override;

 private:
  absl::StatusOr<int64_t> Receive(grpc::ServerContext& context, grpc::ServerReader<tandem::v1::TensorChunk>& reader);

  std::shared_ptr<Inbox> inbox_;
  PeerServiceOptions options_;
};

// HTTP/2 settings for the server that hosts a PeerService; call before BuildAndStart. Turns gRPC's
// bandwidth-delay-product probing off: with it, the receive window is sized from ping round trips, and
// on a busy host a multi-MiB transfer stalls for milliseconds at a time (bench/README.md, Transport).
void ConfigurePeerServer(grpc::ServerBuilder& builder);

}  // namespace tandem::transport
