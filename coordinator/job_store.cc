// SQLite implementation of coordinator/job_store.h.
//
// Schema (version 3; an older database gains the `restarts` (version 1) and
// `stops_without_progress` (versions 1 and 2) columns when it is opened):
//   tandem_schema(version)    one row: marks the file as Tandem's and says how to read it
//   job_counter(last_number)  one row: the last job number handed out; ids are never reused
//   jobs(number, id, <JobRecord fields>, last_event, stops_without_progress)
//                             last_event: the job's last event sequence; stops_without_progress:
//                             coordinator processes that ended while the job ran, since its last
//                             step (not in JobRecord, so that a runner's record never writes it
//                             back)
//   job_events(job_id, sequence, time, text)          keyed by (job_id, sequence)
//
// Errors name what was being done and the database path, followed by SQLite's message (the codes
// are coordinator/sqlite.h's); a file that is not Tandem's -> FailedPrecondition.
#include "coordinator/job_store.h"

#include <chrono>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/sqlite.h"

namespace tandem::coordinator {
namespace {

// The schema this file creates and reads. A database with another version is refused, untouched.
constexpr int64_t kCurrentSchemaVersion = 3;
// Version 1 lacked jobs.restarts and version 2 jobs.stops_without_progress; Open upgrades such a
// file in one transaction.
constexpr char kUpgradeFromVersion1[] = R"sql(
ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;
)sql";
constexpr char kUpgradeFromVersion2[] = R"sql(
ALTER TABLE jobs ADD COLUMN stops_without_progress INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state);
UPDATE tandem_schema SET version = 3;
)sql";

constexpr char kCreateSchema[] = R"sql(
CREATE TABLE tandem_schema (version INTEGER NOT NULL);
CREATE TABLE job_counter (last_number INTEGER NOT NULL);
CREATE TABLE jobs (
  number INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  state INTEGER NOT NULL,
  message TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  spec_dir TEXT NOT NULL,  -- unused: written "" since specs carry absolute paths; kept for the schema
  run_dir TEXT NOT NULL,
  threads INTEGER NOT NULL,
  step INTEGER NOT NULL,
  steps INTEGER NOT NULL,
  loss REAL,  -- NULL stands for NaN, which SQLite cannot store
  submitted_at REAL NOT NULL,
  started_at REAL NOT NULL,
  ended_at REAL NOT NULL,
  attempt INTEGER NOT NULL,
  summary_json TEXT NOT NULL,
  last_event INTEGER NOT NULL DEFAULT 0,
  restarts INTEGER NOT NULL DEFAULT 0,
  stops_without_progress INTEGER NOT NULL DEFAULT 0);
CREATE TABLE job_events (
  job_id TEXT NOT NULL,
  sequence INTEGER NOT NULL,
  time REAL NOT NULL,
  text TEXT NOT NULL,
  PRIMARY KEY (job_id, sequence)) WITHOUT ROWID;
CREATE INDEX jobs_by_state ON jobs (state);
INSERT INTO job_counter (last_number) VALUES (0);
)sql";
constexpr char kInsertSchemaVersion[] = "INSERT INTO tandem_schema (version) VALUES (?1)";
constexpr char kCountSchemaObjects[] = "SELECT count(*) FROM sqlite_schema";
constexpr char kCountTandemSchemaTables[] =
    "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'tandem_schema'";
constexpr char kSelectSchemaVersion[] = "SELECT max(version) FROM tandem_schema";
constexpr char kUseWriteAheadLog[] = "PRAGMA journal_mode = WAL";

// The record's fields after the id, in the order BindJob binds them (?2 ... ?17; ?1 is the id) and
// ReadJob reads them (columns 1 ... 16; column 0 is the id).
#define TANDEM_JOB_FIELDS                                                                          \
  "name, state, message, spec_json, spec_dir, run_dir, threads, step, steps, loss, submitted_at, " \
  "started_at, ended_at, attempt, summary_json, restarts"
#define TANDEM_JOB_FIELD_PARAMETERS \
  "?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17"

constexpr char kInsertJob[] = "INSERT INTO jobs (number, id, " TANDEM_JOB_FIELDS
                              ") VALUES (?18, ?1, " TANDEM_JOB_FIELD_PARAMETERS ")";
constexpr char kUpdateJob[] =
    "UPDATE jobs SET (" TANDEM_JOB_FIELDS ") = (" TANDEM_JOB_FIELD_PARAMETERS ") WHERE id = ?1";
constexpr char kGetJob[] = "SELECT id, " TANDEM_JOB_FIELDS " FROM jobs WHERE id = ?1";
constexpr char kListJobs[] = "SELECT id, " TANDEM_JOB_FIELDS " FROM jobs ORDER BY number";
// ?1 and ?2: two states; the jobs_by_state index finds them without reading the others.
constexpr char kListJobsInStates[] =
    "SELECT id, " TANDEM_JOB_FIELDS " FROM jobs WHERE state IN (?1, ?2) ORDER BY number";

#undef TANDEM_JOB_FIELDS
#undef TANDEM_JOB_FIELD_PARAMETERS

constexpr char kJobsInRunDir[] = "SELECT id, state FROM jobs WHERE run_dir = ?1";
constexpr char kEndedBefore[] =
    "SELECT id FROM jobs WHERE state IN (?1, ?2, ?3) AND ended_at > 0 AND ended_at < ?4 ORDER BY "
    "number";
constexpr char kDeleteJob[] = "DELETE FROM jobs WHERE id = ?1";
constexpr char kDeleteEvents[] = "DELETE FROM job_events WHERE job_id = ?1";
constexpr char kCountJobsByState[] = "SELECT state, COUNT(*) FROM jobs GROUP BY state";
constexpr char kUpdateProgress[] =
    "UPDATE jobs SET step = ?2, loss = ?3, stops_without_progress = 0 WHERE id = ?1";
constexpr char kCountStopWithoutProgress[] =
    "UPDATE jobs SET stops_without_progress = stops_without_progress + 1 WHERE id = ?1 "
    "RETURNING stops_without_progress";
constexpr char kJobExists[] = "SELECT 1 FROM jobs WHERE id = ?1";
constexpr char kNextJobNumber[] =
    "UPDATE job_counter SET last_number = last_number + 1 RETURNING last_number";
constexpr char kNextEventSequence[] =
    "UPDATE jobs SET last_event = last_event + 1 WHERE id = ?1 RETURNING last_event";
constexpr char kInsertEvent[] =
    "INSERT INTO job_events (job_id, sequence, time, text) VALUES (?1, ?2, ?3, ?4)";
constexpr char kListEvents[] =
    "SELECT sequence, time, text FROM job_events WHERE job_id = ?1 AND sequence > ?2 "
    "ORDER BY sequence";

// Unix seconds.
double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string FormatJobId(int64_t number) { return absl::StrFormat("job-%06d", number); }

bool IsKnownState(int64_t state) {
  return state >= static_cast<int64_t>(JobState::kQueued) &&
         state <= static_cast<int64_t>(JobState::kRestarting);
}

// Binds ?1 (id) ... ?17 in the order of TANDEM_JOB_FIELDS.
void BindJob(const JobRecord& record, Statement& statement) {
  statement.BindText(1, record.id)
      .BindText(2, record.name)
      .BindInt(3, static_cast<int64_t>(record.state))
      .BindText(4, record.message)
      .BindText(5, record.spec_json)
      .BindText(6, "")  // spec_dir: no longer used (a stored spec's paths are absolute)
      .BindText(7, record.run_dir)
      .BindInt(8, record.threads)
      .BindInt(9, record.step)
      .BindInt(10, record.steps)
      .BindReal(11, record.loss)
      .BindReal(12, record.submitted_at)
      .BindReal(13, record.started_at)
      .BindReal(14, record.ended_at)
      .BindInt(15, record.attempt)
      .BindText(16, record.summary_json)
      .BindInt(17, record.restarts);
}

// Reads a row of kGetJob or kListJobs.
absl::StatusOr<JobRecord> ReadJob(const Statement& row, absl::string_view what) {
  JobRecord record;
  record.id = row.ReadText(0);
  record.name = row.ReadText(1);
  const int64_t state = row.ReadInt(2);
  if (!IsKnownState(state)) {
    return absl::DataLossError(
        absl::StrCat(what, ": job ", record.id, " has the unknown state ", state));
  }
  record.state = static_cast<JobState>(state);
  record.message = row.ReadText(3);
  record.spec_json = row.ReadText(4);
  record.run_dir = row.ReadText(6);
  record.threads = static_cast<int32_t>(row.ReadInt(7));
  record.step = row.ReadInt(8);
  record.steps = row.ReadInt(9);
  record.loss = row.ReadReal(10);
  record.submitted_at = row.ReadReal(11);
  record.started_at = row.ReadReal(12);
  record.ended_at = row.ReadReal(13);
  record.attempt = row.ReadInt(14);
  record.summary_json = row.ReadText(15);
  record.restarts = row.ReadInt(16);
  return record;
}

absl::Status CheckState(const JobRecord& record, absl::string_view what) {
  if (IsKnownState(static_cast<int64_t>(record.state))) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": job state ", static_cast<int>(record.state), " is not a JobState"));
}

absl::Status NoSuchJob(const std::string& id, const std::string& path) {
  return absl::NotFoundError(absl::StrCat("no job ", id, " in ", path));
}

// Reads the file's schema before writing anything, so a file that is not Tandem's stays as it is.
// Returns the schema version the file holds: 0 when the database is empty (new), else 1 or 2 (to be
// upgraded) or the current one.
absl::StatusOr<int64_t> InspectSchema(SqliteConnection& connection, absl::string_view what) {
  ASSIGN_OR_RETURN(const std::optional<int64_t> objects,
                   connection.QueryInt(kCountSchemaObjects, what));
  if (objects.value_or(0) == 0) return 0;
  ASSIGN_OR_RETURN(const std::optional<int64_t> marked,
                   connection.QueryInt(kCountTandemSchemaTables, what));
  if (marked.value_or(0) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": a SQLite database, but not Tandem's (it has no tandem_schema table)"));
  }
  ASSIGN_OR_RETURN(const std::optional<int64_t> version,
                   connection.QueryInt(kSelectSchemaVersion, what));
  if (!version) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": its tandem_schema table holds no version"));
  }
  if (*version != kCurrentSchemaVersion && *version != 1 && *version != 2) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": schema version ", *version, " is not ", kCurrentSchemaVersion,
                     ", the version this build reads (a newer tandem wrote it?)"));
  }
  return *version;
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& state_dir) {
  std::error_code error;
  std::filesystem::create_directories(state_dir, error);
  if (error) {
    return absl::ErrnoToStatus(error.value(), absl::StrCat("creating state dir ", state_dir));
  }
  const std::string path = (std::filesystem::path(state_dir) / "tandem.db").string();
  const std::string what = absl::StrCat("opening job store ", path);

  ASSIGN_OR_RETURN(std::unique_ptr<SqliteConnection> synced, SqliteConnection::Open(path, what));
  ASSIGN_OR_RETURN(const int64_t version, InspectSchema(*synced, what));
  const bool empty = version == 0;
  {
    ASSIGN_OR_RETURN(Statement journal, synced->Prepare(kUseWriteAheadLog, what));
    ASSIGN_OR_RETURN(const bool row, journal.Next(what));
    if (!row || journal.ReadText(0) != "wal") {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": SQLite cannot keep a write-ahead log here (journal mode stays ",
                       row ? journal.ReadText(0) : "unknown", ")"));
    }
  }
  RETURN_IF_ERROR(synced->ExecuteScript("PRAGMA synchronous = FULL", what));
  if (empty) {
    RETURN_IF_ERROR(synced->InTransaction(what, [&]() -> absl::Status {
      RETURN_IF_ERROR(synced->ExecuteScript(kCreateSchema, what));
      ASSIGN_OR_RETURN(Statement insert, synced->Prepare(kInsertSchemaVersion, what));
      return insert.BindInt(1, kCurrentSchemaVersion).Run(what);
    }));
    TANDEM_LOG(kInfo, "coordinator") << "created job store " << path;
  } else if (version < kCurrentSchemaVersion) {
    RETURN_IF_ERROR(synced->InTransaction(what, [&]() -> absl::Status {
      if (version == 1) RETURN_IF_ERROR(synced->ExecuteScript(kUpgradeFromVersion1, what));
      return synced->ExecuteScript(kUpgradeFromVersion2, what);
    }));
    TANDEM_LOG(kInfo, "coordinator") << "upgraded job store " << path << " from schema version "
                                     << version << " to " << kCurrentSchemaVersion;
  }

  ASSIGN_OR_RETURN(std::unique_ptr<SqliteConnection> unsynced, SqliteConnection::Open(path, what));
  RETURN_IF_ERROR(unsynced->ExecuteScript("PRAGMA synchronous = NORMAL", what));
  return std::unique_ptr<JobStore>(new JobStore(path, std::move(synced), std::move(unsynced)));
}

JobStore::JobStore(std::string path, std::unique_ptr<SqliteConnection> synced,
                   std::unique_ptr<SqliteConnection> unsynced)
    : path_(std::move(path)), synced_(std::move(synced)), unsynced_(std::move(unsynced)) {}

JobStore::~JobStore() = default;

absl::StatusOr<JobRecord> JobStore::CreateJob(JobRecord record) {
  const std::string what = absl::StrCat("creating a job in ", path_);
  RETURN_IF_ERROR(CheckState(record, what));
  if (record.submitted_at == 0) record.submitted_at = Now();

  std::lock_guard<std::mutex> lock(mutex_);
  RETURN_IF_ERROR(synced_->InTransaction(what, [&]() -> absl::Status {
    if (!record.run_dir.empty()) {  // a run directory belongs to one job until that job ends
      ASSIGN_OR_RETURN(Statement same, synced_->Prepare(kJobsInRunDir, what));
      same.BindText(1, record.run_dir);
      while (true) {
        ASSIGN_OR_RETURN(const bool row, same.Next(what));
        if (!row) break;
        const auto state = static_cast<JobState>(same.ReadInt(1));
        if (IsKnownState(same.ReadInt(1)) && !IsFinal(state)) {
          return absl::AlreadyExistsError(
              absl::StrCat("run directory ", record.run_dir, " belongs to ", same.ReadText(0), " (",
                           JobStateName(state), ") until it ends; choose another"));
        }
      }
    }
    ASSIGN_OR_RETURN(Statement next, synced_->Prepare(kNextJobNumber, what));
    ASSIGN_OR_RETURN(const std::optional<int64_t> number, next.FirstInt(what));
    if (!number) return absl::DataLossError(absl::StrCat(what, ": the job counter is missing"));
    record.id = FormatJobId(*number);

    ASSIGN_OR_RETURN(Statement insert, synced_->Prepare(kInsertJob, what));
    BindJob(record, insert);
    insert.BindInt(18, *number);
    RETURN_IF_ERROR(insert.Run(what));
    return AppendEventLocked(record.id, "submitted", what).status();
  }));
  return record;
}

absl::Status JobStore::UpdateJob(const JobRecord& record) {
  const std::string what = absl::StrCat("updating job ", record.id, " in ", path_);
  RETURN_IF_ERROR(CheckState(record, what));
  std::lock_guard<std::mutex> lock(mutex_);
  ASSIGN_OR_RETURN(Statement update, synced_->Prepare(kUpdateJob, what));
  BindJob(record, update);
  RETURN_IF_ERROR(update.Run(what));
  if (synced_->Changes() == 0) return NoSuchJob(record.id, path_);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> JobStore::CountStopWithoutProgress(const std::string& id) {
  const std::string what =
      absl::StrCat("counting a stop of the coordinator for job ", id, " in ", path_);
  std::lock_guard<std::mutex> lock(mutex_);
  ASSIGN_OR_RETURN(Statement count, synced_->Prepare(kCountStopWithoutProgress, what));
  count.BindText(1, id);
  ASSIGN_OR_RETURN(const std::optional<int64_t> stops, count.FirstInt(what));
  if (!stops) return NoSuchJob(id, path_);
  return *stops;
}

absl::Status JobStore::UpdateProgress(const std::string& id, int64_t step, double loss) {
  const std::string what = absl::StrCat("updating the progress of job ", id, " in ", path_);
  std::lock_guard<std::mutex> lock(mutex_);
  ASSIGN_OR_RETURN(Statement update, unsynced_->Prepare(kUpdateProgress, what));
  update.BindText(1, id).BindInt(2, step).BindReal(3, loss);
  RETURN_IF_ERROR(update.Run(what));
  if (unsynced_->Changes() == 0) return NoSuchJob(id, path_);
  return absl::OkStatus();
}

absl::StatusOr<JobRecord> JobStore::GetJob(const std::string& id) {
  const std::string what = absl::StrCat("reading job ", id, " from ", path_);
  std::lock_guard<std::mutex> lock(mutex_);
  ASSIGN_OR_RETURN(Statement query, synced_->Prepare(kGetJob, what));
  query.BindText(1, id);
  ASSIGN_OR_RETURN(const bool found, query.Next(what));
  if (!found) return NoSuchJob(id, path_);
  return ReadJob(query, what);
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ListJobs() { return List(kListJobs, {}); }

absl::StatusOr<std::vector<JobRecord>> JobStore::ListJobsInStates(JobState a, JobState b) {
  return List(kListJobsInStates, {a, b});
}

absl::StatusOr<std::vector<JobRecord>> JobStore::List(const char* sql,
                                                      const std::vector<JobState>& states) {
  const std::string what = absl::StrCat("listing the jobs in ", path_);
  std::lock_guard<std::mutex> lock(mutex_);
  ASSIGN_OR_RETURN(Statement query, synced_->Prepare(sql, what));
  for (size_t i = 0; i < states.size(); ++i)
    query.BindInt(static_cast<int>(i) + 1, static_cast<int64_t>(states[i]));
  std::vector<JobRecord> jobs;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, query.Next(what));
    if (!row) break;
    ASSIGN_OR_RETURN(JobRecord job, ReadJob(query, what));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::StatusOr<std::map<JobState, int64_t>> JobStore::CountJobsByState() {
  const std::string what = absl::StrCat("counting the jobs in ", path_);
  std::lock_guard<std::mutex> lock(mutex_);
  ASSIGN_OR_RETURN(Statement query, synced_->Prepare(kCountJobsByState, what));
  std::map<JobState, int64_t> counts;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, query.Next(what));
    if (!row) break;
    const int64_t state = query.ReadInt(0);
    if (!IsKnownState(state)) {
      return absl::DataLossError(absl::StrCat(what, ": a job has the unknown state ", state));
    }
    counts[static_cast<JobState>(state)] = query.ReadInt(1);
  }
  return counts;
}

absl::StatusOr<std::vector<std::string>> JobStore::DeleteJobsEndedBefore(double ended_before) {
  const std::string what = absl::StrCat("pruning ended jobs from ", path_);
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> ids;
  RETURN_IF_ERROR(synced_->InTransaction(what, [&]() -> absl::Status {
    ids.clear();
    ASSIGN_OR_RETURN(Statement ended, synced_->Prepare(kEndedBefore, what));
    ended.BindInt(1, static_cast<int64_t>(JobState::kSucceeded))
        .BindInt(2, static_cast<int64_t>(JobState::kFailed))
        .BindInt(3, static_cast<int64_t>(JobState::kCancelled))
        .BindReal(4, ended_before);
    while (true) {
      ASSIGN_OR_RETURN(const bool row, ended.Next(what));
      if (!row) break;
      ids.push_back(ended.ReadText(0));
    }
    for (const std::string& id : ids) {
      ASSIGN_OR_RETURN(Statement events, synced_->Prepare(kDeleteEvents, what));
      events.BindText(1, id);
      RETURN_IF_ERROR(events.Run(what));
      ASSIGN_OR_RETURN(Statement job, synced_->Prepare(kDeleteJob, what));
      job.BindText(1, id);
      RETURN_IF_ERROR(job.Run(what));
    }
    return absl::OkStatus();
  }));
  return ids;
}

absl::StatusOr<int64_t> JobStore::AppendEvent(const std::string& id, const std::string& text) {
  const std::string what = absl::StrCat("appending an event to job ", id, " in ", path_);
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t sequence = 0;
  RETURN_IF_ERROR(synced_->InTransaction(what, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(sequence, AppendEventLocked(id, text, what));
    return absl::OkStatus();
  }));
  return sequence;
}

absl::StatusOr<int64_t> JobStore::AppendEventLocked(const std::string& id, const std::string& text,
                                                    const std::string& what) {
  ASSIGN_OR_RETURN(Statement next, synced_->Prepare(kNextEventSequence, what));
  next.BindText(1, id);
  ASSIGN_OR_RETURN(const std::optional<int64_t> sequence, next.FirstInt(what));
  if (!sequence) return NoSuchJob(id, path_);

  ASSIGN_OR_RETURN(Statement insert, synced_->Prepare(kInsertEvent, what));
  insert.BindText(1, id).BindInt(2, *sequence).BindReal(3, Now()).BindText(4, text);
  RETURN_IF_ERROR(insert.Run(what));
  return *sequence;
}

absl::StatusOr<std::vector<JobEventRecord>> JobStore::Events(const std::string& id,
                                                             int64_t after_sequence) {
  const std::string what = absl::StrCat("reading the events of job ", id, " from ", path_);
  std::lock_guard<std::mutex> lock(mutex_);
  {
    ASSIGN_OR_RETURN(Statement exists, synced_->Prepare(kJobExists, what));
    exists.BindText(1, id);
    ASSIGN_OR_RETURN(const bool found, exists.Next(what));
    if (!found) return NoSuchJob(id, path_);
  }
  ASSIGN_OR_RETURN(Statement query, synced_->Prepare(kListEvents, what));
  query.BindText(1, id).BindInt(2, after_sequence);
  std::vector<JobEventRecord> events;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, query.Next(what));
    if (!row) break;
    events.push_back({query.ReadInt(0), query.ReadReal(1), query.ReadText(2)});
  }
  return events;
}

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return "QUEUED";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
    case JobState::kRestarting:
      return "RESTARTING";
  }
  return "UNKNOWN";
}

bool IsFinal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

absl::Status RecoverInterruptedJobs(JobStore& store) {
  ASSIGN_OR_RETURN(std::vector<JobRecord> jobs,
                   store.ListJobsInStates(JobState::kRunning, JobState::kRunning));
  // A job the coordinator stopped under twice without a step in between (it may be what ended
  // the process, while it started) fails instead of taking the coordinator down again.
  constexpr int64_t kStopsBeforeFailing = 2;
  for (JobRecord& job : jobs) {
    ASSIGN_OR_RETURN(const int64_t stops, store.CountStopWithoutProgress(job.id));
    if (stops >= kStopsBeforeFailing) {
      job.state = JobState::kFailed;
      job.ended_at = Now();
      job.message =
          absl::StrCat("the coordinator stopped ", stops,
                       " times while the job ran, with no step completed in between; it is "
                       "failed rather than resumed again (its events show what it was doing)");
    } else {
      // Not one of the job's restarts: the job did not fail.
      job.state = JobState::kRestarting;
      job.message =
          "the coordinator restarted while the job ran; it resumes from its last complete "
          "checkpoint once its actors register";
    }
    RETURN_IF_ERROR(store.UpdateJob(job));
    RETURN_IF_ERROR(
        store.AppendEvent(job.id, absl::StrCat(JobStateName(job.state), ": ", job.message))
            .status());
  }
  return absl::OkStatus();
}

}  // namespace tandem::coordinator
