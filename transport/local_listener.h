// The receiving end of local links (transport/local_link.h; the frames are transport/frame.h's): a
// Unix stream socket in the abstract namespace, named and keyed afresh for each actor process,
// whose connections each get a thread that reads tensor frames into the actor's Inbox and answers
// each with an acknowledgement, exactly as a Peer.Transfers stream does (the Inbox's checks, codes
// and waits are the same).
//
// A connection must come from a process of this process's user (SO_PEERCRED), and present the
// nonce first (tandem.v1.Peer.LocalEndpoint tells it to senders that already passed the gRPC
// server's checks) within one handshake deadline, however its bytes trickle in; otherwise it is
// closed (with UNAUTHENTICATED for a wrong key). At most kMaxPendingHandshakes connections are in
// their handshake and kMaxLinks are open at once: beyond, the next one waits in the kernel's listen
// backlog, unaccepted and without a thread, until one of them ends (one that never finishes its
// handshake ends at its deadline). Refusals are logged at most once per 10 s, with the count since.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/statusor.h"
#include "transport/frame.h"
#include "transport/inbox.h"

namespace tandem::transport {

inline constexpr int kMaxPendingHandshakes = 16;
inline constexpr int kMaxLinks = 256;

class LocalListener {
 public:
  // Listens on "tandem-<pid>-<random>". `expect_timeout` bounds how long a frame whose transfer the
  // actor does not expect yet waits for it (capped by the sender's expect_within_ms).
  // `handshake_timeout` bounds a connection's whole handshake.
  static absl::StatusOr<std::unique_ptr<LocalListener>> Start(
      std::shared_ptr<Inbox> inbox,
      std::chrono::milliseconds expect_timeout = std::chrono::minutes(5),
      std::chrono::milliseconds handshake_timeout = kHandshakeTimeout);

  ~LocalListener();  // Close()
  LocalListener(const LocalListener&) = delete;
  LocalListener& operator=(const LocalListener&) = delete;

  const LocalEndpoint& endpoint() const { return endpoint_; }
  // Tensor frames taken so far, accepted or refused.
  int64_t frames() const { return frames_.load(); }
  // Connections closed without being served: another user's, or a failed handshake.
  int64_t refused() const { return refused_.load(); }
  // The most connections that were in their handshake at once (for tests of the cap).
  int64_t peak_pending_handshakes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_pending_;
  }

  // Stops accepting, closes every link and joins their threads. Clear the inbox's job first, so
  // that no thread waits for an expectation. Idempotent.
  void Close();

 private:
  struct Link {
    UniqueFd fd;
    std::thread thread;
    bool handshaken = false;  // guarded by mu_
    bool done = false;        // guarded by mu_
  };

  LocalListener(std::shared_ptr<Inbox> inbox, std::chrono::milliseconds expect_timeout,
                std::chrono::milliseconds handshake_timeout, UniqueFd fd, LocalEndpoint endpoint);
  // Counts a connection closed unserved and logs why, at most once per 10 s. REQUIRES: mu_ held.
  void Refused(const std::string& why);
  void Accept();
  void Serve(Link& link);
  // False when the connection did not present the nonce.
  bool Handshake(int fd);
  // Takes one tensor frame whose head was read; the outcome is what its acknowledgement says.
  // Errors of the connection itself (it closed, a frame that is no tensor) end `connection_error`.
  absl::StatusOr<int64_t> Receive(int fd, const FrameHead& head, absl::Status& connection_error);
  // Reads and drops `bytes` of a frame's data, to stay in step after a refused transfer.
  absl::Status Skip(int fd, uint64_t bytes);

  std::shared_ptr<Inbox> inbox_;
  const std::chrono::milliseconds expect_timeout_;
  const std::chrono::milliseconds handshake_timeout_;
  UniqueFd fd_;
  const LocalEndpoint endpoint_;
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::condition_variable room_;  // a link finished its handshake or ended, or Close
  std::list<Link> links_;         // guarded by mu_
  int64_t peak_pending_ = 0;      // guarded by mu_
  bool closed_ = false;           // guarded by mu_
  std::atomic<int64_t> frames_{0};
  std::atomic<int64_t> refused_{0};
  std::chrono::steady_clock::time_point last_refusal_log_{};  // guarded by mu_
  int64_t refusals_not_logged_ = 0;                           // guarded by mu_
};

}  // namespace tandem::transport
