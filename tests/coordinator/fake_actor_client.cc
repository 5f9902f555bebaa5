#include "tests/coordinator/fake_actor_client.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rundir/checkpoint_dir.h"

namespace tandem::coordinator {

ActorStepReply DefaultStepReply(Role role, int rank, int64_t step) {
  ActorStepReply reply;
  if (role == Role::kLlm) {
    reply.loss = (1.0 + rank) / static_cast<double>(step);
    reply.lr = 0.01 / static_cast<double>(step);
    reply.grad_norm = 0.4;
    reply.bytes_sent = 10;
    reply.compute_s = 1.0 + rank;
    reply.planned = 3.0 - rank;
    reply.positions = 100;
    reply.padding = 10 * (rank + 1);
  } else {
    reply.lr = 0.02 / static_cast<double>(step);
    reply.grad_norm = 0.3;
    reply.bytes_sent = 100;
    reply.compute_s = 2.0 * (rank + 1);
    reply.planned = 4;
  }
  return reply;
}

class FakeActors::Client final : public ActorClient {
 public:
  Client(FakeActors* actors, std::string address) : actors_(actors), address_(std::move(address)) {}

  absl::StatusOr<ActorAssignReply> AssignJob(const ActorAssignment& assignment) override {
    return actors_->Assign(address_, assignment);
  }
  absl::StatusOr<ActorStepReply> RunStep(const std::string& job_id, int64_t step) override {
    return actors_->RunStep(address_, step);
  }
  absl::StatusOr<ActorEvalReply> Evaluate(const std::string& job_id, int64_t step) override {
    return actors_->Evaluate(address_, step);
  }
  absl::Status SaveCheckpoint(const std::string& job_id, int64_t step,
                              const std::string& directory) override {
    return actors_->SaveCheckpoint(address_, step, directory);
  }
  absl::Status FinishCheckpoint(const std::string& job_id, int64_t step,
                                const std::string& directory) override {
    std::lock_guard<std::mutex> lock(actors_->mu_);
    return actors_->Enter({address_, "FinishCheckpoint", step, directory});
  }
  absl::Status Export(const std::string& job_id, const std::string& path) override {
    return actors_->Export(address_, path);
  }
  absl::Status Release(const std::string& job_id, const std::string& reason) override {
    return actors_->Release(address_, reason);
  }
  absl::StatusOr<SnapshotHoldings> HeldSnapshots(const std::string& job_id) override {
    return actors_->HeldSnapshots(address_);
  }
  void StopRetrying() override {}
  void CancelCalls() override { actors_->CancelCalls(address_); }

 private:
  FakeActors* const actors_;
  const std::string address_;
};

std::unique_ptr<ActorClient> FakeActors::Connect(const std::string& address,
                                                 const std::string& name) {
  return std::make_unique<Client>(this, address);
}

absl::Status FakeActors::Enter(const Call& call) {
  calls_.push_back(call);
  if (actors_[call.address].lost) return absl::UnavailableError(kUnreachable);
  return absl::OkStatus();
}

absl::StatusOr<ActorAssignReply> FakeActors::Assign(const std::string& address,
                                                    const ActorAssignment& assignment) {
  std::unique_lock<std::mutex> lock(mu_);
  assignments_.emplace_back(address, assignment);
  if (absl::Status gone = Enter({address, "AssignJob", 0, ""}); !gone.ok()) return gone;
  ++actors_[address].assigns_entered;
  changed_.notify_all();
  changed_.wait(lock,
                [&] { return !actors_[address].hold_assign || actors_[address].calls_cancelled; });
  if (actors_[address].hold_assign)
    return absl::CancelledError("calls to the actor were cancelled");
  ActorAssignReply reply;
  if (auto failure = actors_[address].load_failures.find(assignment.resume_from);
      failure != actors_[address].load_failures.end()) {
    return failure->second;
  }
  if (assignment.restore.step > 0) {
    reply.step = assignment.restore.step;
  } else if (!assignment.resume_from.empty()) {
    absl::StatusOr<rundir::CheckpointInfo> checkpoint =
        rundir::ReadCheckpoint(assignment.resume_from);
    if (!checkpoint.ok()) return checkpoint.status();
    reply.step = checkpoint->step;
  }
  Actor& actor = actors_[address];
  actor.role = assignment.role;
  actor.rank = assignment.rank;
  actor.done = reply.step;
  actor.failed = actor.released = false;
  actor.started.clear();
  const bool vision = assignment.role == Role::kVision;
  reply.parameters = vision ? kVisionParameters : kLlmParameters;
  reply.vocab_size = kVocabSize;
  return reply;
}

absl::StatusOr<ActorStepReply> FakeActors::RunStep(const std::string& address, int64_t step) {
  std::unique_lock<std::mutex> lock(mu_);
  Actor& actor = actors_[address];
  if (absl::Status gone = Enter({address, "RunStep", step, ""}); !gone.ok()) return gone;
  // In order, as the actor runs them.
  changed_.wait(
      lock, [&] { return actor.done >= step - 1 || actor.failed || actor.released || actor.lost; });
  if (actor.lose_at >= 0 && step >= actor.lose_at) {
    actor.lost = true;
    changed_.notify_all();
  }
  actor.started.insert(step);
  changed_.notify_all();
  changed_.wait(lock, [&] { return actor.held.count(step) == 0 || actor.released || actor.lost; });
  if (actor.lost) return absl::UnavailableError(kUnreachable);
  if (actor.released) return absl::CancelledError("the job was released");
  if (actor.failed) {
    return absl::AbortedError(absl::StrCat("step ", step, " not run: an earlier step failed"));
  }
  if (auto failure = actor.failures.find(step); failure != actor.failures.end()) {
    const absl::Status status = failure->second;
    actor.failures.erase(failure);
    actor.failed = true;
    changed_.notify_all();
    return status;
  }
  actor.done = step;
  actor.steps_done.push_back(step);
  changed_.notify_all();
  return actor.step_reply ? actor.step_reply(step) : DefaultStepReply(actor.role, actor.rank, step);
}

absl::StatusOr<ActorEvalReply> FakeActors::Evaluate(const std::string& address, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status gone = Enter({address, "Evaluate", step, ""}); !gone.ok()) return gone;
  return actors_[address].eval_reply;
}

absl::Status FakeActors::SaveCheckpoint(const std::string& address, int64_t step,
                                        const std::string& directory) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Enter({address, "SaveCheckpoint", step, directory}));
  std::error_code ec;
  std::filesystem::create_directories(
      std::filesystem::path(directory) / RoleName(actors_[address].role), ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", directory, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status FakeActors::Export(const std::string& address, const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return Enter({address, "Export", 0, path});
}

absl::Status FakeActors::Release(const std::string& address, const std::string& reason) {
  std::unique_lock<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Enter({address, "Release", 0, reason}));
  Actor& actor = actors_[address];
  ++actor.releases_entered;
  changed_.notify_all();
  changed_.wait(lock, [&] { return !actor.hold_release; });
  actor.released = true;
  changed_.notify_all();
  return absl::OkStatus();
}

void FakeActors::HoldAssign(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].hold_assign = true;
}

void FakeActors::UnholdAssign(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].hold_assign = false;
  changed_.notify_all();
}

bool FakeActors::WaitForAssign(const std::string& address, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return actors_[address].assigns_entered > 0; });
}

void FakeActors::CancelCalls(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].calls_cancelled = true;
  changed_.notify_all();
}

void FakeActors::HoldRelease(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].hold_release = true;
}

void FakeActors::UnholdRelease(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].hold_release = false;
  changed_.notify_all();
}

bool FakeActors::WaitForRelease(const std::string& address, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return actors_[address].releases_entered > 0; });
}

void FakeActors::FailStep(const std::string& address, int64_t step, absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].failures[step] = std::move(status);
}

void FakeActors::FailLoading(const std::string& address, const std::string& checkpoint,
                             absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].load_failures[checkpoint] = std::move(status);
}

void FakeActors::LoseAt(const std::string& address, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].lose_at = step;
}

void FakeActors::Lose(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].lost = true;
  changed_.notify_all();
}

void FakeActors::HoldStep(const std::string& address, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].held.insert(step);
}

void FakeActors::Unhold(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].held.clear();
  changed_.notify_all();
}

void FakeActors::SetStepReply(const std::string& address,
                              std::function<ActorStepReply(int64_t)> reply) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].step_reply = std::move(reply);
}

void FakeActors::SetEvalReply(const std::string& address, ActorEvalReply reply) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].eval_reply = reply;
}

bool FakeActors::WaitForStep(const std::string& address, int64_t step,
                             std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return actors_[address].started.count(step) > 0; });
}

std::vector<FakeActors::Call> FakeActors::Calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

std::vector<FakeActors::Call> FakeActors::Calls(const std::string& method) const {
  std::vector<Call> matching;
  for (const Call& call : Calls()) {
    if (call.method == method) matching.push_back(call);
  }
  return matching;
}

std::vector<int64_t> FakeActors::StepsDone(const std::string& address) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = actors_.find(address);
  return it == actors_.end() ? std::vector<int64_t>() : it->second.steps_done;
}

void FakeActors::SetHeldSnapshots(const std::string& address, SnapshotHoldings held) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[address].held_snapshots = std::move(held);
}

absl::StatusOr<SnapshotHoldings> FakeActors::HeldSnapshots(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status gone = Enter({address, "HeldSnapshots", 0, ""}); !gone.ok()) return gone;
  return actors_[address].held_snapshots;
}

std::vector<std::pair<std::string, ActorAssignment>> FakeActors::Assignments() const {
  std::lock_guard<std::mutex> lock(mu_);
  return assignments_;
}

}  // namespace tandem::coordinator
