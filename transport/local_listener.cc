#include "transport/local_listener.h"

#include <errno.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "transport/acked_send.h"
#include "transport/wire.h"

namespace tandem::transport {
namespace {

constexpr char kComponent[] = "transport";
constexpr size_t kReadPiece = size_t{1} << 20;
constexpr size_t kMaxAckMessage = 4096;
constexpr std::chrono::milliseconds kWriteTimeout(60000);

absl::StatusOr<std::string> RandomBytes(size_t n) {
  std::string out(n, '\0');
  size_t filled = 0;
  while (filled < n) {
    const ssize_t got = getrandom(out.data() + filled, n - filled, 0);
    if (got > 0) {
      filled += static_cast<size_t>(got);
    } else if (got < 0 && errno != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("local links: no random bytes for a key: ", std::strerror(errno)));
    }
  }
  return out;
}

// Writes an acknowledgement, its message cut to kMaxAckMessage bytes so the frame stays small.
absl::Status WriteAck(int fd, tandem::v1::TransferAck ack, const std::string& what) {
  if (ack.message().size() > kMaxAckMessage) ack.mutable_message()->resize(kMaxAckMessage);
  return WriteFrame(fd, FrameType::kAck, ack.SerializeAsString(), nullptr, 0, what,
                    std::chrono::steady_clock::now() + kWriteTimeout);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalListener>> LocalListener::Start(
    std::shared_ptr<Inbox> inbox, std::chrono::milliseconds expect_timeout,
    std::chrono::milliseconds handshake_timeout) {
  LocalEndpoint endpoint;
  ASSIGN_OR_RETURN(const std::string name_bytes, RandomBytes(8));
  ASSIGN_OR_RETURN(endpoint.nonce, RandomBytes(16));
  endpoint.socket_name = absl::StrCat("tandem-", getpid(), "-", absl::BytesToHexString(name_bytes));
  sockaddr_un address;
  ASSIGN_OR_RETURN(const socklen_t length, AbstractAddress(endpoint.socket_name, &address));
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0 || bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
      listen(fd.get(), 64) != 0) {
    return absl::UnavailableError(absl::StrCat("local links: cannot listen on @",
                                               endpoint.socket_name, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<LocalListener>(new LocalListener(
      std::move(inbox), expect_timeout, handshake_timeout, std::move(fd), std::move(endpoint)));
}

LocalListener::LocalListener(std::shared_ptr<Inbox> inbox, std::chrono::milliseconds expect_timeout,
                             std::chrono::milliseconds handshake_timeout, UniqueFd fd,
                             LocalEndpoint endpoint)
    : inbox_(std::move(inbox)),
      expect_timeout_(expect_timeout),
      handshake_timeout_(handshake_timeout),
      fd_(std::move(fd)),
      endpoint_(std::move(endpoint)) {
  acceptor_ = std::thread([this] { Accept(); });
}

LocalListener::~LocalListener() { Close(); }

void LocalListener::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    shutdown(fd_.get(), SHUT_RDWR);  // accept returns
    for (Link& link : links_) shutdown(link.fd.get(), SHUT_RDWR);
  }
  room_.notify_all();
  acceptor_.join();
  // No thread adds links any more.
  for (Link& link : links_) link.thread.join();
  links_.clear();
}

void LocalListener::Accept() {
  for (;;) {
    // Back-pressure: with kMaxPendingHandshakes connections in their handshake, or kMaxLinks open,
    // the next connection waits in the kernel's listen backlog until one ends; senders then meet a
    // slower accept, never a refusal (each tensor over 1 MiB opens a connection of its own).
    std::list<Link> finished;  // links that ended, joined outside the lock
    {
      std::unique_lock<std::mutex> lock(mu_);
      room_.wait(lock, [&] {
        for (auto it = links_.begin(); it != links_.end();) {
          auto next = std::next(it);
          if (it->done) finished.splice(finished.end(), links_, it);
          it = next;
        }
        const auto pending = std::count_if(links_.begin(), links_.end(),
                                           [](const Link& l) { return !l.handshaken; });
        peak_pending_ = std::max<int64_t>(peak_pending_, pending);
        return closed_ ||
               (pending < kMaxPendingHandshakes && links_.size() < static_cast<size_t>(kMaxLinks));
      });
      if (closed_) {
        lock.unlock();
        for (Link& ended : finished) ended.thread.join();
        return;
      }
    }
    for (Link& ended : finished) ended.thread.join();

    UniqueFd fd(accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    const int accept_error = errno;
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    if (fd.get() < 0) {
      if (accept_error != EINTR && accept_error != ECONNABORTED) {
        // Out of descriptors or memory: say so, and try again shortly rather than never.
        TANDEM_LOG(kWarning, kComponent) << "local links: accept: " << std::strerror(accept_error);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      continue;
    }
    // Whose process it is, checked before a thread exists for it; a refused one is closed when
    // `fd` goes.
    ucred peer{};
    socklen_t peer_size = sizeof peer;
    if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &peer_size) != 0 ||
        peer.uid != geteuid()) {
      Refused(absl::StrCat("a process of another user (uid ", peer.uid, ", pid ", peer.pid, ")"));
      continue;
    }
    Link& link = links_.emplace_back();
    link.fd = std::move(fd);
    try {
      link.thread = std::thread([this, &link] { Serve(link); });
    } catch (const std::system_error& e) {  // out of threads: refuse this connection
      TANDEM_LOG(kWarning, kComponent) << "local links: " << e.what();
      links_.pop_back();
    }
  }
}

void LocalListener::Refused(const std::string& why) {
  refused_.fetch_add(1);
  const auto now = std::chrono::steady_clock::now();
  if (last_refusal_log_ != std::chrono::steady_clock::time_point{} &&
      now - last_refusal_log_ < std::chrono::seconds(10)) {
    ++refusals_not_logged_;
    return;
  }
  TANDEM_LOG(kWarning, kComponent)
      << "local links: refused a connection: " << why
      << (refusals_not_logged_ > 0
              ? absl::StrCat(" (and ", refusals_not_logged_, " more since the last message)")
              : "");
  last_refusal_log_ = now;
  refusals_not_logged_ = 0;
}

bool LocalListener::Handshake(int fd) {
  const std::string what = "local link handshake";
  const auto deadline = std::chrono::steady_clock::now() + handshake_timeout_;
  FrameHead head;
  std::string nonce;
  absl::Status status = ReadExactlyBy(fd, &head, sizeof head, what, deadline);
  if (status.ok()) status = CheckFrameHead(head);
  if (status.ok() && head.type == static_cast<uint32_t>(FrameType::kHello) &&
      head.meta_bytes == endpoint_.nonce.size()) {
    nonce.resize(head.meta_bytes);
    status = ReadExactlyBy(fd, nonce.data(), nonce.size(), what, deadline);
  }
  tandem::v1::TransferAck ack;
  if (!status.ok() || nonce != endpoint_.nonce) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      Refused(status.ok() ? "it did not present this actor's key" : std::string(status.message()));
    }
    ack.set_code(static_cast<int>(absl::StatusCode::kUnauthenticated));
    ack.set_message("the local link's key does not match");
    WriteAck(fd, ack, what).IgnoreError();
    return false;
  }
  return WriteAck(fd, ack, what).ok();
}

void LocalListener::Serve(Link& link) {
  const int fd = link.fd.get();
  const bool handshaken = Handshake(fd);
  {
    std::lock_guard<std::mutex> lock(mu_);
    link.handshaken = handshaken;
  }
  room_.notify_all();
  if (handshaken) {
    for (;;) {
      absl::StatusOr<FrameHead> head = ReadFrameHead(fd, "local link");
      if (!head.ok()) {  // closed, or out of step
        if (!absl::IsUnavailable(head.status()))
          TANDEM_LOG(kWarning, kComponent) << head.status().message() << "; closing the link";
        break;
      }
      absl::Status connection_error;
      absl::StatusOr<int64_t> received;
      try {
        received = Receive(fd, *head, connection_error);
      } catch (const std::exception& e) {  // where in the frame is unknown: end the link
        connection_error =
            absl::InternalError(absl::StrCat("local link: receiving a tensor: ", e.what()));
      }
      if (!connection_error.ok()) {
        if (!absl::IsUnavailable(connection_error))
          TANDEM_LOG(kWarning, kComponent) << connection_error.message();
        break;
      }
      frames_.fetch_add(1);
      if (!WriteAck(fd, AckOf(received), "local link").ok()) break;
    }
  }
  shutdown(fd, SHUT_RDWR);
  {
    std::lock_guard<std::mutex> lock(mu_);
    link.done = true;
  }
  room_.notify_all();
}

absl::StatusOr<int64_t> LocalListener::Receive(int fd, const FrameHead& head,
                                               absl::Status& connection_error) {
  const std::string what = "local link";
  absl::StatusOr<std::string> meta = ReadFrameMeta(fd, head, what);
  tandem::v1::TensorChunk chunk;
  connection_error = meta.status();
  if (connection_error.ok() &&
      (head.type != static_cast<uint32_t>(FrameType::kTensor) || !chunk.ParseFromString(*meta))) {
    connection_error = absl::InvalidArgumentError(absl::StrCat(
        what, ": a frame of type ", head.type, " that is no tensor; closing the link"));
  }
  if (!connection_error.ok()) return connection_error;

  absl::StatusOr<TransferHeader> header = HeaderFromProto(chunk);
  absl::Status refused = header.status();
  if (refused.ok() && header->total_bytes != static_cast<int64_t>(head.data_bytes)) {
    refused = absl::InvalidArgumentError(
        absl::StrCat(DescribeTag(header->tag), ": the frame holds ", head.data_bytes,
                     " bytes of a tensor of ", header->total_bytes));
  }
  std::optional<Inbox::Delivery> delivery;
  if (refused.ok()) {
    const auto wait = std::clamp(std::chrono::milliseconds(chunk.expect_within_ms()),
                                 std::chrono::milliseconds(0), expect_timeout_);
    absl::StatusOr<Inbox::Delivery> begun = inbox_->Begin(*header, wait);
    refused = begun.status();
    if (begun.ok()) delivery.emplace(*std::move(begun));
  }
  if (!refused.ok()) {
    connection_error = Skip(fd, head.data_bytes);
    return refused;
  }
  thread_local std::vector<char> piece(kReadPiece);
  uint64_t offset = 0;
  while (offset < head.data_bytes) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kReadPiece, head.data_bytes - offset));
    connection_error = ReadExactly(fd, piece.data(), n, what);
    if (!connection_error.ok()) return connection_error;
    absl::Status written = delivery->Write(header->tag, static_cast<int64_t>(offset),
                                           std::string_view(piece.data(), n));
    offset += n;
    if (!written.ok()) {
      connection_error = Skip(fd, head.data_bytes - offset);
      return written;
    }
  }
  return delivery->Finish();
}

absl::Status LocalListener::Skip(int fd, uint64_t bytes) {
  thread_local std::vector<char> piece(kReadPiece);
  while (bytes > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kReadPiece, bytes));
    RETURN_IF_ERROR(ReadExactly(fd, piece.data(), n, "local link"));
    bytes -= n;
  }
  return absl::OkStatus();
}

}  // namespace tandem::transport
