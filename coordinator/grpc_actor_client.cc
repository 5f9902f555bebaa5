#include "coordinator/grpc_actor_client.h"

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>

#include "common/logging.h"
#include "common/status_macros.h"
#include "proto/tandem/v1/actor.grpc.pb.h"
#include "rpc/channel.h"
#include "rpc/status.h"

namespace tandem::coordinator {
namespace {

constexpr char kComponent[] = "coordinator";
constexpr std::chrono::milliseconds kMargin{30000};

class GrpcActorClient final : public ActorClient {
 public:
  GrpcActorClient(const std::string& address, std::string name,
                  const GrpcActorClientOptions& options)
      : stub_(v1::Actor::NewStub(rpc::MakeChannel(address))),
        name_(std::move(name)),
        options_(options) {}

  absl::StatusOr<ActorAssignReply> AssignJob(const ActorAssignment& assignment) override {
    v1::AssignJobRequest request;
    request.set_job_id(assignment.job_id);
    if (assignment.spec != nullptr) *request.mutable_spec() = *assignment.spec;
    request.set_role(static_cast<v1::Role>(assignment.role));
    request.set_rank(assignment.rank);
    request.set_group_size(assignment.group_size);
    for (const std::string& peer : assignment.peers) request.mutable_peers()->add_addresses(peer);
    request.set_rendezvous_prefix(assignment.rendezvous_prefix);
    request.set_run_dir(assignment.run_dir);
    request.set_timeout_ms(assignment.timeout.count());
    request.set_threads(assignment.threads);
    request.set_attempt(assignment.attempt);
    request.set_resume_from(assignment.resume_from);
    if (assignment.restore.step > 0) {
      v1::MemoryRestore& restore = *request.mutable_restore();
      restore.set_step(assignment.restore.step);
      restore.set_from_peer(assignment.restore.from_peer);
      for (const int peer : assignment.restore.send_to) restore.add_send_to(peer);
    }
    v1::AssignJobResponse response;
    for (int attempt = 1;; ++attempt) {
      const grpc::Status status = Command([&](grpc::ClientContext* context) {
        return stub_->AssignJob(context, request, &response);
      });
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
          attempt >= options_.assign_attempts || WaitToRetry(assignment.job_id, status)) {
        RETURN_IF_ERROR(rpc::FromGrpc(status));
        break;
      }
    }
    ActorAssignReply reply;
    reply.parameters = response.parameters();
    reply.vocab_size = response.vocab_size();
    reply.train_samples = response.train_samples();
    reply.eval_samples = response.eval_samples();
    reply.step = response.step();
    return reply;
  }

  absl::StatusOr<ActorStepReply> RunStep(const std::string& job_id, int64_t step) override {
    v1::RunStepRequest request;
    request.set_job_id(job_id);
    request.set_step(step);
    v1::RunStepResponse response;
    RETURN_IF_ERROR(rpc::FromGrpc(Command([&](grpc::ClientContext* context) {
      return stub_->RunStep(context, request, &response);
    })));
    ActorStepReply reply;
    reply.loss = response.loss();
    reply.grad_norm = response.grad_norm();
    reply.lr = response.lr();
    reply.skipped = response.skipped();
    reply.compute_s = response.compute_s();
    reply.wait_s = response.wait_s();
    reply.positions = response.positions();
    reply.padding = response.padding();
    reply.bytes_sent = response.bytes_sent();
    reply.planned = response.planned();
    reply.skipped_samples = response.skipped_samples();
    reply.snapshot_bytes = response.snapshot_bytes();
    return reply;
  }

  absl::StatusOr<ActorEvalReply> Evaluate(const std::string& job_id, int64_t step) override {
    v1::EvaluateRequest request;
    request.set_job_id(job_id);
    request.set_step(step);
    v1::EvaluateResponse response;
    RETURN_IF_ERROR(rpc::FromGrpc(Command([&](grpc::ClientContext* context) {
      return stub_->Evaluate(context, request, &response);
    })));
    return ActorEvalReply{response.samples(), response.exact(), response.tokens(),
                          response.correct_tokens()};
  }

  absl::Status SaveCheckpoint(const std::string& job_id, int64_t step,
                              const std::string& directory) override {
    v1::SaveCheckpointRequest request;
    request.set_job_id(job_id);
    request.set_step(step);
    request.set_directory(directory);
    v1::SaveCheckpointResponse response;
    return rpc::FromGrpc(Command([&](grpc::ClientContext* context) {
      return stub_->SaveCheckpoint(context, request, &response);
    }));
  }

  absl::Status FinishCheckpoint(const std::string& job_id, int64_t step,
                                const std::string& directory) override {
    v1::FinishCheckpointRequest request;
    request.set_job_id(job_id);
    request.set_step(step);
    request.set_directory(directory);
    v1::FinishCheckpointResponse response;
    return rpc::FromGrpc(Command([&](grpc::ClientContext* context) {
      return stub_->FinishCheckpoint(context, request, &response);
    }));
  }

  absl::Status Export(const std::string& job_id, const std::string& path) override {
    v1::ExportRequest request;
    request.set_job_id(job_id);
    request.set_path(path);
    v1::ExportResponse response;
    return rpc::FromGrpc(Command(
        [&](grpc::ClientContext* context) { return stub_->Export(context, request, &response); }));
  }

  absl::Status Release(const std::string& job_id, const std::string& reason) override {
    v1::ReleaseRequest request;
    request.set_job_id(job_id);
    request.set_reason(reason);
    v1::ReleaseResponse response;
    const grpc::Status status = stub_->Release(
        rpc::ContextWithTimeout(options_.release_deadline).get(), request, &response);
    // As it is: the runner quotes the channel's message when the actor cannot be reached.
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }

  absl::StatusOr<SnapshotHoldings> HeldSnapshots(const std::string& job_id) override {
    v1::HeldSnapshotsRequest request;
    request.set_job_id(job_id);
    v1::HeldSnapshotsResponse response;
    RETURN_IF_ERROR(rpc::FromGrpc(Command([&](grpc::ClientContext* context) {
      return stub_->HeldSnapshots(context, request, &response);
    })));
    SnapshotHoldings held;
    held.holds = response.holds();
    held.role = response.role() == v1::ROLE_LLM ? Role::kLlm : Role::kVision;
    held.rank = response.rank();
    held.group_size = response.group_size();
    held.peer_group_size = response.peer_group_size();
    held.own_steps.assign(response.own_steps().begin(), response.own_steps().end());
    for (const auto& [rank, step] : response.copies()) held.copies[rank] = step;
    held.bytes = response.bytes();
    return held;
  }

  void StopRetrying() override {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    stop_.notify_all();
  }

  void CancelCalls() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    for (grpc::ClientContext* context : in_flight_) context->TryCancel();
  }

 private:
  // Makes one command call under the command deadline, cancellable by CancelCalls.
  grpc::Status Command(const std::function<grpc::Status(grpc::ClientContext*)>& call) {
    const std::unique_ptr<grpc::ClientContext> context =
        rpc::ContextWithTimeout(options_.command_deadline);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_)
        return grpc::Status(grpc::StatusCode::CANCELLED,
                            "the actor was lost; its commands are cancelled");
      in_flight_.insert(context.get());
    }
    const grpc::Status status = call(context.get());
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(context.get());
    return status;
  }

  // Logs the failed AssignJob and waits to try again; true when StopRetrying ended the retries.
  bool WaitToRetry(const std::string& job_id, const grpc::Status& status) {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopped_) return true;
    TANDEM_LOG(kWarning, kComponent)
        << job_id << ": " << name_ << ": " << rpc::FromGrpc(status, "AssignJob").message()
        << "; trying again in " << options_.assign_retry_delay.count() / 1000.0 << " s";
    return stop_.wait_for(lock, options_.assign_retry_delay, [&] { return stopped_; });
  }

  const std::unique_ptr<v1::Actor::Stub> stub_;
  const std::string name_;
  const GrpcActorClientOptions options_;
  std::mutex mu_;
  std::condition_variable stop_;
  bool stopped_ = false;                      // guarded by mu_
  bool cancelled_ = false;                    // guarded by mu_
  std::set<grpc::ClientContext*> in_flight_;  // guarded by mu_
};

}  // namespace

GrpcActorClientOptions GrpcActorClientOptions::ForCommandTimeout(
    std::chrono::milliseconds command_timeout) {
  GrpcActorClientOptions options;
  options.command_deadline = command_timeout + kMargin;
  return options;
}

std::unique_ptr<ActorClient> GrpcActorClientFactory::Connect(const std::string& address,
                                                             const std::string& name) {
  return std::make_unique<GrpcActorClient>(address, name, options_);
}

}  // namespace tandem::coordinator
