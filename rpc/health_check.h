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
// (NOT_SERVING)" for any other answer (it is up, and says it cannot work: a stuck actor); otherwise the call's own status, as FromGrpc names it ("<what>: ..."):
// UNAVAILABLE when nothing listens there (connection refused, a name that does not resolve, a TLS
// handshake that fails), DEADLINE_EXCEEDED when no answer came within `timeout`.
absl::Status CheckHealth(const std::string& address, std::chrono::milliseconds timeout,
                         const std::string& what);

}  // namespace tandem::rpc
