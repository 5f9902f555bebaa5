// Scripted actors for the job runner's tests: an ActorClientFactory whose clients answer from a
// script instead of a server, and record every call. No process, no gRPC.
//
// By default every actor answers like a healthy one:
//   AssignJob: parameters kVisionParameters or kLlmParameters, vocabulary kVocabSize, and the step
//              of resume_from's complete marker (0 without one), as a real actor that loaded it;
//   RunStep:   DefaultStepReply(role, rank, step); steps run in order per actor: step s waits until
//              the actor has done s-1 (the runner sends the next step while one runs);
//   Evaluate:  no samples (no held-out set) unless SetEvalReply says otherwise;
//   SaveCheckpoint creates the directory; FinishCheckpoint, Export and Release succeed.
// After a failed step, the actor's later steps answer ABORTED; a Release ends the steps waiting
// there with CANCELLED (as an actor interrupted by Release does); AssignJob starts afresh.
//
// Scripting (any time, from the test's thread): FailStep, FailLoading, LoseAt, Lose, HoldStep and
// Unhold, HoldAssign, HoldRelease and UnholdRelease, SetStepReply, SetEvalReply. Observing:
// WaitForStep (blocks, with a deadline), Calls, StepsDone, Assignments.
//
// Thread-safety: everything may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "coordinator/actor_client.h"

namespace tandem::coordinator {

inline constexpr int64_t kVisionParameters = 1111;
inline constexpr int64_t kLlmParameters = 2222;
inline constexpr int64_t kVocabSize = 64;
// What an unreachable actor's calls fail with (UNAVAILABLE).
inline constexpr char kUnreachable[] = "failed to connect to all addresses";

// LLM rank r: loss (1 + r) / step (its share), lr 0.01 / step, grad norm 0.4, 10 bytes sent.
// Vision rank r: loss 0, lr 0.02 / step, grad norm 0.3, 100 bytes sent.
ActorStepReply DefaultStepReply(Role role, int rank, int64_t step);

class FakeActors final : public ActorClientFactory {
 public:
  struct Call {
    std::string address;
    std::string method;    // "AssignJob", "RunStep", "Evaluate", "SaveCheckpoint", "Export",
                           // "Release"
    int64_t step = 0;      // RunStep, Evaluate, SaveCheckpoint
    std::string argument;  // SaveCheckpoint: the directory; Export: the path; Release: the reason
  };

  std::unique_ptr<ActorClient> Connect(const std::string& address,
                                       const std::string& name) override;

  // The next RunStep(step) at `address` fails with `status`.
  void FailStep(const std::string& address, int64_t step, absl::Status status);
  // Every AssignJob at `address` that resumes from `checkpoint` fails with `status`, as an actor
  // that cannot load it.
  void FailLoading(const std::string& address, const std::string& checkpoint, absl::Status status);
  // From RunStep(step) at `address` on, the actor is gone: that call and every later one (Release
  // too) fail with UNAVAILABLE kUnreachable.
  void LoseAt(const std::string& address, int64_t step);
  // The actor at `address` is gone now; calls waiting there end with UNAVAILABLE.
  void Lose(const std::string& address);
  // RunStep(step) at `address` waits, once started, until Unhold or a Release of the actor.
  void HoldStep(const std::string& address, int64_t step);
  void Unhold(const std::string& address);
  void SetStepReply(const std::string& address, std::function<ActorStepReply(int64_t step)> reply);
  void SetEvalReply(const std::string& address, ActorEvalReply reply);
  // HeldSnapshots at `address` answers `held` (default: nothing held).
  void SetHeldSnapshots(const std::string& address, SnapshotHoldings held);
  // AssignJob at `address` blocks, once entered, until the client's CancelCalls (it then fails with
  // CANCELLED): an actor still building a large stage. WaitForAssign waits until it was entered.
  void HoldAssign(const std::string& address);
  void UnholdAssign(const std::string& address);  // lets a held AssignJob answer as usual
  bool WaitForAssign(const std::string& address, std::chrono::milliseconds timeout);
  // Release at `address` blocks, once entered, until UnholdRelease: an actor that does not answer.
  void HoldRelease(const std::string& address);
  void UnholdRelease(const std::string& address);
  // Waits until a Release at `address` was entered; false after `timeout`.
  bool WaitForRelease(const std::string& address, std::chrono::milliseconds timeout);

  // Waits until RunStep(step) at `address` started (it may be held there); false after `timeout`.
  bool WaitForStep(const std::string& address, int64_t step,
                   std::chrono::milliseconds timeout = std::chrono::minutes(2));
  std::vector<Call> Calls() const;
  // The calls of one method, in the order they were made.
  std::vector<Call> Calls(const std::string& method) const;
  // The steps the actor at `address` completed, in order, over every assignment.
  std::vector<int64_t> StepsDone(const std::string& address) const;
  // Every AssignJob, in order, with the address it went to.
  std::vector<std::pair<std::string, ActorAssignment>> Assignments() const;

 private:
  class Client;
  struct Actor {
    Role role = Role::kVision;
    int rank = 0;
    int64_t done = 0;  // the last step completed since the assignment
    bool failed = false;
    bool released = false;
    bool lost = false;
    bool hold_release = false;
    bool hold_assign = false;
    bool calls_cancelled = false;  // the client's CancelCalls was called
    int assigns_entered = 0;
    int releases_entered = 0;
    int64_t lose_at = -1;
    std::map<int64_t, absl::Status> failures;
    std::map<std::string, absl::Status> load_failures;  // by checkpoint directory
    std::set<int64_t> held;
    std::set<int64_t> started;
    std::vector<int64_t> steps_done;
    std::function<ActorStepReply(int64_t)> step_reply;
    ActorEvalReply eval_reply;
    SnapshotHoldings held_snapshots;
  };

  absl::StatusOr<ActorAssignReply> Assign(const std::string& address, const ActorAssignment& a);
  absl::StatusOr<ActorStepReply> RunStep(const std::string& address, int64_t step);
  absl::StatusOr<ActorEvalReply> Evaluate(const std::string& address, int64_t step);
  absl::Status SaveCheckpoint(const std::string& address, int64_t step, const std::string& dir);
  absl::Status Export(const std::string& address, const std::string& path);
  absl::Status Release(const std::string& address, const std::string& reason);
  absl::StatusOr<SnapshotHoldings> HeldSnapshots(const std::string& address);
  void CancelCalls(const std::string& address);
  // Records the call; UNAVAILABLE when the actor is gone. REQUIRES: mu_ held.
  absl::Status Enter(const Call& call);

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Actor> actors_;  // by address
  std::vector<Call> calls_;
  std::vector<std::pair<std::string, ActorAssignment>> assignments_;
};

}  // namespace tandem::coordinator
