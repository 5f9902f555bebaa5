#include "bench/fanout_peer.h"

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "rpc/channel.h"
#include "transport/grpc_transport.h"
#include "transport/inbox.h"
#include "transport/local_listener.h"
#include "transport/peer_service.h"

namespace tandem::bench {

struct FanoutPeer::State {
  std::shared_ptr<transport::Inbox> inbox = std::make_shared<transport::Inbox>();
  std::unique_ptr<transport::LocalListener> listener;
  std::unique_ptr<transport::PeerService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  std::unique_ptr<transport::Transport> transport;
};

absl::StatusOr<std::unique_ptr<FanoutPeer>> FanoutPeer::Serve(const std::string& job_id) {
  auto state = std::make_unique<State>();
  state->inbox->SetJob(job_id);
  absl::StatusOr<std::unique_ptr<transport::LocalListener>> listener =
      transport::LocalListener::Start(state->inbox);
  if (!listener.ok()) return listener.status();
  state->listener = *std::move(listener);
  transport::PeerServiceOptions options;
  options.local_endpoint = state->listener->endpoint();
  state->service = std::make_unique<transport::PeerService>(state->inbox, options);
  grpc::ServerBuilder builder;
  int port = 0;
  rpc::ConfigureServer(builder, "127.0.0.1:0", &port, rpc::kActorLimits);
  transport::ConfigurePeerServer(builder);
  builder.RegisterService(state->service.get());
  state->server = builder.BuildAndStart();
  if (!state->server || port == 0)
    return absl::UnavailableError("cannot serve a PeerService on 127.0.0.1");
  state->address = absl::StrCat("127.0.0.1:", port);
  state->transport = transport::CreateGrpcTransport(state->inbox, {});
  return std::unique_ptr<FanoutPeer>(new FanoutPeer(std::move(state)));
}

FanoutPeer::FanoutPeer(std::unique_ptr<State> state) : state_(std::move(state)) {}

FanoutPeer::~FanoutPeer() {
  state_->transport.reset();
  state_->inbox->ClearJob();
  state_->listener->Close();
  state_->service->CloseStreams();
  state_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

const std::string& FanoutPeer::address() const { return state_->address; }

void FanoutPeer::Connect(std::vector<std::string> peer_addresses, bool local_links,
                         std::chrono::milliseconds timeout) {
  transport::GrpcTransportOptions options;
  options.local_links = local_links;
  options.timeout = timeout;
  state_->transport =
      transport::CreateGrpcTransport(state_->inbox, std::move(peer_addresses), options);
}

transport::Transport& FanoutPeer::transport() { return *state_->transport; }

}  // namespace tandem::bench
