// Local links: the data plane between two actors on the same host without the network stack. The
// receiver listens on a Unix stream socket in the abstract namespace (LocalListener,
// transport/local_listener.h) and tells senders its name and a random nonce through
// tandem.v1.Peer.LocalEndpoint; a sender connects, presents the nonce, and then writes each tensor
// as one frame and reads one acknowledgement frame per tensor, in order: Peer.Transfers' contract
// over a socket pair. A transfer costs one write, one read and one wake-up of the receiving thread,
// against gRPC's HTTP/2 framing and its poller threads.
//
// The frame format, the endpoint and the fd reads and writes that both ends share are in
// transport/frame.h.
//
// Internal to the transport's .cc files and tests (uses the tandem.v1 messages).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/tandem/v1/peer.pb.h"
#include "transport/frame.h"
#include "transport/transport.h"

namespace tandem::transport {

// The sending end of one local link, to one peer. Thread-safe.
//
// Tensors that fit half the socket's send buffer (and 1 MiB) share the link: each is written on the
// caller's thread, in call order, and the socket holds it, so Send returns at once, and a reader
// thread hands each acknowledgement to its send; they come in send order, as on Peer.Transfers.
// A larger tensor gets a connection of its own, written and acknowledged on a thread of its own, as
// a SendTensor call does: it waits for the receiver to expect it without holding up the link, and
// its timeout closes only its own connection. Once the shared link broke (the peer went away, a
// write failed), it stays broken: pending sends fail with its status, and the transport connects
// anew.
class LocalLink {
 public:
  // Connects to `endpoint` and presents its nonce. NotFound naming `what` when nothing listens
  // there (another host or network namespace): the caller then keeps to gRPC; Unauthenticated when
  // the listener refused the nonce; Unavailable when the connection failed otherwise.
  static absl::StatusOr<std::shared_ptr<LocalLink>> Connect(const LocalEndpoint& endpoint,
                                                            std::string what);
  ~LocalLink();

  bool broken() const;

  // `timeout` bounds the write and the wait for the acknowledgement, as for a gRPC send.
  std::unique_ptr<SendHandle> Send(const std::string& what, const TransferTag& tag,
                                   TensorBytes source, std::chrono::milliseconds timeout);

  // Tensors above this size get a connection of their own.
  size_t shared_bytes() const { return shared_bytes_; }

  static constexpr size_t kMaxSharedBytes = size_t{1} << 20;
  static constexpr int kSocketBufferBytes = 4 << 20;  // asked for; the kernel may cap it

 private:
  class OwnConnectionSend;
  LocalLink(UniqueFd fd, LocalEndpoint endpoint, std::string what);
  void ReadAcks();
  void Break(const absl::Status& status);

  UniqueFd fd_;
  const LocalEndpoint endpoint_;
  const std::string what_;
  size_t shared_bytes_ = 0;
  std::mutex write_mu_;  // one frame at a time
  mutable std::mutex mu_;
  std::deque<std::promise<tandem::v1::TransferAck>> pending_;  // guarded by mu_, in send order
  bool broken_ = false;                                        // guarded by mu_
  tandem::v1::TransferAck lost_;  // guarded by mu_: what sends get once the link broke
  std::thread reader_;
};

}  // namespace tandem::transport
