// A client of the standard gRPC health service (grpc.health.v1.Health/Check), which every Tandem
// server answers without a token (rpc/channel.h ConfigureServer): whether a server is up and
// serving, before any call that needs the cluster's token.
//
// gRPC code only (never included by LibTorch translation units). Thread-safe.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/status.h"

namespace tandem::rpc {

// Asks the server at HOST:PORT whether it serves, over MakeChannel (the installed TLS settings),
// within `timeout`. OK when it answers SERVING; FailedPrecondition "... is not serving
// (NOT_SERVING)" for any other answer (it is up, and says it cannot work: a stuck actor); otherwise
// the call's own status, as FromGrpc names it ("<what>: ..."): UNAVAILABLE when nothing listens
// there (connection refused, a name that does not resolve, a TLS handshake that fails),
// DEADLINE_EXCEEDED when no answer came within `timeout`.
absl::Status CheckHealth(const std::string& address, std::chrono::milliseconds timeout,
                         const std::string& what);

// A supervisor's count of a live process's failed health checks in a row (`tandem actor
// --supervise`): NOT_SERVING (a command thread stuck past its timeout) and no answer at all (a
// stopped or hung process: SIGSTOP, a debugger, a livelock) count alike; SERVING starts over. Not
// thread-safe.
class HealthStreak {
 public:
  explicit HealthStreak(int limit) : limit_(limit) {}
  // Records one check; true once `limit` checks in a row have failed.
  bool Record(const absl::Status& check);
  // Why the process is to be killed: "was stuck (...)" or "did not answer ...".
  std::string Why() const;

 private:
  const int limit_;
  int failed_ = 0;
  absl::Status last_;
};

}  // namespace tandem::rpc
