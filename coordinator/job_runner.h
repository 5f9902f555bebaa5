// The step driver of one running job (docs/design.md §1, §2): on a thread of its own it assigns the
// job to its reserved actors, then sends every step, evaluation, checkpoint and the final export to
// all of them at once and waits for all answers, so the two groups meet only through their own data
// dependencies inside a step. It writes the run directory (job.json, metrics.jsonl, loss.svg,
// summary.json; the actors write tokenizer.json, checkpoints and weights into the same directory)
// and the job's state, events and progress into the job store. It never handles tensor bytes. It
// reaches the actors through ActorClients (actor_client.h) from the factory it is given. The run's
// sequence is rundir::RunDriver's (rundir/run_driver.h), as for the colocated trainer; the runner
// sends its commands to the members.
//
// An attempt, in order (job_runner_attempt.cc): the run directory (job.json); the resume point
// (the last complete checkpoint; metrics.jsonl cut back to it); AssignJob on every member; segments
// of steps, each ending where the run loop evaluates or checkpoints (or a hold file holds the job);
// the final export and summary.json.
//
// A failed command (an actor's error, a dead actor, a deadline) ends the attempt with a message
// naming the actor, its role and rank; every actor is then released. When an actor was lost (it
// stopped heartbeating, or cannot be reached to be released) and the job has restarts left
// (failure.max_restarts), the job goes to RESTARTING and the coordinator schedules it again; the
// next attempt resumes from the last complete checkpoint (the job's own, else the spec's
// resume_from). So does a job whose own checkpoint its actors could not load (the AssignJob error
// names the checkpoint: a file truncated or changed since it was written): the checkpoint is
// marked damaged (rundir::MarkCheckpointDamaged), the event log says so, and the next attempt
// resumes from the newest intact one, or from the start. Any other failure, or one restart too
// many, fails it. Cancel() stops the job after
// the command in flight (Release interrupts a step that waits on transfers); Suspend() does the
// same but leaves it RESTARTING, for a coordinator that shuts down.
//
// With RunnerOptions::hold_dir set (a fault hook for tests, coordinator/step_hold.h), a job whose
// hold file names the step it has reached waits there before its next step, its status saying
// "held before step S+1: <file> exists"; Cancel, Suspend and ActorLost end the wait at once.
//
// Thread-safety: Cancel may be called from any thread; the rest runs on the runner's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/actor_client.h"
#include "coordinator/job_feed.h"
#include "coordinator/job_store.h"
#include "coordinator/memory_resume.h"
#include "coordinator/memory_store.h"
#include "coordinator/metrics.h"
#include "coordinator/registry.h"
#include "coordinator/step_hold.h"
#include "jobspec/job_spec.h"
#include "rundir/summary.h"

namespace tandem::coordinator {

struct RunnerOptions {
  // What actors are told (AssignJob) to allow each of their transfers and collectives. The actor
  // clients wait that long plus a margin for an answer (GrpcActorClientOptions::ForCommandTimeout).
  std::chrono::milliseconds command_timeout{300000};
  // Testing only: the directory of hold files (coordinator/step_hold.h); "" holds no job.
  std::string hold_dir;
};

class JobRunner {
 public:
  // `done` runs on the runner's thread once the job reached a final state and its actors were
  // freed. The collaborators must outlive the runner; `actors` gives a client per member at once.
  JobRunner(JobRecord job, std::shared_ptr<const jobspec::ResolvedJobSpec> spec,
            std::vector<ActorEntry> vision, std::vector<ActorEntry> llm, JobStore* store,
            JobFeeds* feeds, MemoryStore* rendezvous, Registry* registry, Metrics* metrics,
            ActorClientFactory* actors, RunnerOptions options,
            std::function<void(const std::string& job_id)> done);
  ~JobRunner();  // joins the thread

  void Start();
  void Cancel(const std::string& reason);
  void Suspend(const std::string& reason);
  // Ends the attempt because one of its actors is gone: `what` says how ("stopped sending
  // heartbeats", "died: killed by signal 9 (SIGKILL)").
  void ActorLost(const std::string& actor_id, const std::string& what);
  const std::string& job_id() const { return job_.id; }

 private:
  // One actor of the job and its place in the job's groups.
  struct Member {
    ActorEntry actor;
    Role role = Role::kVision;
    // Set by the constructor (the order the actors came in), and at a restart from memory before
    // the attempt assigns (each actor its rank of the last attempt where it kept its snapshot).
    std::atomic<int> rank{0};
    MemoryRestore restore;  // a restart from memory: how this member restores its rank's state
    std::unique_ptr<ActorClient> client;
    // "vision-1 (vision rank 0, 127.0.0.1:7101)": how every message names the member.
    std::string Name() const;
  };
  struct Attempt;  // one attempt: its driver, and the members as rundir::RunGroups
  using StepAnswers = std::vector<ActorStepReply>;  // one per member, in member order

  // `status` with "<what>: " before its message; OK stays OK. Names the command that failed.
  static absl::Status Described(const absl::Status& status, const std::string& what);

  // The ranks a timed-out collective waited for, from the members' last heartbeats ("" if none).
  std::string Laggards() const;
  void Run();
  // Runs the attempt (job_runner_attempt.cc): rundir::RunDriver's sequence over the members.
  absl::Status Execute();
  // The attempt's driver (run directory, job.json, resume point: the job's own last complete
  // checkpoint, else the spec's resume_from; metrics.jsonl cut back to it), and the job's step
  // recorded there.
  // `memory_step` (0: none): a step the members restore from memory (PlaceFromMemory), used when
  // it is at least the resume checkpoint's.
  absl::StatusOr<std::unique_ptr<Attempt>> StartAttempt(int64_t memory_step);
  // FailedPrecondition unless the run directory is absolute.
  absl::Status CheckRunDir() const;
  // Assigns every member; each loads `resume_from` when it is set (or, `from_memory`, restores
  // its Member::restore and reads only the data's tokenizer from it) and must report
  // `resume_step`.
  absl::Status AssignAll(rundir::RunSummary* summary, const std::string& resume_from,
                         int64_t resume_step, bool from_memory);
  // NOTE [Snapshots in memory] in step/stage.h, at a restart under failure.snapshot_every: asks
  // every member what it holds of the job's snapshots and, where every rank's state of a step at
  // least as new as the last checkpoint is there, places the members (their ranks and restores)
  // and returns that step; 0 otherwise.
  int64_t PlaceFromMemory();

  // Sends one command to every member at once (call(i, members_[i])); the root-cause error, naming
  // its member, is returned.
  absl::Status ForAll(const char* what, const std::function<absl::Status(size_t, Member&)>& call);
  // Runs steps [first, last]: every member always has its next RunStep waiting at its actor (two
  // lanes, odd and even steps; the actor runs them in order), so no member waits for the
  // coordinator between steps and the groups pace each other through their transfers. `on_step`
  // gets each step's answers, in step order, once every member answered it. The first failure stops
  // the others at once (their actors are released) and is returned as the root cause, naming its
  // member.
  absl::Status RunSteps(
      int64_t first, int64_t last,
      const std::function<absl::Status(int64_t step, const StepAnswers&)>& on_step);
  // Waits while the job's hold file names `step`, the step it has done (step_hold.h); Cancelled
  // when the attempt is stopped meanwhile.
  absl::Status AwaitHold(int64_t step);
  void Event(const std::string& text);
  void SetState(JobState state, const std::string& message);
  // Cancel and Suspend: stop after the command in flight, leaving the job CANCELLED or RESTARTING.
  void Stop(const std::string& reason, bool suspend);
  // Releases every member at once. Members that cannot be reached are removed from the registry
  // and recorded in lost_contact_.
  void ReleaseAll(const std::string& reason);

  JobRecord job_;
  std::shared_ptr<const jobspec::ResolvedJobSpec> spec_;  // job_.spec_json, resolved once
  // Vision members, then LLM members; fixed by the constructor (read from any thread). Their ranks
  // are the order given unless a restart from memory placed them (PlaceFromMemory).
  std::vector<std::unique_ptr<Member>> members_;
  JobStore* store_;
  JobFeeds* feeds_;
  MemoryStore* rendezvous_;
  Registry* registry_;
  Metrics* metrics_;
  RunnerOptions options_;
  StepHold hold_;
  std::function<void(const std::string&)> done_;
  std::atomic<bool> cancelled_{false};
  // AssignAll is waiting for the actors to build the job: a Stop then cancels those calls, so that
  // a job being built (a large model, a slow load) ends at once; the actors stop at Release.
  std::atomic<bool> assigning_{false};
  std::mutex reason_mu_;
  std::string stop_reason_;  // guarded by reason_mu_
  bool suspended_ = false;   // guarded by reason_mu_
  // Actors lost during this attempt: id -> what happened, naming the member. Guarded by reason_mu_.
  std::map<std::string, std::string> lost_contact_;
  Clock::time_point attempt_start_;  // registry clock; set by Start
  int64_t max_restarts_ = 0;         // from the spec, once Execute parsed it
  // The job's own checkpoint this attempt could not load (marked damaged); "" otherwise.
  std::string damaged_checkpoint_;
  // This attempt's ranks restored from a buddy's copy, for the event log (MemoryResumePlan), and
  // the step it resumed at from memory (0: it did not).
  std::string memory_copies_;
  int64_t resumed_from_memory_ = 0;
  std::thread thread_;
};

}  // namespace tandem::coordinator
