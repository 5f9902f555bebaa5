// One actor's receiving side on 127.0.0.1 for the gRPC transport tests: an Inbox with a job, served
// by a PeerService on a port the OS picked and, when asked, by a LocalListener that the service
// advertises.
#pragma once

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "rpc/channel.h"
#include "transport/inbox.h"
#include "transport/local_listener.h"
#include "transport/peer_service.h"

namespace tandem::transport::testing {

class LoopbackPeer {
 public:
  // Listens on `port`, or on one the OS picks when 0; with `local_links`, also on a local endpoint.
  explicit LoopbackPeer(PeerServiceOptions options = {}, int port = 0, bool local_links = false)
      : inbox_(std::make_shared<Inbox>()),
        listener_(local_links ? StartListener(inbox_, options) : nullptr),
        service_(inbox_, WithEndpoint(options, listener_.get())) {
    inbox_->SetJob("job-1");
    grpc::ServerBuilder builder;
    rpc::ConfigureServer(builder, "127.0.0.1:" + std::to_string(port), &port, rpc::kActorLimits);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    EXPECT_NE(port, 0);
    address_ = "127.0.0.1:" + std::to_string(port);
  }

  ~LoopbackPeer() {
    inbox_->ClearJob();  // streams waiting for an expectation return at once
    if (listener_) listener_->Close();
    service_.CloseStreams();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  const std::shared_ptr<Inbox>& inbox() const { return inbox_; }
  const std::string& address() const { return address_; }
  int port() const { return std::stoi(address_.substr(address_.rfind(':') + 1)); }
  // Tensor frames its local listener took (0 without one).
  int64_t local_frames() const { return listener_ ? listener_->frames() : 0; }
  // Stops the gRPC server (and the Peer service); a local listener keeps serving.
  void StopServer() {
    service_.CloseStreams();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

 private:
  static std::unique_ptr<LocalListener> StartListener(const std::shared_ptr<Inbox>& inbox,
                                                      const PeerServiceOptions& options) {
    absl::StatusOr<std::unique_ptr<LocalListener>> listener =
        LocalListener::Start(inbox, options.expect_timeout);
    EXPECT_TRUE(listener.ok()) << listener.status();
    return listener.ok() ? *std::move(listener) : nullptr;
  }

  static PeerServiceOptions WithEndpoint(PeerServiceOptions options,
                                         const LocalListener* listener) {
    if (listener) options.local_endpoint = listener->endpoint();
    return options;
  }

  std::shared_ptr<Inbox> inbox_;
  std::unique_ptr<LocalListener> listener_;
  PeerService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace tandem::transport::testing
