#include "actors/actor_server.h"

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "actors/actor_service.h"
#include "actors/worker.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "jobspec/memory_estimate.h"
#include "platform/device.h"
#include "proto/tandem/v1/coordinator.grpc.pb.h"
#include "rpc/channel.h"
#include "rpc/status.h"
#include "transport/inbox.h"
#include "transport/local_listener.h"
#include "transport/peer_service.h"

namespace tandem::actors {
namespace {

constexpr char kComponent[] = "actor";
using Clock = std::chrono::steady_clock;

// Registration and heartbeats on a thread of their own; re-registers when the coordinator forgot
// us. Each heartbeat also says whether the actor is stuck (ActorService::Stuck), and the health
// service follows it: NOT_SERVING while stuck, so probes and `tandem actor --supervise` see it.
class Membership {
 public:
  // `forgotten` runs before the actor registers again; `stuck` says why the actor cannot take work
  // (nullopt when it can); `set_serving` sets what the health service answers.
  Membership(const ActorOptions& options, std::string address, const Worker* worker,
             std::function<void()> forgotten, std::function<std::optional<std::string>()> stuck,
             std::function<void(bool)> set_serving)
      : options_(options),
        address_(std::move(address)),
        worker_(worker),
        forgotten_(std::move(forgotten)),
        stuck_(std::move(stuck)),
        set_serving_(std::move(set_serving)),
        stub_(v1::Coordinator::NewStub(rpc::MakeChannel(options.coordinator))) {}

  ~Membership() { Stop(); }

  // Registers, retrying until options.connect_timeout passes; a refused token is final.
  absl::Status Register() {
    const auto deadline = Clock::now() + options_.connect_timeout;
    absl::Status status;
    while (true) {
      status = RegisterOnce();
      if (status.ok() || status.code() == absl::StatusCode::kUnauthenticated ||
          Clock::now() >= deadline) {
        return status;
      }
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_; }))
        return status;
    }
  }

  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  absl::Status RegisterOnce() {
    v1::RegisterActorRequest request;
    request.set_pool(options_.pool);
    request.set_device(options_.device);
    request.set_address(address_);
    request.set_memory_bytes(options_.memory_bytes);
    v1::RegisterActorResponse response;
    absl::Status status =
        rpc::FromGrpc(stub_->RegisterActor(rpc::ContextWithTimeout(std::chrono::seconds(10)).get(),
                                           request, &response),
                      absl::StrCat("coordinator ", options_.coordinator, ": RegisterActor"));
    if (!status.ok()) return status;
    std::lock_guard<std::mutex> lock(mu_);
    actor_id_ = response.actor_id();
    interval_ = std::chrono::milliseconds(std::max<int64_t>(50, response.heartbeat_interval_ms()));
    TANDEM_LOG(kInfo, kComponent) << actor_id_ << ": registered with " << options_.coordinator
                                  << " in pool " << options_.pool << ", serving on " << address_
                                  << ", offering a job "
                                  << (options_.memory_bytes > 0
                                          ? jobspec::FormatBytes(options_.memory_bytes)
                                          : std::string("unknown memory"));
    return absl::OkStatus();
  }

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, interval_, [&] { return stopping_; })) {
      v1::HeartbeatRequest request;
      request.set_actor_id(actor_id_);
      lock.unlock();
      const WorkerStatus status = worker_->status();
      request.set_job_id(status.job_id);
      request.set_step(status.step);
      request.set_phase(status.phase);
      request.set_last_collective(status.last_collective);
      const std::optional<std::string> stuck = stuck_();
      if (stuck) request.set_unhealthy(*stuck);
      if (stuck.has_value() != unhealthy_) {
        unhealthy_ = stuck.has_value();
        set_serving_(!unhealthy_);
        if (unhealthy_) {
          TANDEM_LOG(kError, kComponent)
              << *stuck << "; not serving (health NOT_SERVING) until it returns";
        } else {
          TANDEM_LOG(kInfo, kComponent) << "the stuck command returned; serving again";
        }
      }
      v1::HeartbeatResponse response;
      grpc::Status result = stub_->Heartbeat(rpc::ContextWithTimeout(std::chrono::seconds(5)).get(),
                                             request, &response);
      if (result.error_code() == grpc::StatusCode::NOT_FOUND) {
        TANDEM_LOG(kWarning, kComponent)
            << "the coordinator does not know this actor any more; registering again";
        forgotten_();
        absl::Status registered = RegisterOnce();
        if (!registered.ok()) TANDEM_LOG(kWarning, kComponent) << registered.message();
      }
      lock.lock();
    }
  }

  const ActorOptions& options_;
  std::string address_;
  const Worker* worker_;
  std::function<void()> forgotten_;
  std::function<std::optional<std::string>()> stuck_;
  std::function<void(bool)> set_serving_;
  bool unhealthy_ = false;  // the heartbeat thread's own
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::string actor_id_;
  std::chrono::milliseconds interval_{1000};
  std::thread thread_;
};

}  // namespace

int RunActor(const ActorOptions& given) {
  ActorOptions options = given;
  if (options.memory_bytes <= 0) options.memory_bytes = platform::DeviceMemoryBytes(options.device);
  // Signals are taken by sigwait below; every thread started from here on inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  WorkerOptions worker_options;
  worker_options.device = options.device;
  worker_options.memory_bytes = options.memory_bytes;
  worker_options.collective_host = host.empty() ? "127.0.0.1" : host;
  std::unique_ptr<Worker> worker = CreateWorker(worker_options);
  auto inbox = std::make_shared<transport::Inbox>();
  ActorService actor_service(worker.get(), inbox, options.coordinator, options.local_links);
  transport::PeerServiceOptions peer_options;
  std::unique_ptr<transport::LocalListener> local_listener;
  if (options.local_links) {
    absl::StatusOr<std::unique_ptr<transport::LocalListener>> listener =
        transport::LocalListener::Start(inbox, peer_options.expect_timeout);
    if (listener.ok()) {
      local_listener = *std::move(listener);
      peer_options.local_endpoint = local_listener->endpoint();
    } else {
      TANDEM_LOG(kWarning, kComponent)
          << listener.status().message() << "; receiving over gRPC only";
    }
  }
  transport::PeerService peer_service(inbox, peer_options);

  grpc::ServerBuilder builder;
  int port = 0;
  rpc::ConfigureServer(builder, options.listen, &port, rpc::kActorLimits);
  transport::ConfigurePeerServer(builder);
  builder.RegisterService(&actor_service);
  builder.RegisterService(&peer_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "tandem actor: cannot listen on %s\n", options.listen.c_str());
    return 1;
  }
  const std::string address =
      options.advertise.empty() ? rpc::WithPort(options.listen, port) : options.advertise;

  Membership membership(
      options, address, worker.get(),
      [&actor_service] {
        actor_service.ReleaseCurrentJob("the coordinator no longer knows this actor");
      },
      [&actor_service] { return actor_service.Stuck(); },
      [&server](bool serving) { server->GetHealthCheckService()->SetServingStatus(serving); });
  if (absl::Status status = membership.Register(); !status.ok()) {
    std::fprintf(stderr, "tandem actor: %s\n", std::string(status.message()).c_str());
    server->Shutdown();
    return 1;
  }
  membership.Start();
  if (!options.ready_file.empty()) {
    if (absl::Status status = WriteFileAtomically(options.ready_file, address + "\n");
        !status.ok()) {
      std::fprintf(stderr, "tandem actor: %s\n", std::string(status.message()).c_str());
    }
  }
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  TANDEM_LOG(kInfo, kComponent) << "stopping (signal " << signal_number << ")";
  membership.Stop();
  inbox->ClearJob();  // transfers waiting for an expectation return at once
  peer_service.CloseStreams();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  // No AssignJob can give the inbox a job any more: the local links' threads end at once.
  inbox->ClearJob();
  if (local_listener) local_listener->Close();
  worker->Release();
  return 0;
}

}  // namespace tandem::actors
