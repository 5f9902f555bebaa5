// Whether this host lets a process use a Unix stream socket in the abstract namespace, as actors on
// one host do between themselves for local links (transport/local_link.h): the probe listens on a
// fresh name, connects to it, and sends a few bytes each way. Where it fails (a sandbox that denies
// AF_UNIX or the abstract namespace), actors fall back to gRPC over loopback, which is slower.
//
// No LibTorch, no gRPC: POSIX sockets only. Thread-safe (each call uses its own sockets and name);
// every step is bounded by `timeout`, so a call never hangs.
#pragma once

#include <chrono>
#include <string>

namespace tandem::platform {

struct LocalSocketProbe {
  bool ok = false;
  std::string
      name;       // the abstract name tried (without the leading NUL), "tandem-doctor-<pid>-<hex>"
  int bytes = 0;  // bytes that went each way
  // On failure: the step ("random", "socket", "bind", "listen", "connect", "accept", "send",
  // "receive", "compare"), its errno (0 when the failure is no OS error) and one line naming both,
  // e.g. "bind: Operation not permitted (EPERM)".
  std::string step;
  int error_number = 0;
  std::string error;
};

LocalSocketProbe ProbeLocalSocket(std::chrono::milliseconds timeout = std::chrono::seconds(2));

}  // namespace tandem::platform
