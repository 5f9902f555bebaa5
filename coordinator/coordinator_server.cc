#include "coordinator/coordinator_server.h"

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <signal.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/grpc_actor_client.h"
#include "coordinator/metrics_http.h"
#include "rpc/channel.h"

namespace tandem::coordinator {

int RunCoordinator(const CoordinatorServerOptions& options) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  CoordinatorOptions core;
  core.state_dir = options.state_dir;
  core.heartbeat_timeout = options.heartbeat_timeout;
  core.heartbeat_interval = std::max(std::chrono::milliseconds(50), options.heartbeat_timeout / 5);
  core.unplaceable_timeout = options.unplaceable_timeout;
  core.holder = absl::StrCat("tandem coordinator --listen ", options.listen);
  core.runner.command_timeout = options.command_timeout;
  core.runner.hold_dir = options.hold_dir;
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator = Coordinator::Create(
      core, std::make_unique<GrpcActorClientFactory>(
                GrpcActorClientOptions::ForCommandTimeout(options.command_timeout)));
  if (!coordinator.ok()) {
    std::fprintf(stderr, "tandem coordinator: %s\n",
                 std::string(coordinator.status().message()).c_str());
    return 1;
  }
  CoordinatorService service(coordinator->get());
  grpc::ServerBuilder builder;
  int port = 0;
  rpc::ConfigureServer(builder, options.listen, &port, rpc::kCoordinatorLimits);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "tandem coordinator: cannot listen on %s\n", options.listen.c_str());
    return 1;
  }
  const std::string address = rpc::WithPort(options.listen, port);
  TANDEM_LOG(kInfo, "coordinator")
      << "serving on " << address << ", state in " << options.state_dir;
  std::string ready = address + "\n";
  std::unique_ptr<MetricsHttpServer> metrics;
  if (!options.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> started = MetricsHttpServer::Start(
        options.metrics_listen, [c = coordinator->get()] { return c->MetricsText(); });
    if (!started.ok()) {
      std::fprintf(stderr, "tandem coordinator: %s\n",
                   std::string(started.status().message()).c_str());
      return 1;
    }
    metrics = *std::move(started);
    TANDEM_LOG(kInfo, "coordinator") << "serving http://" << metrics->address() << "/metrics";
    ready += "metrics " + metrics->address() + "\n";
  }
  if (!options.ready_file.empty()) {
    if (absl::Status status = WriteFileAtomically(options.ready_file, ready); !status.ok()) {
      std::fprintf(stderr, "tandem coordinator: %s\n", std::string(status.message()).c_str());
      return 1;
    }
  }
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  TANDEM_LOG(kInfo, "coordinator") << "stopping (signal " << signal_number << ")";
  metrics.reset();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  coordinator->reset();
  return 0;
}

}  // namespace tandem::coordinator
