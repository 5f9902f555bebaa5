#include "platform/local_socket_probe.h"

#include <errno.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace tandem::platform {
namespace {

// Closes its descriptor at the end of the scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

LocalSocketProbe Failed(LocalSocketProbe probe, const char* step, int error_number,
                        const std::string& detail = "") {
  probe.ok = false;
  probe.step = step;
  probe.error_number = error_number;
  if (error_number != 0) {
    const char* name = strerrorname_np(error_number);
    probe.error = absl::StrCat(step, ": ", std::strerror(error_number), " (",
                               name != nullptr ? name : absl::StrCat("errno ", error_number), ")");
  } else {
    probe.error = absl::StrCat(step, ": ", detail);
  }
  return probe;
}

// Waits until `fd` has `events`, up to `timeout`; false with errno set (ETIMEDOUT when it passed).
bool Await(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd entry{fd, events, 0};
  for (;;) {
    const int ready = poll(&entry, 1, static_cast<int>(timeout.count()));
    if (ready > 0) return true;
    if (ready == 0) {
      errno = ETIMEDOUT;
      return false;
    }
    if (errno != EINTR) return false;
  }
}

}  // namespace

LocalSocketProbe ProbeLocalSocket(std::chrono::milliseconds timeout) {
  LocalSocketProbe probe;
  std::string random(8, '\0');
  if (getrandom(random.data(), random.size(), 0) != static_cast<ssize_t>(random.size())) {
    return Failed(probe, "random", errno);
  }
  probe.name = absl::StrCat("tandem-doctor-", getpid(), "-", absl::BytesToHexString(random));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  // Abstract: sun_path starts with a NUL, and the name is the bytes after it (no terminator).
  std::memcpy(address.sun_path + 1, probe.name.data(), probe.name.size());
  const auto length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + probe.name.size());

  const Fd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.get() < 0) return Failed(probe, "socket", errno);
  if (bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    return Failed(probe, "bind", errno);
  }
  if (listen(listener.get(), 1) != 0) return Failed(probe, "listen", errno);
  const Fd client(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (client.get() < 0) return Failed(probe, "socket", errno);
  // A Unix connect completes as soon as the listener's backlog takes it; EAGAIN when it is full.
  if (connect(client.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    return Failed(probe, "connect", errno);
  }
  if (!Await(listener.get(), POLLIN, timeout)) return Failed(probe, "accept", errno);
  const Fd server(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (server.get() < 0) return Failed(probe, "accept", errno);

  // A few bytes there and back: what a local link's handshake does first.
  const std::string message = absl::StrCat("tandem local link probe ", probe.name);
  for (const auto& [from, to] :
       {std::pair{client.get(), server.get()}, std::pair{server.get(), client.get()}}) {
    if (send(from, message.data(), message.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(message.size())) {
      return Failed(probe, "send", errno);
    }
    std::string got(message.size(), '\0');
    size_t filled = 0;
    while (filled < got.size()) {
      if (!Await(to, POLLIN, timeout)) return Failed(probe, "receive", errno);
      const ssize_t n = recv(to, got.data() + filled, got.size() - filled, 0);
      if (n == 0) return Failed(probe, "receive", 0, "the connection closed early");
      if (n < 0 && errno != EINTR && errno != EAGAIN) return Failed(probe, "receive", errno);
      if (n > 0) filled += static_cast<size_t>(n);
    }
    if (got != message)
      return Failed(probe, "compare", 0, "the bytes received differ from those sent");
  }
  probe.ok = true;
  probe.bytes = static_cast<int>(message.size());
  return probe;
}

}  // namespace tandem::platform
