#include "rpc/channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "rpc/security.h"

namespace tandem::rpc {

constexpr int kMaxMessageBytes = 64 << 20;

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  return grpc::CreateCustomChannel(address, ClientCredentials(), args);
}

void ConfigureServer(grpc::ServerBuilder& builder, const std::string& listen, int* port,
                     const ServerLimits& limits) {
  grpc::EnableDefaultHealthCheckService(true);
  builder.AddListeningPort(listen, ServerCredentials(), port);
  builder.SetMaxReceiveMessageSize(limits.max_receive_bytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams);
  grpc::ResourceQuota quota("tandem-server");
  quota.Resize(static_cast<size_t>(limits.memory_bytes));
  quota.SetMaxThreads(limits.max_threads);
  builder.SetResourceQuota(quota);
}

std::unique_ptr<grpc::ClientContext> NewContext() {
  auto context = std::make_unique<grpc::ClientContext>();
  AttachToken(*context);
  return context;
}

std::unique_ptr<grpc::ClientContext> ContextWithTimeout(std::chrono::milliseconds timeout) {
  std::unique_ptr<grpc::ClientContext> context = NewContext();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  return context;
}

std::string WithPort(const std::string& address, int port) {
  const size_t colon = address.rfind(':');
  return (colon == std::string::npos ? address : address.substr(0, colon)) + ":" +
         std::to_string(port);
}

}  // namespace tandem::rpc
