#include "transport/local_link.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/acked_send.h"
#include "transport/wire.h"

namespace tandem::transport {
namespace {

// Reads one frame and, when it is an acknowledgement, the TransferAck it carries; nullopt for a
// frame of another type or one that does not parse.
absl::StatusOr<std::optional<tandem::v1::TransferAck>> ReadAckFrame(int fd,
                                                                    const std::string& what) {
  ASSIGN_OR_RETURN(const FrameHead head, ReadFrameHead(fd, what));
  ASSIGN_OR_RETURN(const std::string meta, ReadFrameMeta(fd, head, what));
  tandem::v1::TransferAck ack;
  if (head.type != static_cast<uint32_t>(FrameType::kAck) || !ack.ParseFromString(meta)) {
    return std::nullopt;
  }
  return ack;
}

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
  const auto deadline = std::chrono::steady_clock::now() + kHandshakeTimeout;
  SetSocketTimeout(fd.get(), SO_SNDTIMEO, kHandshakeTimeout);
  SetSocketTimeout(fd.get(), SO_RCVTIMEO, kHandshakeTimeout);
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), *length) != 0) {
    if (errno == ECONNREFUSED || errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(what, ": nothing listens at @", endpoint.socket_name,
                                              " here (another host or network namespace)"));
    }
    return SocketError(what, absl::StrCat("connecting to @", endpoint.socket_name), errno);
  }
  RETURN_IF_ERROR(
      WriteFrame(fd.get(), FrameType::kHello, endpoint.nonce, nullptr, 0, what, deadline));
  ASSIGN_OR_RETURN(const std::optional<tandem::v1::TransferAck> ack, ReadAckFrame(fd.get(), what));
  if (!ack) {
    return absl::UnavailableError(absl::StrCat(what, ": the listener did not accept the link"));
  }
  if (ack->code() != 0) return AckStatus(what, *ack, 0);
  return fd;
}

// Reads one acknowledgement frame; any other frame is Internal.
absl::StatusOr<tandem::v1::TransferAck> ReadAck(int fd, const std::string& what) {
  ASSIGN_OR_RETURN(const std::optional<tandem::v1::TransferAck> ack, ReadAckFrame(fd, what));
  if (!ack) {
    return absl::InternalError(absl::StrCat(what, ": a frame that is not an acknowledgement"));
  }
  return *ack;
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
