// Client channels and server setup shared by the coordinator, the actors and the CLI.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace tandem::rpc {

// A channel to HOST:PORT with Tandem's limits (messages up to 64 MiB, keepalive), plaintext or TLS
// as rpc/security.h installed.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// What one server takes from its clients, whoever they are: with a plaintext port gRPC reads and
// parses a request before any handler (and its token check) runs, so these bound what a caller
// without the token can make a server hold.
struct ServerLimits {
  int max_receive_bytes;       // per message; larger: RESOURCE_EXHAUSTED before it is parsed
  int max_concurrent_streams;  // per connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)
  int max_threads;  // calls served at once (the sync server's threads); beyond: RESOURCE_EXHAUSTED
  int64_t memory_bytes;  // the server's grpc::ResourceQuota: its buffers in all
};
// The coordinator's control plane: job specs, registrations, heartbeats and rendezvous keys are
// kilobytes. Every --wait client holds a call for its job's life, and during a rendezvous every
// rank waits in one StoreGet at once: 4096 calls cover clusters of thousands of actors.
inline constexpr ServerLimits kCoordinatorLimits{4 << 20, 128, 4096, int64_t{1} << 30};
// An actor: its own control plane, and the data plane's chunks (1 MiB each, transport/).
inline constexpr ServerLimits kActorLimits{16 << 20, 256, 1024, int64_t{8} << 30};

// Server-side counterpart of MakeChannel: listens on `listen` (the bound port goes to `port` once
// built) with the installed credentials, sends up to MakeChannel's 64 MiB, takes what `limits`
// allow, and serves the standard health service (grpc.health.v1) next to the builder's own.
void ConfigureServer(grpc::ServerBuilder& builder, const std::string& listen, int* port,
                     const ServerLimits& limits);

// A context carrying the installed token; no deadline (a stream that lasts as long as its job).
std::unique_ptr<grpc::ClientContext> NewContext();

// A context carrying the installed token whose deadline is `timeout` from now.
std::unique_ptr<grpc::ClientContext> ContextWithTimeout(std::chrono::milliseconds timeout);

// "HOST:PORT" with the port a server actually bound (when it asked for port 0).
std::string WithPort(const std::string& address, int port);

}  // namespace tandem::rpc
