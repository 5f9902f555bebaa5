// The step driver of one running job (DESIGN §1, §2): on a thread of its own it assigns the job to
// its reserved actors, then sends every step, evaluation, checkpoint and the final export to all of
// them at once and waits for all answers, so the two groups meet only through their own data
// dependencies inside a step. It writes the run directory (job.json, metrics.jsonl, loss.svg,
// summary.json; the actors write tokenizer.json, checkpoints and weights into the same directory)
// and the job's state, events and progress into the job store. It never handles tensor bytes.
//
// A failed command (an actor's error, a dead actor, a deadline) ends the attempt with a message
// naming the actor, its role and rank; every actor is then released. When an actor was lost (it
// stopped heartbeating, or cannot be reached to be released) and the job has restarts left
// (failure.max_restarts), the job goes to RESTARTING and the coordinator schedules it again; the
// next attempt resumes from the last complete checkpoint (the job's own, else the spec's
// resume_from). Any other failure, or one restart too many, fails it. Cancel() stops the job after
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

#include "coordinator/job_feed.h"
#include "coordinator/job_store.h"
#include "coordinator/memory_store.h"
#include "coordinator/metrics.h"
#include "coordinator/registry.h"
#include "coordinator/step_hold.h"
#include "rundir/summary.h"

namespace tandem::v1 {
class RunStepResponse;
}  // namespace tandem::v1

namespace tandem::coordinator {

struct RunnerOptions {
  // Deadline of each command beyond its own waits: actors get `command_timeout` for every transfer
  // and collective, and the coordinator waits that long plus a margin for an answer.
  std::chrono::milliseconds command_timeout{300000};
  // Testing only: the directory of hold files (coordinator/step_hold.h); "" holds no job.
  std::string hold_dir;
};

class JobRunner {
 public:
  // `done` runs on the runner's thread once the job reached a final state and its actors were
  // freed.
  JobRunner(JobRecord job, std::vector<ActorEntry> vision, std::vector<ActorEntry> llm,
            JobStore* store, JobFeeds* feeds, MemoryStore* rendezvous, Registry* registry,
            Metrics* metrics, RunnerOptions options,
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
  struct Member;
  // The ranks a timed-out collective waited for, from the members' last heartbeats ("" if none).
  std::string Laggards() const;
  void Run();
  absl::Status Execute();
  // Assigns every member; each loads `resume_from` when it is set and must report `resume_step`.
  absl::Status AssignAll(rundir::RunSummary* summary, const std::string& resume_from,
                         int64_t resume_step);
  // Sends one command to every member at once (call(i, members_[i])); the root-cause error, naming
  // its member, is returned.
  absl::Status ForAll(const char* what, const std::function<absl::Status(size_t, Member&)>& call);
  // Runs steps [first, last]: every member always has its next RunStep waiting at its actor (two
  // lanes, odd and even steps; the actor runs them in order), so no member waits for the
  // coordinator between steps and the groups pace each other through their transfers. `on_step`
  // gets each step's answers, in step order, once every member answered it. The first failure stops
  // the others at once (their actors are released) and is returned as the root cause, naming its
  // member.
  using StepAnswers = std::vector<v1::RunStepResponse>;
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
  std::vector<std::unique_ptr<Member>> members_;  // vision ranks, then LLM ranks
  JobStore* store_;
  JobFeeds* feeds_;
  MemoryStore* rendezvous_;
  Registry* registry_;
  Metrics* metrics_;
  RunnerOptions options_;
  StepHold hold_;
  std::function<void(const std::string&)> done_;
  std::atomic<bool> cancelled_{false};
  std::mutex reason_mu_;
  std::string stop_reason_;  // guarded by reason_mu_
  bool suspended_ = false;   // guarded by reason_mu_
  // Actors lost during this attempt: id -> what happened, naming the member. Guarded by reason_mu_.
  std::map<std::string, std::string> lost_contact_;
  Clock::time_point attempt_start_;  // registry clock; set by Start
  int64_t max_restarts_ = 0;         // from the spec, once Execute parsed it
  std::thread thread_;
};

}  // namespace tandem::coordinator
