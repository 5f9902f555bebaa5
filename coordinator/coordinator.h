// The coordinator's core (docs/design.md §1, §5), apart from the gRPC plumbing
// (coordinator_service.h): jobs are validated and recorded before they are acknowledged, queued,
// gang-scheduled in submission order onto free actors, and driven by one JobRunner each.
//
// Job states (JobState in job_store.h):
//   QUEUED --its actors are all free--> RUNNING --all steps done--> SUCCEEDED
//   QUEUED --CancelJob--> CANCELLED;  RUNNING --CancelJob--> CANCELLED (after the command in
//   flight) RUNNING --an actor was lost, restarts left--> RESTARTING --its actors are free-->
//   RUNNING RUNNING --a command failed, or an actor was lost with no restarts left--> FAILED
//   RUNNING --the coordinator stops (or restarts)--> RESTARTING
// Scheduling is in submission order within each pool: a job that waits for busy actors holds its
// pools, so later jobs that need one of them wait behind it, while later jobs on other pools start;
// a job whose pools have fewer actors registered than it needs holds nothing. A waiting job's
// message says what it waits for. Jobs on disjoint actors run at once.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_lock.h"
#include "coordinator/actor_client.h"
#include "coordinator/job_feed.h"
#include "coordinator/job_runner.h"
#include "coordinator/job_specs.h"
#include "coordinator/job_store.h"
#include "coordinator/memory_store.h"
#include "coordinator/metrics.h"
#include "coordinator/registry.h"
#include "jobspec/job_config.h"
#include "proto/tandem/v1/coordinator.pb.h"

namespace tandem::coordinator {

// The most intra-op threads a job may ask of each actor (SubmitJobRequest.threads).
inline constexpr int kMaxThreads = 1024;

struct CoordinatorOptions {
  std::string state_dir;  // tandem.db and jobs/<id>/ (default run dirs)
  std::chrono::milliseconds heartbeat_interval{1000};  // what actors are told
  std::chrono::milliseconds heartbeat_timeout{10000};  // silence after which an actor is dead
  // How long a QUEUED job may wait for a pool that has fewer actors registered than it needs (not
  // merely busy ones) before it fails. A RESTARTING job waits for its actors to come back without
  // limit, and holds its pools meanwhile.
  std::chrono::milliseconds unplaceable_timeout{600000};
  // Who holds <state_dir>/coordinator.lock, for the message of a second coordinator started on it.
  std::string holder = "coordinator";
  RunnerOptions runner;
};

class Coordinator {
 public:
  // `actors` reaches the actors for every job's runner (grpc_actor_client.h in the server).
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      const CoordinatorOptions& options, std::unique_ptr<ActorClientFactory> actors);
  ~Coordinator();  // cancels running jobs and joins their runners

  Registry& registry() { return registry_; }
  MemoryStore& rendezvous() { return rendezvous_; }
  // The rendezvous store serves the ranks of running jobs only: a key must begin with such a job's
  // id, so that every key goes with its job (JobRunner drops an attempt's keys when it ends).
  absl::Status CheckStoreKey(const std::string& key);
  JobFeeds& feeds() { return feeds_; }
  JobStore& store() { return *store_; }
  JobSpecs& specs() { return specs_; }
  const CoordinatorOptions& options() const { return options_; }
  Metrics& metrics() { return metrics_; }

  // What /metrics serves (coordinator/metrics.h).
  std::string MetricsText();

  // Validates and records the job (QUEUED), then tries to schedule. InvalidArgument with the field
  // path for a bad spec, or threads beyond kMaxThreads; AlreadyExists for a non-empty run_dir;
  // ResourceExhausted, naming the fields, when a group's estimated memory
  // (jobspec/memory_estimate.h) exceeds what every registered actor of its pool offers.
  absl::StatusOr<JobRecord> Submit(const v1::SubmitJobRequest& request);
  absl::StatusOr<JobRecord> Cancel(const std::string& job_id);
  // Starts every waiting job whose actors are free and that no earlier job holds a pool against.
  void Schedule();
  // A supervisor says the actor process at `address` ended (Registry::ReportExit); its job, if any,
  // restarts at once.
  void ReportActorExit(const std::string& address, const std::string& description);

 private:
  Coordinator(const CoordinatorOptions& options, FileLock state_lock,
              std::unique_ptr<JobStore> store, std::unique_ptr<ActorClientFactory> actors);
  // Fails `job` (QUEUED) once its pools have been too small for
  // unplaceable_timeout; true when it did. REQUIRES: mu_ held.
  bool FailIfUnplaceable(JobRecord& job, const std::string& why);
  // Records why a queued job is not starting (its message, an event, its watchers), once per
  // change. REQUIRES: mu_ held.
  void SetWaitingMessage(JobRecord& job, const std::string& message);
  void Monitor();                     // liveness and cleanup, on its own thread
  void Finish(const JobRecord& job);  // a queued job ended without running
  // OK unless a group of `config` needs more memory than any registered actor of its pool offers (a
  // pool with none registered, or one stating no memory, and a pretrained group are checked by the
  // actors at assignment).
  absl::Status CheckMemory(const jobspec::JobConfig& config) const;

  CoordinatorOptions options_;
  FileLock state_lock_;  // <state_dir>/coordinator.lock: one coordinator per state directory
  std::unique_ptr<JobStore> store_;
  const std::unique_ptr<ActorClientFactory> actors_;
  Registry registry_;
  JobSpecs specs_;
  MemoryStore rendezvous_;
  JobFeeds feeds_;
  Metrics metrics_;
  // The runner of a running job, shared so that a call that may block on actors (Cancel,
  // ActorLost: their Release calls) is made after mu_ is let go.
  std::shared_ptr<JobRunner> RunnerOf(const std::string& job_id);

  std::mutex mu_;  // scheduling, runners_; no call to an actor is made while it is held
  std::condition_variable wake_;
  bool stopping_ = false;
  std::map<std::string, std::shared_ptr<JobRunner>> runners_;  // running jobs
  std::vector<std::string> finished_;                          // runners to join
  // Since when each waiting job has found a pool too small for it.
  std::map<std::string, Clock::time_point> unplaceable_since_;
  std::thread monitor_;
};

}  // namespace tandem::coordinator
