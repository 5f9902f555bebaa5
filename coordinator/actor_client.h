// The job runner's view of an actor (coordinator/job_runner.h): every command it sends to one,
// as plain C++, apart from the gRPC plumbing (grpc_actor_client.h), so the runner is tested over a
// scripted fake without a server or a process (tests/coordinator/fake_actor_client.h). Modelled on
// Ray's GCS, which reaches workers through a client interface that a pool hands out per address.
//
//   std::unique_ptr<ActorClient> actor = factory->Connect("10.0.0.7:7101", "llm-1 (llm rank 0)");
//   ASSIGN_OR_RETURN(ActorAssignReply assigned, actor->AssignJob(assignment));
//   ASSIGN_OR_RETURN(ActorStepReply step, actor->RunStep(job_id, 1));
//
// The calls mirror tandem.v1.Actor (proto/tandem/v1/actor.proto), whose comments hold the
// actor's side of each contract. Every call runs to completion or fails, and returns within a
// deadline the implementation sets (the gRPC one: the actors' command timeout plus a margin, 30 s
// for Release).
//
// Errors: the actor's own status (its code and message) or the channel's; the message does not
// say which call failed (the runner does). The gRPC client adds "(is it running and reachable?)"
// to a command's UNAVAILABLE, but not to Release's: a Release that fails with UNAVAILABLE or
// DEADLINE_EXCEEDED means the actor cannot be reached (a live actor always answers a Release at
// once), and its message is the channel's as it is.
//
// Thread-safety: every call may be made from any thread, several at once (the runner keeps two
// RunSteps waiting at each actor, and releases an actor while a step runs there).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/memory_restore.h"
#include "common/role.h"

namespace tandem::v1 {
class JobSpec;  // proto/tandem/v1/job.pb.h
}  // namespace tandem::v1

namespace tandem::coordinator {

// What AssignJob tells an actor: its job, role and place in its group.
struct ActorAssignment {
  std::string job_id;
  std::shared_ptr<const tandem::v1::JobSpec> spec;  // the job's spec as the coordinator accepted it
  Role role = Role::kVision;
  int rank = 0;                    // within the actor's group
  int group_size = 1;              // ranks in the actor's group
  std::vector<std::string> peers;  // the other group's addresses, by rank
  std::string rendezvous_prefix;   // "<job>/<attempt>/<role>": the group's keys in the store
  std::string run_dir;
  std::chrono::milliseconds timeout{300000};  // for each of the actor's transfers and collectives
  int threads = 0;                            // intra-op threads; 0: the actor's default
  int64_t attempt = 1;
  std::string resume_from;  // a complete checkpoint directory to load, or ""
  MemoryRestore restore;    // from snapshots in memory instead (restore.step > 0)
};

struct ActorAssignReply {
  int64_t parameters = 0;  // of the actor's whole model, not its shard
  int64_t vocab_size = 0;
  int64_t train_samples = 0;
  int64_t eval_samples = 0;  // 0 when the job has no held-out set
  int64_t step = 0;          // the last completed step: resume_from's, or 0
};

struct ActorStepReply {
  double loss = 0;       // LLM ranks: their share of the step's loss; vision ranks: 0
  double grad_norm = 0;  // the group's, before clipping
  double lr = 0;
  bool skipped = false;  // the update was skipped (non-finite gradients)
  double compute_s = 0;
  double wait_s = 0;
  int64_t bytes_sent = 0;  // to the other group
  int64_t positions = 0;   // LLM replicas' first ranks: their rows' positions, padding included
  int64_t padding = 0;
  double planned = 0;           // the work its replica was planned: tiles (vision), row cost (LLM)
  int64_t skipped_samples = 0;  // left out as unreadable (data.on_bad_sample "skip")
  int64_t snapshot_bytes = 0;   // snapshots held in memory (failure.snapshot_every)
};

struct ActorEvalReply {
  int64_t samples = 0;  // held-out samples this rank scored (0 without a held-out set)
  int64_t exact = 0;
  int64_t tokens = 0;
  int64_t correct_tokens = 0;
};

class ActorClient {
 public:
  virtual ~ActorClient() = default;

  // Builds the job's model and engine on the actor (loading resume_from when it is set).
  virtual absl::StatusOr<ActorAssignReply> AssignJob(const ActorAssignment& assignment) = 0;
  // Optimizer step `step`. The actor runs steps in order: step s+1 may be sent while s runs, and
  // waits there for its turn.
  virtual absl::StatusOr<ActorStepReply> RunStep(const std::string& job_id, int64_t step) = 0;
  // Caption generation over the held-out set after training step `step`.
  virtual absl::StatusOr<ActorEvalReply> Evaluate(const std::string& job_id, int64_t step) = 0;
  // Saves the actor's shard of step `step` under `directory`.
  virtual absl::Status SaveCheckpoint(const std::string& job_id, int64_t step,
                                      const std::string& directory) = 0;
  // Completes an asynchronous save (the job's checkpoint.async): the shard written, the marker.
  virtual absl::Status FinishCheckpoint(const std::string& job_id, int64_t step,
                                        const std::string& directory) = 0;
  // Writes the actor's group's full weights to `path` (every rank must be called).
  virtual absl::Status Export(const std::string& job_id, const std::string& path) = 0;
  // Frees the job on the actor; interrupts a command that waits on transfers. `reason` is logged.
  virtual absl::Status Release(const std::string& job_id, const std::string& reason) = 0;
  // What the actor holds of the job's snapshots in memory (from the job's last attempt there).
  virtual absl::StatusOr<SnapshotHoldings> HeldSnapshots(const std::string& job_id) = 0;
  // The job's attempt is over: a call that would retry (AssignJob over a channel that did not
  // open) gives up instead. Calls in flight run on; Release is never affected.
  virtual void StopRetrying() = 0;
  // The actor is lost (it missed its heartbeats: a stopped or hung process answers nothing): every
  // command in flight to it fails now with CANCELLED instead of at its deadline, and so does every
  // later one. Release is never affected.
  virtual void CancelCalls() = 0;
};

// Hands out a client per actor address (Ray's worker client pool).
class ActorClientFactory {
 public:
  virtual ~ActorClientFactory() = default;
  // A client for the actor at HOST:PORT `address`; `name` is how the client's logs name it
  // ("llm-1 (llm rank 0, 10.0.0.7:7101)"). Connecting is lazy: a client to an address nobody
  // serves is returned all the same, and its calls fail with UNAVAILABLE.
  virtual std::unique_ptr<ActorClient> Connect(const std::string& address,
                                               const std::string& name) = 0;
};

}  // namespace tandem::coordinator
