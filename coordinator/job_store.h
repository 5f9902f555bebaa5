// The coordinator's persistent job state: every job, its current record and its event log, in an
// embedded SQLite database at <state dir>/tandem.db, so a restarted coordinator knows every job.
//
// Plain structs, no gRPC: the service maps JobRecord to tandem.v1.Job.
//
// Durability: CreateJob, UpdateJob and AppendEvent commit with a synced write-ahead log
// (synchronous=FULL) before they return, so a caller may acknowledge the change once they succeed.
// UpdateProgress, called every training step, commits without syncing (synchronous=NORMAL in WAL
// mode): it survives a crash of the process, but after a power loss or OS crash the step and loss
// may lag behind. The next synced commit (any of the calls above) makes every earlier progress
// update durable too, since it syncs the whole log. Measured on an ext4 VM disk: about 30 us per
// UpdateProgress, against 0.2 to 3.5 ms for a synced commit (one fsync), depending on the load.
//
// Ids: "job-000001", "job-000002", ... from a counter kept in the database, so an id is never
// reused, not even after a restart.
//
// Thread-safe: all calls serialise on one mutex. One JobStore per state dir; the database may be
// read by other processes (the sqlite3 shell) while it is open.
//
// Job states (values match tandem.v1.JobState). The store records whatever state it is given; the
// scheduler owns the transitions:
//
//   QUEUED -----> RUNNING -----> SUCCEEDED
//     |            |    ^  \---> FAILED
//     |            v    |
//     |         RESTARTING ----> FAILED
//     \------------------------> CANCELLED   (from any state that is not final)
//
//   QUEUED:     waiting for free actors of each pool; `message` says for what.
//   RUNNING:    actors assigned; `attempt` counts how often the job has entered this state.
//   RESTARTING: an actor died (or the coordinator restarted); waiting for actors to resume from the
//               last complete checkpoint.
//   SUCCEEDED, FAILED, CANCELLED are final; `message` says why a job failed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::coordinator {

class SqliteConnection;  // coordinator/sqlite.h

enum class JobState {
  kQueued = 1,
  kRunning = 2,
  kSucceeded = 3,
  kFailed = 4,
  kCancelled = 5,
  kRestarting = 6,
};

// "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "RESTARTING"; "UNKNOWN" for other
// values.
const char* JobStateName(JobState state);

// True for SUCCEEDED, FAILED and CANCELLED.
bool IsFinal(JobState state);

struct JobRecord {
  std::string id;  // "job-000001"; assigned by CreateJob
  std::string name;
  JobState state = JobState::kQueued;
  std::string message;       // what a queued job waits for, why a job failed
  std::string spec_json;     // the job's spec as accepted (jobspec::JobSpecToJson; paths absolute)
  std::string run_dir;       // where the job's files are written
  int32_t threads = 0;       // intra-op threads per actor; 0 = the actor's default
  int64_t step = 0;          // last completed step
  int64_t steps = 0;         // steps the job runs
  double loss = 0;           // loss of the last completed step; NaN round-trips
  double submitted_at = 0;   // Unix seconds
  double started_at = 0;     // 0 until it runs
  double ended_at = 0;       // 0 until it ends
  int64_t attempt = 0;       // the scheduler increments it each time the job starts running
  int64_t restarts = 0;      // restarts after failures (not those after a coordinator restart)
  std::string summary_json;  // summary.json's contents once the job succeeded
};

struct JobEventRecord {
  int64_t sequence = 0;  // 1, 2, ... per job
  double time = 0;       // Unix seconds
  std::string text;
};

class JobStore {
 public:
  // Opens <state_dir>/tandem.db, creating the directory and the database when they do not exist.
  // Errors name the path: a state dir that cannot be created (the errno's code), a file that is not
  // a SQLite database or is one without Tandem's schema (FailedPrecondition), a schema newer than
  // this build understands (FailedPrecondition). A file rejected for its contents is not modified.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& state_dir);

  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Assigns the next id (record.id is ignored), stamps submitted_at with the current time when it
  // is 0, stores the record and appends the event "submitted", all in one durable transaction.
  // Returns the record as stored. InvalidArgument for a state outside JobState; AlreadyExists
  // naming the other job when record.run_dir (compared as given: callers normalise it) belongs to
  // a job that has not ended. A job without a run directory is given one after creation.
  absl::StatusOr<JobRecord> CreateJob(JobRecord record);

  // Replaces every field of the job record.id (step and loss included) and commits durably.
  // NotFound naming the id when there is no such job; InvalidArgument for a state outside JobState.
  absl::Status UpdateJob(const JobRecord& record);

  // Sets only step and loss; cheap enough for every training step, and not synced (see the top of
  // this file). NotFound naming the id when there is no such job.
  absl::Status UpdateProgress(const std::string& id, int64_t step, double loss);

  // Counts one more coordinator process that ended while job `id` ran, and returns how many have
  // since the job's last completed step (UpdateProgress resets the count). Committed and synced.
  // NotFound for an unknown id.
  absl::StatusOr<int64_t> CountStopWithoutProgress(const std::string& id);

  // NotFound naming the id when there is no such job.
  absl::StatusOr<JobRecord> GetJob(const std::string& id);

  // Every job, oldest first.
  absl::StatusOr<std::vector<JobRecord>> ListJobs();
  // The jobs in state `a` or `b`, oldest first, read through an index: what the scheduler needs
  // every round, without the rows of the jobs that ended.
  absl::StatusOr<std::vector<JobRecord>> ListJobsInStates(JobState a, JobState b);

  // Deletes the jobs that ended (SUCCEEDED, FAILED or CANCELLED) before `ended_before` (Unix
  // seconds), with their events, in one transaction; returns their ids, oldest first. Their run
  // directories are not touched.
  absl::StatusOr<std::vector<std::string>> DeleteJobsEndedBefore(double ended_before);

  // How many jobs are in each state (states without jobs are absent); one query, for /metrics.
  absl::StatusOr<std::map<JobState, int64_t>> CountJobsByState();

  // Appends `text` to the job's event log with the current time and commits durably. Returns its
  // sequence number: 1 for the first event of a job, then 2, ... NotFound naming the id when there
  // is no such job.
  absl::StatusOr<int64_t> AppendEvent(const std::string& id, const std::string& text);

  // The job's events with a sequence number above `after_sequence`, in order. NotFound naming the
  // id when there is no such job.
  absl::StatusOr<std::vector<JobEventRecord>> Events(const std::string& id,
                                                     int64_t after_sequence = 0);

  // <state_dir>/tandem.db
  const std::string& path() const { return path_; }

 private:
  absl::StatusOr<std::vector<JobRecord>> List(const char* sql, const std::vector<JobState>& states);
  JobStore(std::string path, std::unique_ptr<SqliteConnection> synced,
           std::unique_ptr<SqliteConnection> unsynced);

  // Allocates the job's next sequence number and inserts the event, inside the caller's
  // transaction.
  absl::StatusOr<int64_t> AppendEventLocked(const std::string& id, const std::string& text,
                                            const std::string& what);

  const std::string path_;
  std::mutex mutex_;
  // Two connections to the same file: `synced_` (synchronous=FULL) for everything that must be
  // durable once acknowledged, `unsynced_` (synchronous=NORMAL) for UpdateProgress only.
  const std::unique_ptr<SqliteConnection> synced_;
  const std::unique_ptr<SqliteConnection> unsynced_;
};

// What a coordinator does at start with the jobs the store says are RUNNING: its previous process
// ended while they ran. Each resumes (RESTARTING, from its last complete checkpoint once its actors
// register), unless the coordinator has now stopped twice under it with no step completed in
// between: a job that may be what ended the process is then FAILED, saying so, rather than resumed
// into the same end. The errors of the store.
absl::Status RecoverInterruptedJobs(JobStore& store);

}  // namespace tandem::coordinator
