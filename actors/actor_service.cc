#include "actors/actor_service.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/paths.h"
#include "common/prefix_store.h"
#include "jobspec/job_spec_proto.h"
#include "rpc/remote_store.h"
#include "rpc/security.h"
#include "rpc/status.h"
#include "transport/grpc_transport.h"

namespace tandem::actors {
namespace {
constexpr char kComponent[] = "actor";
}  // namespace

ActorService::ActorService(Worker* worker, std::shared_ptr<transport::Inbox> inbox,
                           std::string coordinator, bool local_links,
                           std::chrono::milliseconds stuck_grace)
    : worker_(worker),
      inbox_(std::move(inbox)),
      coordinator_(std::move(coordinator)),
      local_links_(local_links),
      stuck_grace_(stuck_grace) {}

std::string ActorService::job_id() const {
  std::lock_guard<std::mutex> lock(id_mu_);
  return job_id_;
}

void ActorService::set_job_id(std::string job_id) {
  std::lock_guard<std::mutex> lock(id_mu_);
  job_id_ = std::move(job_id);
}

std::optional<std::string> ActorService::Stuck() const {
  const std::optional<CommandThread::Running> running = commands_.running();
  if (!running) return std::nullopt;
  const auto limit = std::chrono::milliseconds(command_timeout_ms_.load()) + stuck_grace_;
  const auto elapsed = std::chrono::steady_clock::now() - running->since;
  if (elapsed <= limit) return std::nullopt;
  return absl::StrCat("stuck: ", running->name, " has run for ",
                      std::chrono::duration_cast<std::chrono::seconds>(elapsed).count(),
                      " s, past the command timeout (",
                      std::chrono::duration_cast<std::chrono::seconds>(limit).count(),
                      " s with the grace)");
}

absl::Status ActorService::CheckInsideRunDir(const std::string& path, const char* what) const {
  if (run_dir_.empty() || !std::filesystem::path(run_dir_).is_absolute()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", path, ": the job has no absolute run directory"));
  }
  if (!IsInside(path, run_dir_)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path,
                                                   " is outside the job's run directory ", run_dir_,
                                                   ": an actor writes nowhere else"));
  }
  return absl::OkStatus();
}

absl::Status ActorService::CheckJob(const std::string& job_id) const {
  const std::string current = this->job_id();
  if (current.empty())
    return absl::FailedPreconditionError(absl::StrCat("actor has no job (asked for ", job_id, ")"));
  if (job_id != current) {
    return absl::FailedPreconditionError(
        absl::StrCat("actor runs job ", current, ", not ", job_id));
  }
  return absl::OkStatus();
}

grpc::Status ActorService::AssignJob(grpc::ServerContext* context,
                                     const v1::AssignJobRequest* request,
                                     v1::AssignJobResponse* response) {
  TANDEM_AUTHORIZE(context);
  std::lock_guard<std::mutex> lock(command_mu_);
  if (const std::string current = job_id(); !current.empty()) {
    return rpc::ToGrpc(absl::FailedPreconditionError(
        absl::StrCat("actor already runs job ", current, "; cannot take ", request->job_id())));
  }
  absl::StatusOr<jobspec::ResolvedJobSpec> job =
      jobspec::ResolveJobSpec(request->spec(), request->job_id());
  if (!job.ok()) return rpc::ToGrpc(job.status());
  if (request->role() != v1::ROLE_VISION && request->role() != v1::ROLE_LLM) {
    return rpc::ToGrpc(absl::InvalidArgumentError("assignment has no role"));
  }
  Assignment assignment;
  assignment.job_id = request->job_id();
  assignment.job = std::move(job->config);
  assignment.role = request->role() == v1::ROLE_VISION ? Role::kVision : Role::kLlm;
  assignment.rank = request->rank();
  assignment.group_size = request->group_size();
  assignment.peer_group_size = request->peers().addresses_size();
  assignment.run_dir = request->run_dir();
  assignment.timeout =
      std::chrono::milliseconds(request->timeout_ms() > 0 ? request->timeout_ms() : 300000);
  assignment.threads = request->threads();
  assignment.attempt = std::max<int64_t>(1, request->attempt());
  assignment.resume_from = request->resume_from();
  if (request->has_restore() && request->restore().step() > 0) {
    assignment.restore.step = request->restore().step();
    assignment.restore.from_peer = request->restore().from_peer();
    assignment.restore.send_to.assign(request->restore().send_to().begin(),
                                      request->restore().send_to().end());
  }
  if (assignment.rank < 0 || assignment.rank >= assignment.group_size ||
      assignment.peer_group_size < 1) {
    return rpc::ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("rank ", assignment.rank, " of ", assignment.group_size, " with ",
                     assignment.peer_group_size, " peers")));
  }

  auto store = std::make_shared<PrefixStore>(rpc::CreateRemoteStore(coordinator_),
                                             request->rendezvous_prefix() + "/");
  transport::GrpcTransportOptions transport_options;
  transport_options.timeout = assignment.timeout;
  transport_options.local_links = local_links_;
  std::vector<std::string> peers(request->peers().addresses().begin(),
                                 request->peers().addresses().end());
  inbox_->SetJob(TransferJobKey(assignment.job_id, assignment.attempt));
  std::shared_ptr<transport::Transport> transport =
      transport::CreateGrpcTransport(inbox_, std::move(peers), transport_options);
  absl::StatusOr<AssignResult> result = absl::UnknownError("not run");
  command_timeout_ms_ = assignment.timeout.count();
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  assignment.cancelled = cancelled;
  {
    std::lock_guard<std::mutex> lock(id_mu_);
    assigning_job_ = assignment.job_id;
    assigning_cancelled_ = cancelled;
    assigning_release_reason_.clear();
  }
  commands_.Run(
      [&] { result = worker_->Assign(assignment, std::move(store), std::move(transport)); },
      absl::StrCat("AssignJob ", assignment.job_id));
  std::string release_reason;
  {
    std::lock_guard<std::mutex> lock(id_mu_);
    assigning_job_.clear();
    assigning_cancelled_.reset();
    release_reason = assigning_release_reason_;
  }
  if (cancelled->load()) {
    // Released while it was built: whatever was built goes, and the job is not taken.
    if (result.ok()) commands_.Run([&] { worker_->Release(); }, "Release");
    TANDEM_LOG(kInfo, kComponent) << assignment.job_id << ": released while being built ("
                                  << release_reason << ")";
    result = absl::CancelledError(absl::StrCat(
        assignment.job_id, " was released while this actor built it: ", release_reason));
  }
  if (!result.ok()) {
    inbox_->ClearJob();
    TANDEM_LOG(kWarning, kComponent)
        << assignment.job_id << ": cannot take the job: " << result.status().message();
    return rpc::ToGrpc(result.status());
  }
  set_job_id(assignment.job_id);
  run_dir_ = assignment.run_dir;
  step_failed_ = false;
  last_posted_step_ = worker_->status().step;
  response->set_parameters(result->parameters);
  response->set_vocab_size(result->vocab_size);
  response->set_train_samples(result->train_samples);
  response->set_eval_samples(result->eval_samples);
  response->set_step(result->step);
  return grpc::Status::OK;
}

grpc::Status ActorService::RunStep(grpc::ServerContext* context, const v1::RunStepRequest* request,
                                   v1::RunStepResponse* response) {
  TANDEM_AUTHORIZE(context);
  std::unique_lock<std::mutex> lock(command_mu_);
  // The coordinator sends an actor's next step before the current one returns. It waits here until
  // its predecessor is posted, then queues behind it on the command thread, which starts it the
  // moment the predecessor returns. It fails at once when the job was released, and without
  // running when an earlier step failed.
  const int64_t step = request->step();
  // A call without a deadline has one at the end of time, which the wait cannot represent.
  const auto deadline =
      std::min(context->deadline(), std::chrono::system_clock::now() + std::chrono::hours(24));
  ++steps_waiting_;
  const bool turn = step_posted_.wait_until(lock, deadline, [&] {
    return job_id() != request->job_id() || last_posted_step_ + 1 >= step;
  });
  --steps_waiting_;
  if (absl::Status status = CheckJob(request->job_id()); !status.ok()) return rpc::ToGrpc(status);
  const auto aborted = [&] {
    return absl::AbortedError(absl::StrCat("step ", step, " not run: an earlier step of job ",
                                           request->job_id(), " failed"));
  };
  if (step_failed_) return rpc::ToGrpc(aborted());
  if (!turn) {
    return rpc::ToGrpc(absl::DeadlineExceededError(
        absl::StrCat("step ", step, " not run: step ", last_posted_step_ + 1,
                     " did not come before the deadline")));
  }
  absl::StatusOr<StepResult> result = absl::UnknownError("not run");
  const CommandThread::Ticket ticket = commands_.Post(
      [&] {
        if (step_failed_) {
          result = aborted();
          return;
        }
        result = worker_->RunStep(step);
        if (!result.ok()) step_failed_ = true;
      },
      absl::StrCat("RunStep ", step));
  last_posted_step_ = std::max(last_posted_step_, step);
  step_posted_.notify_all();
  lock.unlock();
  commands_.Wait(ticket);
  if (!result.ok()) return rpc::ToGrpc(result.status());
  response->set_loss(result->loss);
  response->set_grad_norm(result->grad_norm);
  response->set_lr(result->lr);
  response->set_skipped(result->skipped);
  response->set_compute_s(result->compute_s);
  response->set_wait_s(result->wait_s);
  response->set_positions(result->positions);
  response->set_padding(result->padding);
  response->set_bytes_sent(result->bytes_sent);
  response->set_planned(result->planned);
  response->set_skipped_samples(result->skipped_samples);
  response->set_snapshot_bytes(result->snapshot_bytes);
  return grpc::Status::OK;
}

grpc::Status ActorService::Evaluate(grpc::ServerContext* context,
                                    const v1::EvaluateRequest* request,
                                    v1::EvaluateResponse* response) {
  TANDEM_AUTHORIZE(context);
  std::lock_guard<std::mutex> lock(command_mu_);
  if (absl::Status status = CheckJob(request->job_id()); !status.ok()) return rpc::ToGrpc(status);
  absl::StatusOr<EvalCounts> counts = absl::UnknownError("not run");
  commands_.Run([&] { counts = worker_->Evaluate(request->step()); },
                absl::StrCat("Evaluate ", request->step()));
  if (!counts.ok()) return rpc::ToGrpc(counts.status());
  response->set_samples(counts->samples);
  response->set_exact(counts->exact);
  response->set_tokens(counts->tokens);
  response->set_correct_tokens(counts->correct_tokens);
  return grpc::Status::OK;
}

grpc::Status ActorService::SaveCheckpoint(grpc::ServerContext* context,
                                          const v1::SaveCheckpointRequest* request,
                                          v1::SaveCheckpointResponse*) {
  TANDEM_AUTHORIZE(context);
  std::lock_guard<std::mutex> lock(command_mu_);
  if (absl::Status status = CheckJob(request->job_id()); !status.ok()) return rpc::ToGrpc(status);
  if (absl::Status inside = CheckInsideRunDir(request->directory(), "checkpoint directory");
      !inside.ok()) {
    return rpc::ToGrpc(inside);
  }
  absl::Status status;
  commands_.Run([&] { status = worker_->SaveCheckpoint(request->step(), request->directory()); },
                absl::StrCat("SaveCheckpoint ", request->step()));
  return rpc::ToGrpc(status);
}

grpc::Status ActorService::FinishCheckpoint(grpc::ServerContext* context,
                                            const v1::FinishCheckpointRequest* request,
                                            v1::FinishCheckpointResponse*) {
  TANDEM_AUTHORIZE(context);
  std::lock_guard<std::mutex> lock(command_mu_);
  if (absl::Status status = CheckJob(request->job_id()); !status.ok()) return rpc::ToGrpc(status);
  absl::Status status;
  commands_.Run([&] { status = worker_->FinishCheckpoint(request->step(), request->directory()); },
                absl::StrCat("FinishCheckpoint ", request->step()));
  return rpc::ToGrpc(status);
}

grpc::Status ActorService::Export(grpc::ServerContext* context, const v1::ExportRequest* request,
                                  v1::ExportResponse*) {
  TANDEM_AUTHORIZE(context);
  std::lock_guard<std::mutex> lock(command_mu_);
  if (absl::Status status = CheckJob(request->job_id()); !status.ok()) return rpc::ToGrpc(status);
  if (absl::Status inside = CheckInsideRunDir(request->path(), "export path"); !inside.ok())
    return rpc::ToGrpc(inside);
  absl::Status status;
  commands_.Run([&] { status = worker_->Export(request->path()); }, "Export");
  return rpc::ToGrpc(status);
}

grpc::Status ActorService::Release(grpc::ServerContext* context, const v1::ReleaseRequest* request,
                                   v1::ReleaseResponse*) {
  TANDEM_AUTHORIZE(context);
  ReleaseJob(request->job_id(), request->reason());
  return grpc::Status::OK;
}

grpc::Status ActorService::HeldSnapshots(grpc::ServerContext* context,
                                         const v1::HeldSnapshotsRequest* request,
                                         v1::HeldSnapshotsResponse* response) {
  TANDEM_AUTHORIZE(context);
  std::lock_guard<std::mutex> lock(command_mu_);
  SnapshotHoldings held;
  commands_.Run([&] { held = worker_->HeldSnapshots(request->job_id()); }, "HeldSnapshots");
  response->set_holds(held.holds);
  if (!held.holds) return grpc::Status::OK;
  response->set_role(held.role == Role::kVision ? v1::ROLE_VISION : v1::ROLE_LLM);
  response->set_rank(held.rank);
  response->set_group_size(held.group_size);
  response->set_peer_group_size(held.peer_group_size);
  for (const int64_t step : held.own_steps) response->add_own_steps(step);
  for (const auto& [rank, step] : held.copies) (*response->mutable_copies())[rank] = step;
  response->set_bytes(held.bytes);
  return grpc::Status::OK;
}

void ActorService::ReleaseCurrentJob(const std::string& reason) {
  const std::string current = job_id();
  if (!current.empty()) ReleaseJob(current, reason);
}

void ActorService::ReleaseJob(const std::string& job, const std::string& reason) {
  {
    // A job still being built stops at the worker's next check; AssignJob then refuses it.
    std::lock_guard<std::mutex> lock(id_mu_);
    if (assigning_cancelled_ != nullptr && assigning_job_ == job) {
      if (!assigning_cancelled_->exchange(true)) assigning_release_reason_ = reason;
      return;
    }
  }
  if (job_id() != job) return;  // not ours: nothing to release
  // Cancel the transfers a running command waits for, so it returns before we take the lock.
  inbox_->ClearJob();
  std::lock_guard<std::mutex> lock(command_mu_);
  if (job_id() != job) return;
  commands_.Run([&] { worker_->Release(); }, "Release");
  TANDEM_LOG(kInfo, kComponent) << job << ": released (" << reason << ")";
  set_job_id("");
  step_posted_.notify_all();  // steps waiting for their turn end now
}

}  // namespace tandem::actors
