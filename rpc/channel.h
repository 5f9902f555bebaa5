// Client channels and server setup shared by the coordinator, the actors and the CLI.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <memory>
#include <string>

namespace tandem::rpc {

// A channel to HOST:PORT with Tandem's limits (messages up to 64 MiB, keepalive).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// Server-side counterpart of MakeChannel's limits.
void ConfigureServer(grpc::ServerBuilder& builder);

// A context whose deadline is `timeout` from now.
std::unique_ptr<grpc::ClientContext> ContextWithTimeout(std::chrono::milliseconds timeout);

// "HOST:PORT" with the port a server actually bound (when it asked for port 0).
std::string WithPort(const std::string& address, int port);

}  // namespace tandem::rpc
