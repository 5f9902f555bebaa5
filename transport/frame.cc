#include "transport/frame.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tandem::transport {

absl::Status SocketError(const std::string& what, const std::string& doing, int error) {
  return absl::UnavailableError(absl::StrCat(what, ": ", doing, ": ", std::strerror(error)));
}

void SetSocketTimeout(int fd, int option, std::chrono::milliseconds timeout) {
  timeout = std::max(timeout, std::chrono::milliseconds(0));
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

absl::StatusOr<socklen_t> AbstractAddress(const std::string& name, sockaddr_un* address) {
  *address = sockaddr_un{};
  address->sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(address->sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("bad local socket name '", name, "'"));
  }
  std::memcpy(address->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

absl::Status WriteFrame(int fd, FrameType type, std::string_view meta, const std::byte* data,
                        size_t data_bytes, const std::string& what,
                        std::chrono::steady_clock::time_point deadline) {
  if (meta.size() > kMaxFrameMeta) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", meta.size(), " bytes of tag and shape, over ", kMaxFrameMeta));
  }
  FrameHead head;
  head.magic = kFrameMagic;
  head.type = static_cast<uint32_t>(type);
  head.meta_bytes = static_cast<uint32_t>(meta.size());
  head.data_bytes = data_bytes;
  iovec parts[3] = {{&head, sizeof(head)},
                    {const_cast<char*>(meta.data()), meta.size()},
                    {const_cast<std::byte*>(data), data_bytes}};
  iovec* part = parts;
  size_t left = 3;
  while (left > 0) {
    const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (remaining.count() <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": the receiver did not take it in time"));
    }
    SetSocketTimeout(fd, SO_SNDTIMEO, remaining);
    msghdr message{};
    message.msg_iov = part;
    message.msg_iovlen = left;
    const ssize_t n = sendmsg(fd, &message, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
        continue;  // the loop's deadline
      return SocketError(what, "writing", errno);
    }
    size_t written = static_cast<size_t>(n);
    while (left > 0 && written >= part->iov_len) {
      written -= part->iov_len;
      ++part;
      --left;
    }
    if (left > 0) {
      part->iov_base = static_cast<char*>(part->iov_base) + written;
      part->iov_len -= written;
    }
  }
  return absl::OkStatus();
}

absl::Status ReadExactly(int fd, void* out, size_t size, const std::string& what) {
  char* at = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t n = recv(fd, at, size, 0);
    if (n == 0) return absl::UnavailableError(absl::StrCat(what, ": the link closed"));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return absl::UnavailableError(absl::StrCat(what, ": nothing arrived in time"));
      return SocketError(what, "reading", errno);
    }
    at += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ReadExactlyBy(int fd, void* out, size_t size, const std::string& what,
                           std::chrono::steady_clock::time_point deadline) {
  char* at = static_cast<char*>(out);
  while (size > 0) {
    const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (remaining.count() <= 0)
      return absl::DeadlineExceededError(absl::StrCat(what, ": not all of it arrived in time"));
    pollfd ready{fd, POLLIN, 0};
    const int polled =
        poll(&ready, 1, static_cast<int>(std::min<int64_t>(remaining.count(), 60000)));
    if (polled < 0 && errno != EINTR) return SocketError(what, "waiting to read", errno);
    if (polled <= 0) continue;
    const ssize_t n = recv(fd, at, size, MSG_DONTWAIT);
    if (n == 0) return absl::UnavailableError(absl::StrCat(what, ": the link closed"));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return SocketError(what, "reading", errno);
    }
    at += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status CheckFrameHead(const FrameHead& head) {
  if (head.magic != kFrameMagic)
    return absl::InvalidArgumentError(
        absl::StrCat("not a local link frame (magic ", head.magic, ")"));
  if (head.type < static_cast<uint32_t>(FrameType::kHello) ||
      head.type > static_cast<uint32_t>(FrameType::kAck)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown frame type ", head.type));
  }
  if (head.meta_bytes > kMaxFrameMeta) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame metadata of ", head.meta_bytes, " bytes, over ", kMaxFrameMeta));
  }
  if (head.data_bytes > kMaxFrameData) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame data of ", head.data_bytes, " bytes, over ", kMaxFrameData));
  }
  if (head.type != static_cast<uint32_t>(FrameType::kTensor) && head.data_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a frame of type ", head.type, " with ", head.data_bytes, " data bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<FrameHead> ReadFrameHead(int fd, const std::string& what) {
  FrameHead head;
  if (absl::Status read = ReadExactly(fd, &head, sizeof(head), what); !read.ok()) return read;
  if (absl::Status checked = CheckFrameHead(head); !checked.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", checked.message()));
  }
  return head;
}

absl::StatusOr<std::string> ReadFrameMeta(int fd, const FrameHead& head, const std::string& what) {
  std::string meta(head.meta_bytes, '\0');
  if (absl::Status read = ReadExactly(fd, meta.data(), meta.size(), what); !read.ok()) return read;
  return meta;
}

}  // namespace tandem::transport
