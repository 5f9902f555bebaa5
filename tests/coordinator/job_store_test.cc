// Tests for coordinator/job_store.cc: ids that survive restarts, records and events that
// round-trip, NotFound for unknown ids, and files that are not Tandem's rejected without being
// touched.
#include "coordinator/job_store.h"

#include <sqlite3.h>
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::coordinator {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Runs `sql` on the database file at `path` with SQLite directly, bypassing JobStore.
void ExecuteSql(const fs::path& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  const int result = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(result, SQLITE_OK) << (error != nullptr ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

JobRecord SampleJob(const std::string& name) {
  JobRecord job;
  job.name = name;
  job.spec_json = R"({"name":")" + name + R"("})";
  job.steps = 100;
  return job;
}

// A fresh state dir per test (mkdtemp), removed with everything in it afterwards.
class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::path(::testing::TempDir()) / "job_store_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<JobStore> OpenStore() {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(dir_ / "state");
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }
  fs::path DatabasePath() const { return dir_ / "state" / "tandem.db"; }

  // Opening the state dir fails with FailedPrecondition naming the database file and `reason`, and
  // leaves the file byte for byte as it was.
  void ExpectOpenRejects(const std::string& reason) {
    const std::string before = ReadBytes(DatabasePath());
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(dir_ / "state");
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
    EXPECT_THAT(store.status().message(), HasSubstr(DatabasePath().string()));
    EXPECT_THAT(store.status().message(), HasSubstr(reason));
    EXPECT_EQ(ReadBytes(DatabasePath()), before);
  }

  fs::path dir_;
};

TEST_F(JobStoreTest, OpenCreatesTheStateDirAndDatabase) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->path(), DatabasePath().string());
  EXPECT_TRUE(fs::is_regular_file(DatabasePath()));
  absl::StatusOr<std::vector<JobRecord>> jobs = store->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(jobs->empty());
}

TEST_F(JobStoreTest, CreateJobAssignsSequentialIds) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  for (const char* expected : {"job-000001", "job-000002", "job-000003"}) {
    JobRecord job = SampleJob("shapes");
    job.id = "ignored";
    absl::StatusOr<JobRecord> created = store->CreateJob(job);
    ASSERT_TRUE(created.ok()) << created.status();
    EXPECT_EQ(created->id, expected);
  }
}

TEST_F(JobStoreTest, IdsSurviveReopeningAndAreNeverReused) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->CreateJob(SampleJob("first")).ok());
    ASSERT_TRUE(store->CreateJob(SampleJob("second")).ok());
  }
  std::unique_ptr<JobStore> reopened = OpenStore();
  ASSERT_NE(reopened, nullptr);
  absl::StatusOr<std::vector<JobRecord>> jobs = reopened->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id, "job-000001");
  EXPECT_EQ((*jobs)[0].name, "first");
  EXPECT_EQ((*jobs)[1].id, "job-000002");
  EXPECT_EQ((*jobs)[1].name, "second");

  absl::StatusOr<JobRecord> third = reopened->CreateJob(SampleJob("third"));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->id, "job-000003");
}

TEST_F(JobStoreTest, CreatedJobIsCommittedBeforeCreateJobReturns) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->CreateJob(SampleJob("shapes")).ok());
  // A second opener (another process, in effect) sees it while the first store is still open.
  std::unique_ptr<JobStore> other = OpenStore();
  ASSERT_NE(other, nullptr);
  absl::StatusOr<JobRecord> job = other->GetJob("job-000001");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name, "shapes");
}

TEST_F(JobStoreTest, EveryFieldRoundTripsThroughReopening) {
  JobRecord job;
  job.name = "vit-llama \xe2\x9c\x93";  // UTF-8
  job.state = JobState::kRestarting;
  job.message = std::string("actor v1 died\0twice", 19);  // embedded NUL
  job.spec_json = R"({"name":"vit-llama","steps":1000})";
  job.run_dir = "/state/jobs/job-000001";
  job.threads = 4;
  job.step = 640;
  job.steps = 1000;
  job.loss = 1.234567890123;
  job.submitted_at = 1700000000.25;
  job.started_at = 1700000001.5;
  job.ended_at = 1700000002.75;
  job.attempt = 3;
  job.restarts = 2;
  job.summary_json = R"({"loss":1.2})";
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    absl::StatusOr<JobRecord> created = store->CreateJob(job);
    ASSERT_TRUE(created.ok()) << created.status();
    job.id = "job-000001";
    EXPECT_EQ(created->id, job.id);
  }
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<JobRecord> read = store->GetJob("job-000001");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->id, job.id);
  EXPECT_EQ(read->name, job.name);
  EXPECT_EQ(read->state, job.state);
  EXPECT_EQ(read->message, job.message);
  EXPECT_EQ(read->spec_json, job.spec_json);
  EXPECT_EQ(read->run_dir, job.run_dir);
  EXPECT_EQ(read->threads, job.threads);
  EXPECT_EQ(read->step, job.step);
  EXPECT_EQ(read->steps, job.steps);
  EXPECT_EQ(read->loss, job.loss);
  EXPECT_EQ(read->submitted_at, job.submitted_at);
  EXPECT_EQ(read->started_at, job.started_at);
  EXPECT_EQ(read->ended_at, job.ended_at);
  EXPECT_EQ(read->attempt, job.attempt);
  EXPECT_EQ(read->restarts, job.restarts);
  EXPECT_EQ(read->summary_json, job.summary_json);
}

TEST_F(JobStoreTest, NanAndInfiniteLossRoundTrip) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  JobRecord job = SampleJob("diverged");
  job.loss = std::numeric_limits<double>::quiet_NaN();
  absl::StatusOr<JobRecord> created = store->CreateJob(job);
  ASSERT_TRUE(created.ok()) << created.status();
  absl::StatusOr<JobRecord> read = store->GetJob(created->id);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(std::isnan(read->loss));

  ASSERT_TRUE(store->UpdateProgress(created->id, 7, std::numeric_limits<double>::infinity()).ok());
  read = store->GetJob(created->id);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->loss, std::numeric_limits<double>::infinity());
}

TEST_F(JobStoreTest, CreateJobStampsSubmittedAtOnlyWhenUnset) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  const double before = Now();
  absl::StatusOr<JobRecord> stamped = store->CreateJob(SampleJob("stamped"));
  const double after = Now();
  ASSERT_TRUE(stamped.ok()) << stamped.status();
  EXPECT_GE(stamped->submitted_at, before);
  EXPECT_LE(stamped->submitted_at, after);

  JobRecord given = SampleJob("given");
  given.submitted_at = 12.5;
  absl::StatusOr<JobRecord> kept = store->CreateJob(given);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->submitted_at, 12.5);
}

TEST_F(JobStoreTest, UpdateJobReplacesTheRecord) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<JobRecord> job = store->CreateJob(SampleJob("shapes"));
  ASSERT_TRUE(job.ok()) << job.status();
  job->state = JobState::kFailed;
  job->message = "actor l0 ran out of memory";
  job->attempt = 2;
  job->ended_at = 99.0;
  ASSERT_TRUE(store->UpdateJob(*job).ok());

  absl::StatusOr<JobRecord> read = store->GetJob(job->id);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->state, JobState::kFailed);
  EXPECT_EQ(read->message, "actor l0 ran out of memory");
  EXPECT_EQ(read->attempt, 2);
  EXPECT_EQ(read->ended_at, 99.0);
  EXPECT_EQ(read->name, "shapes");
}

TEST_F(JobStoreTest, CountJobsByStateCountsEachStateThatHasJobs) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  for (JobState state : {JobState::kQueued, JobState::kFailed, JobState::kQueued}) {
    absl::StatusOr<JobRecord> job = store->CreateJob(SampleJob("shapes"));
    ASSERT_TRUE(job.ok()) << job.status();
    job->state = state;
    ASSERT_TRUE(store->UpdateJob(*job).ok());
  }
  absl::StatusOr<std::map<JobState, int64_t>> counts = store->CountJobsByState();
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(*counts, (std::map<JobState, int64_t>{{JobState::kQueued, 2}, {JobState::kFailed, 1}}));
}

TEST_F(JobStoreTest, UpdateProgressSetsOnlyStepAndLoss) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  JobRecord running = SampleJob("shapes");
  running.state = JobState::kRunning;
  running.message = "on v0, l0";
  absl::StatusOr<JobRecord> job = store->CreateJob(running);
  ASSERT_TRUE(job.ok()) << job.status();
  for (int64_t step = 1; step <= 5; ++step) {
    ASSERT_TRUE(store->UpdateProgress(job->id, step, 10.0 / step).ok());
  }
  absl::StatusOr<JobRecord> read = store->GetJob(job->id);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->step, 5);
  EXPECT_EQ(read->loss, 2.0);
  EXPECT_EQ(read->state, JobState::kRunning);
  EXPECT_EQ(read->message, "on v0, l0");
  EXPECT_EQ(read->steps, 100);
}

TEST_F(JobStoreTest, UnknownIdIsNotFoundNamingTheId) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->CreateJob(SampleJob("shapes")).ok());
  JobRecord unknown = SampleJob("ghost");
  unknown.id = "job-000042";

  const absl::Status statuses[] = {
      store->UpdateJob(unknown),
      store->GetJob("job-000042").status(),
      store->UpdateProgress("job-000042", 1, 1.0),
      store->AppendEvent("job-000042", "started").status(),
      store->Events("job-000042").status(),
  };
  for (const absl::Status& status : statuses) {
    EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
    EXPECT_THAT(status.message(), HasSubstr("job-000042"));
  }
  absl::StatusOr<std::vector<JobRecord>> jobs = store->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 1u);  // the failed update created nothing
}

TEST_F(JobStoreTest, StateOutsideTheEnumIsInvalidArgument) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  JobRecord job = SampleJob("shapes");
  job.state = static_cast<JobState>(0);
  EXPECT_EQ(store->CreateJob(job).status().code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<JobRecord> created = store->CreateJob(SampleJob("shapes"));
  ASSERT_TRUE(created.ok()) << created.status();
  created->state = static_cast<JobState>(7);
  EXPECT_EQ(store->UpdateJob(*created).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobStoreTest, EventsAreNumberedPerJobStartingWithSubmitted) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<JobRecord> first = store->CreateJob(SampleJob("first"));
  absl::StatusOr<JobRecord> second = store->CreateJob(SampleJob("second"));
  ASSERT_TRUE(first.ok() && second.ok());

  const double before = Now();
  EXPECT_EQ(store->AppendEvent(first->id, "scheduled on v0, l0").value_or(-1), 2);
  EXPECT_EQ(store->AppendEvent(second->id, "waiting for 1 llm actor").value_or(-1), 2);
  EXPECT_EQ(store->AppendEvent(first->id, "running").value_or(-1), 3);
  const double after = Now();

  absl::StatusOr<std::vector<JobEventRecord>> events = store->Events(first->id);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 3u);
  std::vector<std::string> texts;
  for (size_t i = 0; i < events->size(); ++i) {
    EXPECT_EQ((*events)[i].sequence, static_cast<int64_t>(i + 1));
    texts.push_back((*events)[i].text);
  }
  EXPECT_THAT(texts, ElementsAre("submitted", "scheduled on v0, l0", "running"));
  EXPECT_GE((*events)[1].time, before);
  EXPECT_LE((*events)[2].time, after);

  absl::StatusOr<std::vector<JobEventRecord>> others = store->Events(second->id);
  ASSERT_TRUE(others.ok()) << others.status();
  ASSERT_EQ(others->size(), 2u);
  EXPECT_EQ((*others)[1].text, "waiting for 1 llm actor");
}

TEST_F(JobStoreTest, EventsAfterASequenceAndAcrossReopening) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    absl::StatusOr<JobRecord> job = store->CreateJob(SampleJob("shapes"));
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE(store->AppendEvent(job->id, "running").ok());
    ASSERT_TRUE(store->AppendEvent(job->id, "checkpoint 100").ok());
  }
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<JobEventRecord>> tail = store->Events("job-000001", 2);
  ASSERT_TRUE(tail.ok()) << tail.status();
  ASSERT_EQ(tail->size(), 1u);
  EXPECT_EQ((*tail)[0].sequence, 3);
  EXPECT_EQ((*tail)[0].text, "checkpoint 100");

  absl::StatusOr<std::vector<JobEventRecord>> none = store->Events("job-000001", 3);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  // Numbering goes on where it stopped.
  EXPECT_EQ(store->AppendEvent("job-000001", "succeeded").value_or(-1), 4);
}

TEST_F(JobStoreTest, ConcurrentAppendEventGivesDistinctSequences) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<JobRecord> job = store->CreateJob(SampleJob("shapes"));
  ASSERT_TRUE(job.ok()) << job.status();

  constexpr int kThreads = 4;
  constexpr int kEventsPerThread = 25;
  std::vector<std::vector<int64_t>> sequences(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEventsPerThread; ++i) {
        absl::StatusOr<int64_t> sequence = store->AppendEvent(job->id, absl::StrCat(t, ":", i));
        sequences[t].push_back(sequence.value_or(-1));
        // Progress updates from a trainer interleave with the events.
        EXPECT_TRUE(store->UpdateProgress(job->id, i, 1.0).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  std::set<int64_t> distinct;
  for (const std::vector<int64_t>& of_thread : sequences) {
    distinct.insert(of_thread.begin(), of_thread.end());
  }
  constexpr int64_t kTotal = 1 + kThreads * kEventsPerThread;  // "submitted" is 1
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kTotal - 1));
  EXPECT_EQ(*distinct.begin(), 2);
  EXPECT_EQ(*distinct.rbegin(), kTotal);
  absl::StatusOr<std::vector<JobEventRecord>> events = store->Events(job->id);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), static_cast<size_t>(kTotal));
}

TEST_F(JobStoreTest, GarbageFileIsRejectedNamingItAndLeftUnchanged) {
  fs::create_directories(DatabasePath().parent_path());
  const std::string garbage =
      "these are not the bytes of a SQLite database\n" + std::string(4096, 'x');
  WriteBytes(DatabasePath(), garbage);

  ExpectOpenRejects("file is not a database");
  EXPECT_EQ(ReadBytes(DatabasePath()), garbage);
}

TEST_F(JobStoreTest, SqliteDatabaseOfAnotherProgramIsRejectedAndLeftUnchanged) {
  fs::create_directories(DatabasePath().parent_path());
  ExecuteSql(DatabasePath(),
             "CREATE TABLE photos (path TEXT); INSERT INTO photos VALUES ('a.png');");
  ExpectOpenRejects("not Tandem's");
}

TEST_F(JobStoreTest, NewerSchemaIsRejectedAndLeftUnchanged) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->CreateJob(SampleJob("shapes")).ok());
  }
  ExecuteSql(DatabasePath(), "UPDATE tandem_schema SET version = 4");
  ExpectOpenRejects("schema version 4");
}

TEST_F(JobStoreTest, VersionOneDatabaseIsUpgradedKeepingItsJobs) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->CreateJob(SampleJob("old")).ok());
  }
  // The version-1 schema: the same without jobs.restarts and jobs.stops_without_progress.
  ExecuteSql(
      DatabasePath(),
      "DROP INDEX jobs_by_state; ALTER TABLE jobs DROP COLUMN restarts; "
      "ALTER TABLE jobs DROP COLUMN stops_without_progress; UPDATE tandem_schema SET version = 1");
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    absl::StatusOr<JobRecord> job = store->GetJob("job-000001");
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->name, "old");
    EXPECT_EQ(job->restarts, 0);
    job->restarts = 2;
    ASSERT_TRUE(store->UpdateJob(*job).ok());
  }
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->GetJob("job-000001")->restarts, 2);
}

TEST_F(JobStoreTest, VersionTwoDatabaseIsUpgradedKeepingItsJobs) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->CreateJob(SampleJob("v2")).ok());
  }
  ExecuteSql(DatabasePath(),
             "DROP INDEX jobs_by_state; ALTER TABLE jobs DROP COLUMN stops_without_progress; "
             "UPDATE tandem_schema SET version = 2");
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->GetJob("job-000001")->name, "v2");
  EXPECT_EQ(store->CountStopWithoutProgress("job-000001").value(), 1);
}

// A RUNNING job found at start resumes; the second time in a row without a step in between, it
// fails instead, naming why, so that a job which ends the coordinator cannot do so for ever.
TEST_F(JobStoreTest, RecoveryResumesARunningJobThenFailsOneThatStoppedTheCoordinatorTwice) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  JobRecord job = store->CreateJob(SampleJob("crashy")).value();
  const auto run = [&] {
    JobRecord record = store->GetJob(job.id).value();
    record.state = JobState::kRunning;
    ASSERT_TRUE(store->UpdateJob(record).ok());
  };
  run();
  ASSERT_TRUE(RecoverInterruptedJobs(*store).ok());
  EXPECT_EQ(store->GetJob(job.id)->state, JobState::kRestarting);

  // A step between two stops resets the count.
  run();
  ASSERT_TRUE(store->UpdateProgress(job.id, 7, 0.5).ok());
  ASSERT_TRUE(RecoverInterruptedJobs(*store).ok());
  EXPECT_EQ(store->GetJob(job.id)->state, JobState::kRestarting);

  run();  // resumed, and the coordinator stops again before a step
  ASSERT_TRUE(RecoverInterruptedJobs(*store).ok());
  const JobRecord failed = store->GetJob(job.id).value();
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_EQ(failed.message,
            "the coordinator stopped 2 times while the job ran, with no step completed in "
            "between; it is failed rather than resumed again (its events show what it was doing)");
  EXPECT_GT(failed.ended_at, 0);
  EXPECT_EQ(failed.step, 7);

  EXPECT_EQ(store->CountStopWithoutProgress("job-999999").status().code(),
            absl::StatusCode::kNotFound);
}

// The scheduler's query: the waiting jobs only, oldest first.
TEST_F(JobStoreTest, ListJobsInStatesReadsOnlyThoseStates) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  const JobState states[] = {JobState::kQueued, JobState::kSucceeded, JobState::kRestarting,
                             JobState::kRunning, JobState::kQueued};
  std::vector<std::string> ids;
  for (JobState state : states) {
    JobRecord job = store->CreateJob(SampleJob("j")).value();
    job.state = state;
    ASSERT_TRUE(store->UpdateJob(job).ok());
    ids.push_back(job.id);
  }
  absl::StatusOr<std::vector<JobRecord>> waiting =
      store->ListJobsInStates(JobState::kQueued, JobState::kRestarting);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  std::vector<std::string> got;
  for (const JobRecord& job : *waiting) got.push_back(job.id);
  EXPECT_EQ(got, (std::vector<std::string>{ids[0], ids[2], ids[4]}));
}

// `tandem jobs --prune AGE`: only jobs that ended before the cutoff go, with their events, and
// the ids of the others are untouched.
TEST_F(JobStoreTest, DeleteJobsEndedBeforeForgetsOnlyEndedJobsPastTheCutoff) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  struct Planted {
    JobState state;
    double ended_at;
  };
  const Planted planted[] = {{JobState::kSucceeded, 100},
                             {JobState::kRunning, 0},
                             {JobState::kFailed, 200},
                             {JobState::kCancelled, 900},
                             {JobState::kQueued, 0}};
  std::vector<std::string> ids;
  for (const Planted& p : planted) {
    JobRecord job = store->CreateJob(SampleJob("j")).value();
    job.state = p.state;
    job.ended_at = p.ended_at;
    ASSERT_TRUE(store->UpdateJob(job).ok());
    ASSERT_TRUE(store->AppendEvent(job.id, "something").ok());
    ids.push_back(job.id);
  }
  absl::StatusOr<std::vector<std::string>> pruned = store->DeleteJobsEndedBefore(500);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(*pruned, (std::vector<std::string>{ids[0], ids[2]}));
  EXPECT_EQ(store->GetJob(ids[0]).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Events(ids[2], 0).status().code(), absl::StatusCode::kNotFound);
  std::vector<std::string> left;
  const std::vector<JobRecord> kept = store->ListJobs().value();
  for (const JobRecord& job : kept) left.push_back(job.id);
  EXPECT_EQ(left, (std::vector<std::string>{ids[1], ids[3], ids[4]}));
  EXPECT_EQ(store->Events(ids[3], 0).value().size(), 2u);  // "submitted" and "something"
  // The next job's id is still new.
  EXPECT_GT(store->CreateJob(SampleJob("next")).value().id, ids[4]);
}

// Two jobs queued with one run directory would resume from each other's checkpoints: the second is
// refused, naming the first, until the first ends.
TEST_F(JobStoreTest, ARunDirectoryBelongsToOneJobUntilItEnds) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  JobRecord first = SampleJob("first");
  first.run_dir = "/runs/shared";
  first = store->CreateJob(first).value();
  JobRecord second = SampleJob("second");
  second.run_dir = "/runs/shared";
  absl::StatusOr<JobRecord> refused = store->CreateJob(second);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(refused.status().message(), "run directory /runs/shared belongs to " + first.id +
                                            " (QUEUED) until it ends; choose another");
  first.state = JobState::kCancelled;
  ASSERT_TRUE(store->UpdateJob(first).ok());
  EXPECT_TRUE(store->CreateJob(second).ok());
}

TEST_F(JobStoreTest, EmptyFileBecomesANewStore) {
  fs::create_directories(DatabasePath().parent_path());
  WriteBytes(DatabasePath(), "");
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<JobRecord> job = store->CreateJob(SampleJob("shapes"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->id, "job-000001");
}

TEST_F(JobStoreTest, StateDirThatCannotBeCreatedIsAnErrorNamingIt) {
  WriteBytes(dir_ / "file", "a file, not a directory");
  const std::string state_dir = (dir_ / "file" / "state").string();
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(state_dir);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr("creating state dir " + state_dir));
  EXPECT_THAT(store.status().message(), HasSubstr("Not a directory"));
}

TEST(JobStateTest, NamesAndFinalStates) {
  EXPECT_STREQ(JobStateName(JobState::kQueued), "QUEUED");
  EXPECT_STREQ(JobStateName(JobState::kRunning), "RUNNING");
  EXPECT_STREQ(JobStateName(JobState::kSucceeded), "SUCCEEDED");
  EXPECT_STREQ(JobStateName(JobState::kFailed), "FAILED");
  EXPECT_STREQ(JobStateName(JobState::kCancelled), "CANCELLED");
  EXPECT_STREQ(JobStateName(JobState::kRestarting), "RESTARTING");
  EXPECT_STREQ(JobStateName(static_cast<JobState>(0)), "UNKNOWN");
  EXPECT_FALSE(IsFinal(JobState::kQueued));
  EXPECT_FALSE(IsFinal(JobState::kRunning));
  EXPECT_FALSE(IsFinal(JobState::kRestarting));
  EXPECT_TRUE(IsFinal(JobState::kSucceeded));
  EXPECT_TRUE(IsFinal(JobState::kFailed));
  EXPECT_TRUE(IsFinal(JobState::kCancelled));
}

}  // namespace
}  // namespace tandem::coordinator
