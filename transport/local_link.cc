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
#include "transport/acked_send.h"
#include "transport/wire.h"

namespace tandem::transport {
namespace {

absl::Status SocketError(const std::string& what, const std::string& doing, int error) {
  return absl::UnavailableError(absl::StrCat(what, ": ", doing, ": ", std::strerror(error)));
}

void SetTimeout(int fd, int option, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

}  // namespace

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
                        size_t data_bytes, const std::string& what) {
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
    msghdr message{};
    message.msg_iov = part;
    message.msg_iovlen = left;
    const ssize_t n = sendmsg(fd, &message, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return absl::UnavailableError(absl::StrCat(what, ": the receiver stopped reading"));
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

// A tensor larger than kInlineBytes: its frame is written on a thread of its own. Wait (or the
// destructor) breaks the link when it gives up, which ends the write, and joins the thread, so the
// source is never read after Wait returned.
class LocalLink::ThreadedSend final : public SendHandle {
 public:
  ThreadedSend(std::shared_ptr<LocalLink> link, std::string what, const TransferTag& tag,
               TensorBytes source, std::chrono::milliseconds timeout)
      : link_(std::move(link)),
        what_(std::move(what)),
        bytes_(static_cast<int64_t>(source.size)),
        deadline_(std::chrono::steady_clock::now() + timeout) {
    written_ = std::async(std::launch::async, [this, tag, source = std::move(source), timeout] {
      std::lock_guard<std::mutex> lock(link_->write_mu_);
      return link_->WriteLocked(tag, source, timeout);
    });
  }

  ~ThreadedSend() override {
    if (!written_.valid()) return;
    if (written_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      link_->Break(absl::CancelledError(absl::StrCat(what_, ": the send was dropped")));
    }
    written_.wait();
  }

  absl::Status Wait(std::chrono::milliseconds timeout) override {
    if (outcome_) return *outcome_;
    const auto now = std::chrono::steady_clock::now();
    const auto until = std::min(now + timeout, deadline_);
    if (written_.wait_until(until) != std::future_status::ready) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
      outcome_ = absl::DeadlineExceededError(
          absl::StrCat(what_, ": not taken by the receiver within ", waited.count(), " ms"));
      link_->Break(*outcome_);
      written_.wait();
      return *outcome_;
    }
    AckedSend acked(what_, written_.get(), bytes_, deadline_);
    outcome_ = acked.Wait(std::max(std::chrono::milliseconds(0),
                                   std::chrono::duration_cast<std::chrono::milliseconds>(
                                       until - std::chrono::steady_clock::now())));
    return *outcome_;
  }

 private:
  std::shared_ptr<LocalLink> link_;
  const std::string what_;
  const int64_t bytes_;
  const std::chrono::steady_clock::time_point deadline_;
  std::future<std::future<tandem::v1::TransferAck>> written_;
  std::optional<absl::Status> outcome_;
};

absl::StatusOr<std::shared_ptr<LocalLink>> LocalLink::Connect(const LocalEndpoint& endpoint,
                                                              std::string what) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (endpoint.socket_name.empty() || endpoint.socket_name.size() + 1 > sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": bad local socket name '", endpoint.socket_name, "'"));
  }
  std::memcpy(address.sun_path + 1, endpoint.socket_name.data(), endpoint.socket_name.size());
  const auto length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + endpoint.socket_name.size());
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return SocketError(what, "socket", errno);
  const int buffer = kSocketBufferBytes;
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  constexpr std::chrono::milliseconds kHandshake(2000);
  SetTimeout(fd.get(), SO_SNDTIMEO, kHandshake);
  SetTimeout(fd.get(), SO_RCVTIMEO, kHandshake);
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    return SocketError(what, absl::StrCat("connecting to @", endpoint.socket_name), errno);
  }
  // The listener answers the nonce with an acknowledgement, so a link is known good before its
  // first tensor.
  absl::Status status = WriteFrame(fd.get(), FrameType::kHello, endpoint.nonce, nullptr, 0, what);
  absl::StatusOr<FrameHead> head =
      status.ok() ? ReadFrameHead(fd.get(), what) : absl::StatusOr<FrameHead>(status);
  if (!head.ok()) return head.status();
  std::string meta(head->meta_bytes, '\0');
  if (absl::Status read = ReadExactly(fd.get(), meta.data(), meta.size(), what); !read.ok())
    return read;
  tandem::v1::TransferAck ack;
  if (head->type != static_cast<uint32_t>(FrameType::kAck) || !ack.ParseFromString(meta)) {
    return absl::UnavailableError(absl::StrCat(what, ": the listener did not accept the link"));
  }
  if (ack.code() != 0) return AckStatus(what, ack, 0);
  SetTimeout(fd.get(), SO_RCVTIMEO, std::chrono::milliseconds(0));  // the reader waits for good
  return std::shared_ptr<LocalLink>(new LocalLink(std::move(fd), std::move(what)));
}

LocalLink::LocalLink(UniqueFd fd, std::string what) : fd_(std::move(fd)), what_(std::move(what)) {
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
  if (source.size > kInlineBytes) {
    return std::make_unique<ThreadedSend>(shared_from_this(), what, tag, std::move(source),
                                          timeout);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::future<tandem::v1::TransferAck> ack;
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    ack = WriteLocked(tag, source, timeout);
  }
  return std::make_unique<AckedSend>(what, std::move(ack), static_cast<int64_t>(source.size),
                                     deadline);
}

std::future<tandem::v1::TransferAck> LocalLink::WriteLocked(const TransferTag& tag,
                                                            const TensorBytes& source,
                                                            std::chrono::milliseconds timeout) {
  std::promise<tandem::v1::TransferAck> acked;
  std::future<tandem::v1::TransferAck> ack = acked.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_) {
      acked.set_value(lost_);
      return ack;
    }
    pending_.push_back(std::move(acked));
  }
  tandem::v1::TensorChunk chunk;
  StartChunk(tag, source, chunk);
  chunk.set_expect_within_ms(timeout.count());
  SetTimeout(fd_.get(), SO_SNDTIMEO, timeout);
  // A failed write leaves the link out of step: breaking it fails this send and all pending.
  absl::Status written = WriteFrame(fd_.get(), FrameType::kTensor, chunk.SerializeAsString(),
                                    source.data, source.size, what_);
  if (!written.ok()) Break(written);
  return ack;
}

void LocalLink::ReadAcks() {
  absl::Status status;
  std::string meta;
  for (;;) {
    absl::StatusOr<FrameHead> head = ReadFrameHead(fd_.get(), what_);
    if (!head.ok()) {
      status = head.status();
      break;
    }
    meta.resize(head->meta_bytes);
    status = ReadExactly(fd_.get(), meta.data(), meta.size(), what_);
    if (!status.ok()) break;
    tandem::v1::TransferAck ack;
    if (head->type != static_cast<uint32_t>(FrameType::kAck) || !ack.ParseFromString(meta)) {
      status = absl::InternalError(absl::StrCat(what_, ": a frame that is not an acknowledgement"));
      break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.empty()) {
      status = absl::InternalError(absl::StrCat(what_, ": an acknowledgement of nothing"));
      break;
    }
    pending_.front().set_value(ack);
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
