// The wire of a local link (transport/local_link.h), shared by its two ends: where a listener
// listens (LocalEndpoint, an abstract Unix socket name), the frame format, and the blocking fd
// reads and writes that move frames. The sender (LocalLink) and the receiver (LocalListener) both
// speak through these, so the format is written down once.
//
// A frame: FrameHead (native byte order: both ends are on one host), then `meta_bytes` of a
// serialized message (the nonce for kHello, a TensorChunk without data for kTensor, a TransferAck
// for kAck), then `data_bytes` of tensor bytes (kTensor only).
//
// Errors name `what` (the transfer or the link) in front of their message. Every function is
// stateless and thread-safe; one fd carries one frame at a time. Internal to the transport's .cc
// files, its fuzzer and its tests. Neither LibTorch nor protobuf.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::transport {

// Where a LocalListener listens.
struct LocalEndpoint {
  std::string socket_name;  // abstract name, without the leading NUL
  std::string nonce;
};

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
// How long each end gives the other for the hello frame and its acknowledgement.
inline constexpr std::chrono::milliseconds kHandshakeTimeout{10000};

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

// Unavailable "<what>: <doing>: <strerror(error)>", for a socket call that failed.
absl::Status SocketError(const std::string& what, const std::string& doing, int error);

// Writes one frame whole (retrying short writes) by `deadline`. InvalidArgument (nothing written)
// for meta over kMaxFrameMeta; Unavailable naming `what` when the socket fails; DeadlineExceeded
// when the deadline passes mid-frame. After an error past the first byte the link is out of step
// and must be closed.
absl::Status WriteFrame(int fd, FrameType type, std::string_view meta, const std::byte* data,
                        size_t data_bytes, const std::string& what,
                        std::chrono::steady_clock::time_point deadline);

// Reads exactly `size` bytes. Unavailable naming `what` at end of stream or on an error.
absl::Status ReadExactly(int fd, void* out, size_t size, const std::string& what);
// The same by `deadline` for the whole read, however the bytes trickle in: DeadlineExceeded after.
absl::Status ReadExactlyBy(int fd, void* out, size_t size, const std::string& what,
                           std::chrono::steady_clock::time_point deadline);

// Reads and checks a frame head: InvalidArgument for a wrong magic, an unknown type, meta over
// kMaxFrameMeta or data over kMaxFrameData.
absl::StatusOr<FrameHead> ReadFrameHead(int fd, const std::string& what);

// Reads the `head.meta_bytes` of metadata that follow a frame head read by ReadFrameHead.
absl::StatusOr<std::string> ReadFrameMeta(int fd, const FrameHead& head, const std::string& what);

// Checks a frame head that arrived (the decoding half of ReadFrameHead; fuzzed on its own).
absl::Status CheckFrameHead(const FrameHead& head);

}  // namespace tandem::transport
