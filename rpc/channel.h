// Client channels and server setup shared by the coordinator, the actors and the CLI.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <memory>
#include <string>

namespace tandem::rpc {

// A channel to HOST:PORT with Tandem's limits (messages up to 64 MiB, keepalive), plaintext or TLS
// as rpc/security.h installed.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// Server-side counterpart of MakeChannel: listens on `listen` (the bound port goes to `port` once
// built) with the installed credentials and MakeChannel's limits, and serves the standard health
// service (grpc.health.v1) next to the builder's own.
void ConfigureServer(grpc::ServerBuilder& builder, const std::string& listen, int* port);

// A context carrying the installed token; no deadline (a stream that lasts as long as its job).
std::unique_ptr<grpc::ClientContext> NewContext();

// A context carrying the installed token whose deadline is `timeout` from now.
std::unique_ptr<grpc::ClientContext> ContextWithTimeout(std::chrono::milliseconds timeout);

// "HOST:PORT" with the port a server actually bound (when it asked for port 0).
std::string WithPort(const std::string& address, int port);

}  // namespace tandem::rpc
