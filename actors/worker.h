// The LibTorch half of an actor: one rank of a job's vision or LLM group (docs/design.md §1, §2).
// On Assign it joins the group's communicator and builds the group's stage (step/stage.h: model,
// engine, the group's half of the step), then runs the commands the coordinator sends through the
// actor's gRPC service (actors/actor_service.h) on that stage: steps, evaluations, checkpoints,
// exports. Tensors reach the other group through a transport::Transport.
//
// This header is plain C++ (no LibTorch, no gRPC), so the gRPC side can include it (docs/design.md
// §6).
//
// States: idle --Assign--> assigned --RunStep/Evaluate/SaveCheckpoint/Export--> assigned
//         assigned --Release--> idle.  A failed command leaves the worker assigned; the coordinator
//         then releases it. Release is allowed in every state.
//
// Thread-safety: commands are serialised by the caller (one at a time). status() may be read from
// any thread (the heartbeat).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_store.h"
#include "common/memory_restore.h"
#include "common/role.h"
#include "jobspec/job_config.h"
#include "step/results.h"
#include "transport/transport.h"

namespace tandem::actors {

struct Assignment {
  std::string job_id;
  jobspec::JobConfig job;
  Role role = Role::kVision;
  int rank = 0;
  int group_size = 1;
  int peer_group_size = 1;  // ranks of the other group
  std::string run_dir;      // shared output directory
  std::chrono::milliseconds timeout{300000};
  int threads = 0;          // intra-op threads; 0 leaves LibTorch's default
  int64_t attempt = 1;      // which time the job runs; transfers are keyed by job and attempt
  std::string resume_from;  // a complete checkpoint directory to load, or ""
  // From snapshots in memory instead (restore.step > 0): resume_from then only gives the data.
  MemoryRestore restore;
  // Set (from another thread) when the job is released while it is being built: Assign stops at
  // its next check, between the phases of building the stage, and returns CANCELLED. May be null.
  std::shared_ptr<const std::atomic<bool>> cancelled;
};

// The key a job's transfers carry (TransferTag::job_id) and the inbox accepts: "<job
// id>#<attempt>", so a transfer of an earlier attempt of the same job is refused.
std::string TransferJobKey(const std::string& job_id, int64_t attempt);

struct AssignResult {
  int64_t parameters = 0;
  int64_t vocab_size = 0;
  int64_t train_samples = 0;
  int64_t eval_samples = 0;
  int64_t step = 0;  // the last completed step: the checkpoint's, or 0
};

// A step's and an evaluation's answers are the stage's (step/results.h).
using step::EvalCounts;
using step::StepResult;

// What the actor is doing, for its heartbeat.
struct WorkerStatus {
  std::string job_id;
  int64_t step = 0;
  // idle, setup, forward, backward, transfer, optimizer, evaluate, checkpoint
  const char* phase = "idle";
  int64_t last_collective = 0;
};

struct WorkerOptions {
  std::string device = "cpu";                 // "cpu" or "cuda:N"
  std::string collective_host = "127.0.0.1";  // address this rank's Gloo device binds to
  // The memory a job may use here (`tandem actor --memory`, else the device's); 0: unknown. Assign
  // refuses a job whose group's estimated memory (jobspec/memory_estimate.h) exceeds it.
  int64_t memory_bytes = 0;
};

class Worker {
 public:
  virtual ~Worker() = default;

  // Builds the model and engine and joins the group through `store` (keys already scoped to this
  // group and job attempt), then loads assignment.resume_from when it is set, or restores from
  // the snapshots in memory (assignment.restore: the kept one, or the copy a peer sends).
  // `transport` reaches the other group's ranks. FailedPrecondition when a job is assigned already;
  // InvalidArgument for a job this worker cannot build; ResourceExhausted, naming the fields, for
  // one whose estimated memory exceeds options.memory_bytes; CANCELLED once assignment.cancelled is
  // set; the checkpoint's own error when it cannot be loaded.
  virtual absl::StatusOr<AssignResult> Assign(const Assignment& assignment,
                                              std::shared_ptr<KeyValueStore> store,
                                              std::shared_ptr<transport::Transport> transport) = 0;
  // Runs optimizer step `step` (the previous step + 1).
  virtual absl::StatusOr<StepResult> RunStep(int64_t step) = 0;
  // Caption generation over the held-out set after training step `step`.
  virtual absl::StatusOr<EvalCounts> Evaluate(int64_t step) = 0;
  // Saves this rank's shard under <directory>/<role>, with the data position; LLM rank 0 also
  // writes <directory>/tokenizer.json.
  virtual absl::Status SaveCheckpoint(int64_t step, const std::string& directory) = 0;
  // Completes an asynchronous save of `step` (checkpoint.async: step/stage.h).
  virtual absl::Status FinishCheckpoint(int64_t step, const std::string& directory) = 0;
  // Writes the group's full weights as safetensors (rank 0 writes; every rank must be called).
  virtual absl::Status Export(const std::string& path) = 0;
  // Frees the job's model, engine and communicator. The job's snapshots in memory stay until the
  // worker is assigned another job.
  virtual void Release() = 0;
  // What the worker holds of job `job_id`'s snapshots in memory.
  virtual SnapshotHoldings HeldSnapshots(const std::string& job_id) const = 0;

  virtual WorkerStatus status() const = 0;
};

std::unique_ptr<Worker> CreateWorker(const WorkerOptions& options);

}  // namespace tandem::actors
