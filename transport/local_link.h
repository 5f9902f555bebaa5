// Local links: the data plane between two actors on the same host without the network stack. The
// receiver listens on a Unix stream socket in the abstract namespace (LocalListener,
// transport/local_listener.h) and tells senders its name and a random nonce through
// tandem.v1.Peer.LocalEndpoint; a sender connects, presents the nonce, and then writes each tensor
// as one frame and reads one acknowledgement frame per tensor, in order: Peer.Transfers' contract
// over a socket pair. A transfer costs one write, one read and one wake-up of the receiving thread,
// against gRPC's HTTP/2 framing and its poller threads.
//
// A frame: FrameHead (native byte order: both ends are on one host), then `meta_bytes` of a
// serialized message (the nonce for kHello, a TensorChunk without data for kTensor, a TransferAck
// for kAck), then `data_bytes` of tensor bytes (kTensor only).
//
// Internal to the transport's .cc files and tests (uses the tandem.v1 messages).
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

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
#include "transport/transport.h"

namespace tandem::transport {

enum class FrameType : uint32_t { kHello = 1, kTensor = 2, kAck = 3 };

struct FrameHead {
  uint32_t magic = 0;
  uint32_t type = 0;
  uint32_t meta_bytes = 0;
  uint32_t reserved = 0;
  uint64_t data_bytes = 0;
};

inline constexpr uint32_t kFrameMagic = 0x4b4c4454;  // "TDLK"
inline constexpr uint32_t kMaxFrameMeta = 64 << 10;  // a tag and a shape need far less
inline constexpr uint64_t kMaxFrameData = uint64_t{1} << 40;

// Where a LocalListener listens.
struct LocalEndpoint {
  std::string socket_name;  // abstract name, without the leading NUL
  std::string nonce;
};

// An owned file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  ~UniqueFd();
  int get() const { return fd_; }
  int release();

 private:
  int fd_ = -1;
};

// Sets SO_SNDTIMEO or SO_RCVTIMEO; zero or less: no timeout.
void SetSocketTimeout(int fd, int option, std::chrono::milliseconds timeout);

// Fills `address` with the abstract socket `name` and returns its length. InvalidArgument for an
// empty name or one too long for sun_path.
absl::StatusOr<socklen_t> AbstractAddress(const std::string& name, sockaddr_un* address);

// Writes one frame whole (retrying short writes) by `deadline`. InvalidArgument (nothing written)
// for meta over kMaxFrameMeta; Unavailable naming `what` when the socket fails; DeadlineExceeded
// when the deadline passes mid-frame. After an error past the first byte the link is out of step
// and must be closed.
absl::Status WriteFrame(int fd, FrameType type, std::string_view meta, const std::byte* data,
                        size_t data_bytes, const std::string& what,
                        std::chrono::steady_clock::time_point deadline);

// Reads exactly `size` bytes. Unavailable naming `what` at end of stream or on an error.
absl::Status ReadExactly(int fd, void* out, size_t size, const std::string& what);

// Reads and checks a frame head: InvalidArgument for a wrong magic, an unknown type, meta over
// kMaxFrameMeta or data over kMaxFrameData.
absl::StatusOr<FrameHead> ReadFrameHead(int fd, const std::string& what);

// Checks a frame head that arrived (the decoding half of ReadFrameHead; fuzzed on its own).
absl::Status CheckFrameHead(const FrameHead& head);

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
