#include "transport/local_link.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/acked_send.h"
#include "transport/wire.h"

namespace tandem::transport {
namespace {

absl::Status SocketError(const std::string& what, const std::string& doing, int error) {
  return absl::UnavailableError(absl::StrCat(what, ": ", doing, ": ", std::strerror(error)));
}

}  // namespace

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

namespace {

// Connects to `endpoint` and presents its nonce; the listener answers with an acknowledgement, so
// a connection is known good before its first tensor.
absl::StatusOr<UniqueFd> OpenConnection(const LocalEndpoint& endpoint, const std::string& what) {
  sockaddr_un address;
  absl::StatusOr<socklen_t> length = AbstractAddress(endpoint.socket_name, &address);
  if (!length.ok())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", length.status().message()));
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return SocketError(what, "socket", errno);
  const int buffer = LocalLink::kSocketBufferBytes;
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  constexpr std::chrono::milliseconds kHandshake(10000);
  const auto deadline = std::chrono::steady_clock::now() + kHandshake;
  SetSocketTimeout(fd.get(), SO_SNDTIMEO, kHandshake);
  SetSocketTimeout(fd.get(), SO_RCVTIMEO, kHandshake);
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), *length) != 0) {
    if (errno == ECONNREFUSED || errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(what, ": nothing listens at @", endpoint.socket_name,
                                              " here (another host or network namespace)"));
    }
    return SocketError(what, absl::StrCat("connecting to @", endpoint.socket_name), errno);
  }
  RETURN_IF_ERROR(
      WriteFrame(fd.get(), FrameType::kHello, endpoint.nonce, nullptr, 0, what, deadline));
  ASSIGN_OR_RETURN(const FrameHead head, ReadFrameHead(fd.get(), what));
  std::string meta(head.meta_bytes, '\0');
  RETURN_IF_ERROR(ReadExactly(fd.get(), meta.data(), meta.size(), what));
  tandem::v1::TransferAck ack;
  if (head.type != static_cast<uint32_t>(FrameType::kAck) || !ack.ParseFromString(meta)) {
    return absl::UnavailableError(absl::StrCat(what, ": the listener did not accept the link"));
  }
  if (ack.code() != 0) return AckStatus(what, ack, 0);
  return fd;
}

// Reads one acknowledgement frame.
absl::StatusOr<tandem::v1::TransferAck> ReadAck(int fd, const std::string& what) {
  ASSIGN_OR_RETURN(const FrameHead head, ReadFrameHead(fd, what));
  std::string meta(head.meta_bytes, '\0');
  RETURN_IF_ERROR(ReadExactly(fd, meta.data(), meta.size(), what));
  tandem::v1::TransferAck ack;
  if (head.type != static_cast<uint32_t>(FrameType::kAck) || !ack.ParseFromString(meta)) {
    return absl::InternalError(absl::StrCat(what, ": a frame that is not an acknowledgement"));
  }
  return ack;
}

tandem::v1::TensorChunk FrameMeta(const TransferTag& tag, const TensorBytes& source,
                                  std::chrono::milliseconds expect_within) {
  tandem::v1::TensorChunk chunk;
  StartChunk(tag, source, chunk);
  chunk.set_expect_within_ms(expect_within.count());
  return chunk;
}

}  // namespace

// A tensor larger than the shared link takes: a connection of its own, on a thread of its own.
// Wait (or the destructor) shuts the connection down when it gives up, which ends the thread's
// write or read, and joins the thread, so the source is never read after Wait returned.
class LocalLink::OwnConnectionSend final : public SendHandle {
 public:
  OwnConnectionSend(LocalEndpoint endpoint, std::string what, const TransferTag& tag,
                    TensorBytes source, std::chrono::milliseconds timeout)
      : what_(std::move(what)), deadline_(std::chrono::steady_clock::now() + timeout) {
    result_ = std::async(std::launch::async,
                         [this, endpoint = std::move(endpoint), tag, source = std::move(source)] {
                           return Run(endpoint, tag, source);
                         });
  }

  ~OwnConnectionSend() override {
    if (!result_.valid()) return;
    Abandon();
    result_.wait();
  }

  absl::Status Wait(std::chrono::milliseconds timeout) override {
    if (outcome_) return *outcome_;
    const auto now = std::chrono::steady_clock::now();
    const auto until = std::min(now + timeout, deadline_);
    if (result_.wait_until(until) != std::future_status::ready) {
      const auto waited =
          std::max(std::chrono::milliseconds(0),
                   std::chrono::duration_cast<std::chrono::milliseconds>(until - now));
      Abandon();
      result_.wait();
      outcome_ = absl::DeadlineExceededError(
          absl::StrCat(what_, ": not acknowledged within ", waited.count(), " ms"));
      return *outcome_;
    }
    outcome_ = result_.get();
    return *outcome_;
  }

 private:
  absl::Status Run(const LocalEndpoint& endpoint, const TransferTag& tag,
                   const TensorBytes& source) {
    absl::StatusOr<UniqueFd> fd = OpenConnection(endpoint, what_);
    if (!fd.ok()) return fd.status();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (abandoned_) return absl::CancelledError(absl::StrCat(what_, ": abandoned"));
      fd_ = fd->get();
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline_ - std::chrono::steady_clock::now());
    absl::Status status =
        WriteFrame(fd->get(), FrameType::kTensor, FrameMeta(tag, source, left).SerializeAsString(),
                   source.data, source.size, what_, deadline_);
    if (status.ok()) {
      SetSocketTimeout(fd->get(), SO_RCVTIMEO,
                       std::max(std::chrono::milliseconds(1),
                                std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline_ - std::chrono::steady_clock::now())));
    }
    absl::StatusOr<tandem::v1::TransferAck> ack =
        status.ok() ? ReadAck(fd->get(), what_) : absl::StatusOr<tandem::v1::TransferAck>(status);
    {
      std::lock_guard<std::mutex> lock(mu_);
      fd_ = -1;
    }
    if (!ack.ok()) return ack.status();
    return AckStatus(what_, *ack, static_cast<int64_t>(source.size));
  }

  void Abandon() {
    std::lock_guard<std::mutex> lock(mu_);
    abandoned_ = true;
    if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
  }

  const std::string what_;
  const std::chrono::steady_clock::time_point deadline_;
  std::mutex mu_;
  int fd_ = -1;             // guarded by mu_: the connection while Run uses it
  bool abandoned_ = false;  // guarded by mu_
  std::future<absl::Status> result_;
  std::optional<absl::Status> outcome_;
};

absl::StatusOr<std::shared_ptr<LocalLink>> LocalLink::Connect(const LocalEndpoint& endpoint,
                                                              std::string what) {
  ASSIGN_OR_RETURN(UniqueFd fd, OpenConnection(endpoint, what));
  SetSocketTimeout(fd.get(), SO_RCVTIMEO,
                   std::chrono::milliseconds(0));  // the reader waits for good
  return std::shared_ptr<LocalLink>(new LocalLink(std::move(fd), endpoint, std::move(what)));
}

LocalLink::LocalLink(UniqueFd fd, LocalEndpoint endpoint, std::string what)
    : fd_(std::move(fd)), endpoint_(std::move(endpoint)), what_(std::move(what)) {
  // The kernel may cap the buffer (net.core.wmem_max) and reports it doubled for its bookkeeping.
  int buffer = 0;
  socklen_t length = sizeof(buffer);
  getsockopt(fd_.get(), SOL_SOCKET, SO_SNDBUF, &buffer, &length);
  shared_bytes_ = std::min(kMaxSharedBytes, static_cast<size_t>(std::max(buffer, 0)) / 4);
  reader_ = std::thread([this] { ReadAcks(); });
}

LocalLink::~LocalLink() {
  shutdown(fd_.get(), SHUT_RDWR);  // ends the reader, which fails what is pending
  reader_.join();
}

bool LocalLink::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

std::unique_ptr<SendHandle> LocalLink::Send(const std::string& what, const TransferTag& tag,
                                            TensorBytes source, std::chrono::milliseconds timeout) {
  if (source.size > shared_bytes_) {
    return std::make_unique<OwnConnectionSend>(endpoint_, what, tag, std::move(source), timeout);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string meta = FrameMeta(tag, source, timeout).SerializeAsString();
  if (meta.size() > kMaxFrameMeta) {
    return std::make_unique<FailedSend>(absl::InvalidArgumentError(
        absl::StrCat(what, ": ", meta.size(), " bytes of tag and shape, over ", kMaxFrameMeta)));
  }
  std::promise<tandem::v1::TransferAck> acked;
  std::future<tandem::v1::TransferAck> ack = acked.get_future();
  std::lock_guard<std::mutex> write_lock(write_mu_);
  bool write = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_) {
      acked.set_value(lost_);
      write = false;
    } else {
      pending_.push_back(std::move(acked));
    }
  }
  if (write) {
    // A failed write leaves the link out of step: breaking it fails this send and all pending.
    absl::Status written =
        WriteFrame(fd_.get(), FrameType::kTensor, meta, source.data, source.size, what_, deadline);
    if (!written.ok()) Break(written);
  }
  return std::make_unique<AckedSend>(what, std::move(ack), static_cast<int64_t>(source.size),
                                     deadline);
}

void LocalLink::ReadAcks() {
  absl::Status status;
  for (;;) {
    absl::StatusOr<tandem::v1::TransferAck> ack = ReadAck(fd_.get(), what_);
    if (!ack.ok()) {
      status = ack.status();
      break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.empty()) {
      status = absl::InternalError(absl::StrCat(what_, ": an acknowledgement of nothing"));
      break;
    }
    pending_.front().set_value(*ack);
    pending_.pop_front();
  }
  Break(status);
}

void LocalLink::Break(const absl::Status& status) {
  std::deque<std::promise<tandem::v1::TransferAck>> failed;
  tandem::v1::TransferAck lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_) {
      broken_ = true;
      lost_ = AckOf(absl::StatusOr<int64_t>(status));
    }
    failed.swap(pending_);
    lost = lost_;
  }
  shutdown(fd_.get(), SHUT_RDWR);  // a write blocked on another thread ends too
  for (auto& promise : failed) promise.set_value(lost);
}

}  // namespace tandem::transport
