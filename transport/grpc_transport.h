// The Transport over gRPC: receives through an Inbox (served by PeerService on the actor's server,
// and by its LocalListener) and sends to the peer's address. A peer on the same host gets every
// tensor over a local link (transport/local_link.h) once its LocalEndpoint answered and the link
// connected; otherwise, a tensor of one chunk (chunk_bytes or fewer; every step's
// embeddings and gradients in the tiny jobs) as one message of the peer's long-lived
// tandem.v1.Peer.Transfers stream, written on the caller's thread; a larger one as its own
// SendTensor client stream on a thread of its own.
//
// One channel and one Transfers stream per peer, created with the transport (the stream opens at
// the first send and again after it broke). Thread-safe. gRPC-free header: the actor's torch code
// may include it.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "transport/inbox.h"
#include "transport/transport.h"

namespace tandem::transport {

struct GrpcTransportOptions {
  // Bytes per TensorChunk message (docs/design.md §5: about 1 MiB). REQUIRES: > 0. Default: 1 MiB.
  size_t chunk_bytes = size_t{1} << 20;
  // Deadline of each send, from Send to the receiver's acknowledgement of the last byte; it
  // includes the time the receiver takes to expect the transfer. Default: 5 minutes.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // Send over a local link (transport/local_link.h) to a peer that serves a local endpoint and is
  // within reach of a Unix socket (the same host and network namespace). Default: true.
  bool local_links = true;
};

// Expect, Await and Reset go to `inbox` (which the caller also serves with a PeerService); Send(r,
// ...) streams to `peer_addresses[r]` (HOST:PORT). A send's errors name the peer's address and the
// tag: the receiver's code (tandem.v1.Peer), UNAVAILABLE when nothing answers, DeadlineExceeded
// after `options.timeout`; InvalidArgument for a rank outside `peer_addresses`.
std::unique_ptr<Transport> CreateGrpcTransport(std::shared_ptr<Inbox> inbox,
                                               std::vector<std::string> peer_addresses,
                                               GrpcTransportOptions options = {});

}  // namespace tandem::transport
