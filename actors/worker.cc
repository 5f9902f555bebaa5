// The actor's LibTorch half (worker.h): the job's state on this actor around one stage of the step
// (step/stage.h), the vision or the LLM group's, chosen once when the job is assigned.
#include "actors/worker.h"

#include <malloc.h>
#include <torch/torch.h>

#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/communicator.h"
#include "engine/cuda_ops.h"
#include "hf/pretrained_job.h"
#include "jobspec/memory_estimate.h"
#include "parallel/layout.h"
#include "step/stage.h"

namespace tandem::actors {

std::string TransferJobKey(const std::string& job_id, int64_t attempt) {
  return absl::StrCat(job_id, "#", attempt);
}

namespace {

constexpr char kComponent[] = "actor";

class StageWorker : public Worker {
 public:
  explicit StageWorker(WorkerOptions options)
      : options_(std::move(options)), default_threads_(at::get_num_threads()) {}

  absl::StatusOr<AssignResult> Assign(const Assignment& assignment,
                                      std::shared_ptr<KeyValueStore> store,
                                      std::shared_ptr<transport::Transport> transport) override;
  absl::StatusOr<StepResult> RunStep(int64_t step) override;
  absl::StatusOr<EvalCounts> Evaluate(int64_t step) override;
  absl::Status SaveCheckpoint(int64_t step, const std::string& directory) override;
  absl::Status FinishCheckpoint(int64_t step, const std::string& directory) override;
  absl::Status Export(const std::string& path) override;
  void Release() override;
  SnapshotHoldings HeldSnapshots(const std::string& job_id) const override;
  WorkerStatus status() const override;

 private:
  absl::Status Setup(const Assignment& assignment, std::shared_ptr<KeyValueStore> store,
                     std::shared_ptr<transport::Transport> transport);
  bool job_snapshots_enabled() const { return assignment_->job.snapshot_every > 0; }

  WorkerOptions options_;
  int default_threads_;  // at::get_num_threads() when the actor started
  std::optional<Assignment> assignment_;
  std::shared_ptr<transport::Transport> transport_;
  std::unique_ptr<step::Stage> stage_;
  step::StageProgress progress_;
  // NOTE [Snapshots in memory] in step/stage.h: what the last released job's stage held, for its
  // restart, with the place it held it in; dropped when another job is assigned.
  struct Kept {
    std::string job_id;
    Role role = Role::kVision;
    int rank = 0, group_size = 0, peer_group_size = 0;
    step::HeldSnapshots held;
  };
  std::optional<Kept> kept_;

  mutable std::mutex status_mu_;
  std::string job_id_;  // guarded by status_mu_ (the rest is the command thread's)
  std::atomic<int64_t> step_{0};
};

absl::StatusOr<AssignResult> StageWorker::Assign(const Assignment& assignment,
                                                 std::shared_ptr<KeyValueStore> store,
                                                 std::shared_ptr<transport::Transport> transport) {
  if (assignment_) {
    return absl::FailedPreconditionError(
        absl::StrCat("actor already runs job ", assignment_->job_id, "; release it first"));
  }
  if (kept_ && kept_->job_id != assignment.job_id) kept_.reset();  // its memory is the new job's
  assignment_ = assignment;
  transport_ = transport;
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    job_id_ = assignment.job_id;
  }
  step_ = 0;
  progress_.phase = "setup";
  absl::Status status;
  try {
    status = Setup(assignment, std::move(store), std::move(transport));
  } catch (const std::bad_alloc&) {
    const std::string group = RoleName(assignment.role);
    status = absl::ResourceExhaustedError(absl::StrCat(
        "cannot build the job: out of memory building its ", group,
        " stage on this actor; its size comes from ", group, ".model (or ", group, ".pretrained), ",
        group, ".actors and ", group, ".engine (ZeRO stage, bf16 states)"));
  } catch (const std::exception& e) {
    status = step::TorchError("cannot build the job", e);
  }
  progress_.phase = "idle";
  if (!status.ok()) {
    Release();
    return status;
  }
  AssignResult result;
  result.parameters = stage_->parameters();
  result.vocab_size = stage_->data().text->vocab_size();
  result.train_samples = stage_->data().train_samples();
  result.eval_samples = stage_->data().eval_samples();
  result.step = step_.load();
  return result;
}

absl::Status StageWorker::Setup(const Assignment& a, std::shared_ptr<KeyValueStore> store,
                                std::shared_ptr<transport::Transport> transport) {
  const std::string group = RoleName(a.role);
  // A job's thread count holds for that job only: the next one starts from the actor's own.
  at::set_num_threads(a.threads > 0 ? a.threads : default_threads_);
  step::Placement placement;
  placement.transfer_key = TransferJobKey(a.job_id, a.attempt);
  placement.rank = a.rank;
  placement.group_size = a.group_size;
  placement.peer_group_size = a.peer_group_size;
  placement.device = c10::Device(options_.device);
  placement.timeout = a.timeout;
  placement.run_dir = a.run_dir;

  // Between the phases of building, a release of the job (tandem cancel) ends the assignment.
  const auto check_cancelled = [&a](const char* after) -> absl::Status {
    if (a.cancelled == nullptr || !a.cancelled->load()) return absl::OkStatus();
    return absl::CancelledError(
        absl::StrCat(a.job_id, " was released while this actor built it (after ", after, ")"));
  };
  // Pretrained models' shapes come from their config.json, read here as on every rank.
  jobspec::JobConfig job = a.job;
  RETURN_IF_ERROR(hf::ResolvePretrainedModels(job));
  const bool vision = a.role == Role::kVision;
  if (options_.memory_bytes > 0) {
    ASSIGN_OR_RETURN(const jobspec::MemoryEstimate estimate,
                     jobspec::EstimateGroupMemory(job, a.role));
    RETURN_IF_ERROR(
        jobspec::CheckEstimateFits(estimate, job, options_.memory_bytes,
                                   absl::StrCat("this actor (", options_.device,
                                                "; tandem actor --memory, else its device's)")));
  }
  RETURN_IF_ERROR(check_cancelled("reading the models' sizes"));
  ASSIGN_OR_RETURN(std::shared_ptr<const step::JobData> data,
                   step::OpenJobData(job, a.resume_from));
  RETURN_IF_ERROR(check_cancelled("opening the data"));
  // NOTE [Parallel sets] in step/stage.h: a replica of `parallel` ranks shares its samples.
  placement.parallel = vision ? job.vision.sequence_parallel : job.llm.tensor_parallel;
  placement.peer_parallel = vision ? job.llm.tensor_parallel : job.vision.sequence_parallel;
  engine::GroupOptions group_options;
  group_options.hostname = options_.collective_host;
  group_options.timeout = a.timeout;
  const parallel::RankLayout layout{a.role, a.rank, a.group_size, placement.parallel};
  ASSIGN_OR_RETURN(
      parallel::RankCommunicators communicators,
      parallel::CreateRankCommunicators(layout, store, placement.device, group_options));
  std::shared_ptr<engine::Communicator> communicator = std::move(communicators.engine);
  placement.parallel_communicator = std::move(communicators.parallel);
  RETURN_IF_ERROR(check_cancelled("joining the group"));
  auto create = a.role == Role::kVision ? step::CreateVisionStage : step::CreateLlmStage;
  ASSIGN_OR_RETURN(stage_, create(job, std::move(data), std::move(placement),
                                  std::move(communicator), std::move(transport), &progress_));
  RETURN_IF_ERROR(check_cancelled("building the model and engine"));
  if (a.restore.step > 0) {
    // NOTE [Snapshots in memory]: the stage restores when its first step begins.
    step::HeldSnapshots held;
    if (kept_ && kept_->role == a.role && kept_->rank == a.rank &&
        kept_->group_size == a.group_size && kept_->peer_group_size == a.peer_group_size) {
      held = std::move(kept_->held);
    }
    kept_.reset();
    stage_->RestoreFromMemoryAtNextStep(a.restore.step, std::move(held), a.restore.from_peer,
                                        a.restore.send_to);
    step_ = a.restore.step;
    TANDEM_LOG(kInfo, kComponent) << a.job_id << " " << group << " rank " << a.rank
                                  << ": resumes from memory at step " << a.restore.step
                                  << (a.restore.from_peer < 0
                                          ? std::string(" (its own snapshot)")
                                          : absl::StrCat(
                                                " (the copy ",
                                                RoleName(vision ? Role::kLlm : Role::kVision),
                                                " rank ", a.restore.from_peer, " held)"));
  } else if (!a.resume_from.empty()) {
    ASSIGN_OR_RETURN(step::ResumePoint resume, stage_->Resume(a.resume_from));
    RETURN_IF_ERROR(check_cancelled("loading the checkpoint"));
    step_ = resume.step;
    TANDEM_LOG(kInfo, kComponent) << a.job_id << " " << group << " rank " << a.rank
                                  << ": resumed from " << a.resume_from << " at step "
                                  << resume.step;
  }
  TANDEM_LOG(kInfo, kComponent) << a.job_id << " " << group << " rank " << a.rank << "/"
                                << a.group_size << ": ready, " << stage_->parameters()
                                << " parameters on " << stage_->placement().device.str();
  return absl::OkStatus();
}

absl::StatusOr<StepResult> StageWorker::RunStep(int64_t step) {
  if (!assignment_) return absl::FailedPreconditionError("actor has no job");
  if (step != step_ + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step, " requested, but the actor's next step is ", step_ + 1));
  }
  ASSIGN_OR_RETURN(StepResult result, stage_->RunStep(step));
  step_ = step;
  return result;
}

absl::StatusOr<EvalCounts> StageWorker::Evaluate(int64_t step) {
  if (!assignment_) return absl::FailedPreconditionError("actor has no job");
  return stage_->Evaluate(step);
}

absl::Status StageWorker::SaveCheckpoint(int64_t step, const std::string& directory) {
  if (!assignment_) return absl::FailedPreconditionError("actor has no job");
  if (step != step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint of step ", step, " requested at step ", step_.load()));
  }
  return stage_->SaveCheckpoint(step, directory);
}

absl::Status StageWorker::FinishCheckpoint(int64_t step, const std::string& directory) {
  if (!assignment_) return absl::FailedPreconditionError("actor has no job");
  return stage_->FinishCheckpoint(step, directory);
}

absl::Status StageWorker::Export(const std::string& path) {
  if (!assignment_) return absl::FailedPreconditionError("actor has no job");
  return stage_->Export(path);
}

void StageWorker::Release() {
  if (stage_ && assignment_ && job_snapshots_enabled()) {
    step::HeldSnapshots held = stage_->TakeHeldSnapshots();
    if (!held.own.empty() || !held.copies.empty()) {
      kept_ = Kept{assignment_->job_id,
                   assignment_->role,
                   assignment_->rank,
                   assignment_->group_size,
                   assignment_->peer_group_size,
                   std::move(held)};
    }
  }
  if (transport_) transport_->Reset();
  stage_.reset();
  transport_.reset();
  assignment_.reset();
  // What the job held goes back to the system: the CUDA allocator's cache, and the heap glibc
  // keeps for reuse (common/malloc_tuning.h).
  engine::ReleaseCachedDeviceMemory();
  malloc_trim(0);
  step_ = 0;
  progress_.phase = "idle";
  std::lock_guard<std::mutex> lock(status_mu_);
  job_id_.clear();
}

SnapshotHoldings StageWorker::HeldSnapshots(const std::string& job_id) const {
  SnapshotHoldings out;
  const step::HeldSnapshots* held = nullptr;
  if (stage_ && assignment_ && assignment_->job_id == job_id) {
    held = &stage_->held_snapshots();
    out.role = assignment_->role;
    out.rank = assignment_->rank;
    out.group_size = assignment_->group_size;
    out.peer_group_size = assignment_->peer_group_size;
  } else if (kept_ && kept_->job_id == job_id) {
    held = &kept_->held;
    out.role = kept_->role;
    out.rank = kept_->rank;
    out.group_size = kept_->group_size;
    out.peer_group_size = kept_->peer_group_size;
  }
  if (held == nullptr || (held->own.empty() && held->copies.empty())) return SnapshotHoldings{};
  out.holds = true;
  for (const auto& [step, bytes] : held->own) out.own_steps.push_back(step);
  for (const auto& [rank, copy] : held->copies) out.copies[rank] = copy.first;
  out.bytes = held->bytes();
  return out;
}

WorkerStatus StageWorker::status() const {
  WorkerStatus status;
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    status.job_id = job_id_;
  }
  status.step = step_.load();
  status.phase = progress_.phase.load();
  status.last_collective = progress_.last_collective.load();
  return status;
}

}  // namespace

std::unique_ptr<Worker> CreateWorker(const WorkerOptions& options) {
  return std::make_unique<StageWorker>(options);
}

}  // namespace tandem::actors
