#include "coordinator/coordinator.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "coordinator/job_record_proto.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_proto.h"
#include "jobspec/memory_estimate.h"
#include "rundir/checkpoint_dir.h"
#include "rundir/new_run.h"

namespace tandem::coordinator {

namespace fs = std::filesystem;
namespace {
constexpr char kComponent[] = "coordinator";
double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    const CoordinatorOptions& options, std::unique_ptr<ActorClientFactory> actors) {
  std::error_code ec;
  fs::create_directories(options.state_dir, ec);
  if (ec)
    return absl::UnavailableError(
        absl::StrCat("cannot create state directory ", options.state_dir, ": ", ec.message()));
  // Before the database is opened: two coordinators would both resume its running jobs.
  ASSIGN_OR_RETURN(
      FileLock lock,
      FileLock::Acquire((fs::path(options.state_dir) / "coordinator.lock").string(),
                        absl::StrCat("state directory ", options.state_dir), options.holder));
  ASSIGN_OR_RETURN(std::unique_ptr<JobStore> store, JobStore::Open(options.state_dir));
  RETURN_IF_ERROR(RecoverInterruptedJobs(*store));
  std::unique_ptr<Coordinator> coordinator(
      new Coordinator(options, std::move(lock), std::move(store), std::move(actors)));
  coordinator->monitor_ = std::thread([c = coordinator.get()] { c->Monitor(); });
  return coordinator;
}

Coordinator::Coordinator(const CoordinatorOptions& options, FileLock state_lock,
                         std::unique_ptr<JobStore> store,
                         std::unique_ptr<ActorClientFactory> actors)
    : options_(options),
      state_lock_(std::move(state_lock)),
      store_(std::move(store)),
      actors_(std::move(actors)),
      registry_(options.heartbeat_timeout),
      rendezvous_(MemoryStore::Limits{.max_wait = options.runner.command_timeout +
                                                  std::chrono::seconds(30)}) {}

Coordinator::~Coordinator() {
  std::map<std::string, std::shared_ptr<JobRunner>> runners;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;  // no runner is added from here on
    runners = runners_;
  }
  for (auto& [id, runner] : runners) runner->Suspend("the coordinator is shutting down");
  wake_.notify_all();
  if (monitor_.joinable()) monitor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    runners_.clear();
  }
  runners.clear();  // joins
}

absl::Status Coordinator::CheckStoreKey(const std::string& key) {
  const size_t slash = key.find('/');
  if (slash == std::string::npos || RunnerOf(key.substr(0, slash)) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("rendezvous store: key ", QuoteForMessage(key),
                     " names no running job (keys are <job id>/<attempt>/...)"));
  }
  return absl::OkStatus();
}

std::shared_ptr<JobRunner> Coordinator::RunnerOf(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = runners_.find(job_id);
  return it == runners_.end() ? nullptr : it->second;
}

absl::Status Coordinator::CheckMemory(const jobspec::JobConfig& config) const {
  const std::vector<ActorEntry> actors = registry_.List();
  for (const Role role : kRoles) {
    const bool vision = role == Role::kVision;
    // A pretrained model's sizes are in its config.json, which the actors read: they check it.
    if (!(vision ? config.vision.pretrained : config.llm.pretrained).empty()) continue;
    const std::string& pool = vision ? config.vision.pool : config.llm.pool;
    int registered = 0;
    int64_t largest = 0;
    bool unknown = false;  // an actor that states no memory checks the job itself at assignment
    for (const ActorEntry& a : actors) {
      if (a.pool != pool) continue;
      ++registered;
      largest = std::max(largest, a.memory_bytes);
      unknown = unknown || a.memory_bytes == 0;
    }
    // No actor yet, or one that states no memory: each checks at assignment.
    if (registered == 0 || unknown) continue;
    ASSIGN_OR_RETURN(const jobspec::MemoryEstimate estimate,
                     jobspec::EstimateGroupMemory(config, role));
    // One with room: the job may run (an actor without room refuses its part).
    if (largest >= estimate.total()) continue;
    return jobspec::CheckEstimateFits(
        estimate, config, largest,
        absl::StrCat("the largest of pool '", pool, "''s ", registered,
                     " registered actors (tandem actor --memory, else its device's)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobRecord> Coordinator::Submit(const v1::SubmitJobRequest& request) {
  if (absl::Status paths = jobspec::CheckPathsAbsolute(
          request.spec(),
          "the actors open it wherever they run: give an absolute path (tandem submit makes a spec "
          "file's paths absolute against its directory)");
      !paths.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: ", paths.message()));
  }
  ASSIGN_OR_RETURN(jobspec::ResolvedJobSpec resolved,
                   jobspec::ResolveJobSpec(request.spec(), "job spec"));
  const jobspec::JobConfig& config = resolved.config;
  if (!request.run_dir().empty()) {
    if (!fs::path(request.run_dir()).is_absolute()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "run_dir: '", request.run_dir(),
          "' is relative; give an absolute path that every actor sees (tandem submit does)"));
    }
    // The state directory holds the coordinator's database and the default run directories of jobs
    // to come (<state>/jobs/job-NNNNNN): a job given one would be resumed by, and overwritten by,
    // the job that later gets that id.
    const auto resolved = [](const fs::path& path) {
      std::error_code unresolved;
      const fs::path canonical = fs::weakly_canonical(path, unresolved);
      return unresolved ? path.lexically_normal() : canonical;
    };
    const fs::path state = resolved(fs::absolute(options_.state_dir));
    const fs::path wanted = resolved(request.run_dir());
    if (const auto [end, _] =
            std::mismatch(state.begin(), state.end(), wanted.begin(), wanted.end());
        end == state.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "run_dir: '", request.run_dir(), "' is inside the coordinator's state directory ",
          state.string(), "; choose a directory outside it"));
    }
    RETURN_IF_ERROR(rundir::CheckRunDirIsNew(request.run_dir()));
  }
  RETURN_IF_ERROR(CheckMemory(config));
  if (request.threads() < 0 || request.threads() > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "threads: ", request.threads(), " is not between 0 (each actor's own) and ", kMaxThreads));
  }
  JobRecord job;
  job.name = config.name;
  job.state = JobState::kQueued;
  job.spec_json = resolved.json;
  job.run_dir =
      request.run_dir().empty() ? "" : fs::path(request.run_dir()).lexically_normal().string();
  if (job.run_dir.size() > 1 && job.run_dir.back() == '/')
    job.run_dir.pop_back();  // "dir/" is "dir"
  job.threads = request.threads();
  job.steps = config.schedule.steps;
  job.submitted_at = UnixNow();
  if (!config.resume_from.empty()) {
    absl::StatusOr<rundir::CheckpointInfo> checkpoint =
        rundir::ReadResumePoint(config.resume_from, config.schedule.steps);
    if (!checkpoint.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec: resume_from: ", checkpoint.status().message()));
    }
  }
  {
    // Schedule reads the queue under mu_ (from the monitor, or when another job ends): it must not
    // see the job between its creation and the recording of its run directory.
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(job, store_->CreateJob(job));
    if (job.run_dir.empty()) {
      job.run_dir = (fs::absolute(options_.state_dir) / "jobs" / job.id).string();
      RETURN_IF_ERROR(store_->UpdateJob(job));
    }
  }
  TANDEM_LOG(kInfo, kComponent) << job.id << ": submitted " << job.name << " ("
                                << config.vision.actors << " vision x " << config.llm.actors
                                << " llm actors), run directory " << job.run_dir;
  specs_.Put(job.id, std::move(resolved));
  Schedule();
  return store_->GetJob(job.id);
}

absl::StatusOr<JobRecord> Coordinator::Cancel(const std::string& job_id) {
  ASSIGN_OR_RETURN(JobRecord job, store_->GetJob(job_id));
  if (IsFinal(job.state)) {
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, " has already ended (", JobStateName(job.state), ")"));
  }
  std::shared_ptr<JobRunner> runner;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = runners_.find(job_id);
    if (it != runners_.end()) {
      runner = it->second;
    } else {
      ASSIGN_OR_RETURN(job,
                       store_->GetJob(job_id));  // it may have started meanwhile: not without mu_
      if (job.state == JobState::kQueued || job.state == JobState::kRestarting) {
        job.state = JobState::kCancelled;
        job.message = "cancelled by request";
        job.ended_at = UnixNow();
        RETURN_IF_ERROR(store_->UpdateJob(job));
        Finish(job);
      }
    }
  }
  if (runner != nullptr) {
    runner->Cancel("cancelled by request");  // its Release calls, made without mu_
    return store_->GetJob(job_id);
  }
  Schedule();
  return store_->GetJob(job_id);
}

void Coordinator::ReportActorExit(const std::string& address, const std::string& description) {
  const std::optional<ActorEntry> actor = registry_.ReportExit(address, description);
  TANDEM_LOG(kWarning, kComponent) << "actor " << (actor ? actor->id : std::string("?")) << " ("
                                   << address << ") " << description;
  if (!actor || actor->job_id.empty()) return;
  if (std::shared_ptr<JobRunner> runner = RunnerOf(actor->job_id)) {
    runner->ActorLost(actor->id, absl::StrCat("died: ", description));
  }
}

void Coordinator::Finish(const JobRecord& job) {
  specs_.Forget(job.id);
  absl::StatusOr<int64_t> sequence =
      store_->AppendEvent(job.id, absl::StrCat(JobStateName(job.state), ": ", job.message));
  v1::JobUpdate event;
  event.mutable_event()->set_sequence(sequence.ok() ? *sequence : 0);
  event.mutable_event()->set_time(UnixNow());
  event.mutable_event()->set_text(absl::StrCat(JobStateName(job.state), ": ", job.message));
  feeds_.Publish(job.id, std::move(event));
  v1::JobUpdate final_update;
  *final_update.mutable_job() = ToProto(job);
  feeds_.Publish(job.id, std::move(final_update));
  feeds_.Close(job.id);
}

void Coordinator::Schedule() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return;
  absl::StatusOr<std::vector<JobRecord>> jobs =
      store_->ListJobsInStates(JobState::kQueued, JobState::kRestarting);
  if (!jobs.ok()) {
    TANDEM_LOG(kError, kComponent) << "cannot read the job queue: " << jobs.status().message();
    return;
  }
  // A job that left the queue (cancelled, or started) no longer waits for a pool.
  std::erase_if(unplaceable_since_, [&](const auto& entry) {
    return std::none_of(jobs->begin(), jobs->end(),
                        [&](const JobRecord& job) { return job.id == entry.first; });
  });
  // Jobs start in submission order within each pool: a job that waits for busy actors holds its
  // pools, and a later job that needs one of them waits behind it; a later job on other pools
  // starts. A job whose pool has too few actors registered to ever hold it holds nothing: it waits
  // (and, if it never ran, fails after --unplaceable-timeout) while the jobs behind it run.
  std::map<std::string, std::string> held;  // pool -> the first job waiting for it
  const auto hold = [&](const std::vector<GroupNeed>& needs, const std::string& job_id) {
    for (const GroupNeed& need : needs) held.try_emplace(need.pool, job_id);
  };
  for (JobRecord& job : *jobs) {
    absl::StatusOr<JobSpecs::Spec> spec = specs_.Get(job);
    if (!spec.ok()) {  // recorded by an older version that accepted it: fail it, do not block the
                       // queue
      job.state = JobState::kFailed;
      job.message = std::string(spec.status().message());
      job.ended_at = UnixNow();
      if (store_->UpdateJob(job).ok()) Finish(job);
      continue;
    }
    const jobspec::JobConfig& config = (*spec)->config;
    std::vector<GroupNeed> needs = {{config.vision.pool, config.vision.actors},
                                    {config.llm.pool, config.llm.actors}};
    // A runner that just ended this job's last attempt is still finishing: next round.
    if (runners_.count(job.id) > 0) {
      hold(needs, job.id);
      continue;
    }
    const auto ahead = std::find_if(needs.begin(), needs.end(), [&](const GroupNeed& need) {
      return held.count(need.pool) > 0;
    });
    if (ahead != needs.end()) {
      unplaceable_since_.erase(job.id);
      SetWaitingMessage(
          job, absl::StrCat("queued behind ", held[ahead->pool], " for pool '", ahead->pool, "'"));
      hold(needs, job.id);
      continue;
    }
    absl::StatusOr<std::vector<std::vector<ActorEntry>>> actors = registry_.Reserve(job.id, needs);
    // Only a job that never ran times out: a RESTARTING one waits for its actors to come back (a
    // node pool being replaced) however long that takes.
    if (absl::IsResourceExhausted(actors.status()) && job.state == JobState::kQueued) {
      if (FailIfUnplaceable(job, std::string(actors.status().message()))) continue;
    } else {
      unplaceable_since_.erase(job.id);
    }
    if (!actors.ok()) {
      const bool too_few = absl::IsResourceExhausted(actors.status());
      SetWaitingMessage(
          job, too_few
                   ? absl::StrCat("waiting for more actors: ", actors.status().message(),
                                  job.state == JobState::kQueued
                                      ? absl::StrCat(" (it fails after ",
                                                     options_.unplaceable_timeout.count() / 1000.0,
                                                     " s without them, --unplaceable-timeout)")
                                      : "")
                   : std::string(actors.status().message()));
      if (!too_few || job.state == JobState::kRestarting) hold(needs, job.id);
      continue;
    }
    auto runner = std::make_unique<JobRunner>(
        job, *spec, (*actors)[0], (*actors)[1], store_.get(), &feeds_, &rendezvous_, &registry_,
        &metrics_, actors_.get(), options_.runner, [this](const std::string& id) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            finished_.push_back(id);
          }
          wake_.notify_all();
        });
    runner->Start();
    runners_[job.id] = std::move(runner);
  }
}

void Coordinator::SetWaitingMessage(JobRecord& job, const std::string& message) {
  if (job.message == message) return;
  job.message = message;
  if (!store_->UpdateJob(job).ok()) return;
  (void)store_->AppendEvent(job.id, message);
  v1::JobUpdate update;
  update.mutable_event()->set_time(UnixNow());
  update.mutable_event()->set_text(message);
  feeds_.Publish(job.id, std::move(update));
}

bool Coordinator::FailIfUnplaceable(JobRecord& job, const std::string& why) {
  const auto now = registry_.now();
  const auto since = unplaceable_since_.try_emplace(job.id, now).first->second;
  if (now - since < options_.unplaceable_timeout) return false;
  unplaceable_since_.erase(job.id);
  job.state = JobState::kFailed;
  job.message = absl::StrCat(
      why, ", for ", options_.unplaceable_timeout.count() / 1000.0,
      " s (--unplaceable-timeout): the job cannot start, and later jobs are not held behind it");
  job.ended_at = UnixNow();
  if (absl::Status recorded = store_->UpdateJob(job); !recorded.ok()) {
    TANDEM_LOG(kError, kComponent)
        << job.id << ": cannot record its failure: " << recorded.message();
    return false;  // still QUEUED in the store: it keeps its place
  }
  TANDEM_LOG(kWarning, kComponent) << job.id << ": failed: " << job.message;
  Finish(job);
  return true;
}

std::string Coordinator::MetricsText() {
  absl::StatusOr<std::map<JobState, int64_t>> jobs = store_->CountJobsByState();
  if (!jobs.ok()) {
    TANDEM_LOG(kError, kComponent) << "metrics: cannot count the jobs: " << jobs.status().message();
  }
  return metrics_.Render(jobs.ok() ? *jobs : std::map<JobState, int64_t>(), registry_.List(),
                         registry_.now(), registry_.heartbeat_timeout());
}

void Coordinator::Monitor() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, options_.heartbeat_interval);
    if (stopping_) break;
    std::vector<std::shared_ptr<JobRunner>> done;
    for (const std::string& id : finished_) {
      auto it = runners_.find(id);
      if (it == runners_.end()) continue;
      done.push_back(std::move(it->second));
      runners_.erase(it);
      if (absl::StatusOr<JobRecord> job = store_->GetJob(id); job.ok() && IsFinal(job->state))
        specs_.Forget(id);
      rendezvous_.DeleteWithPrefix(id + "/");  // what its last attempt's ranks set after it ended
    }
    finished_.clear();
    lock.unlock();
    done.clear();  // joins the finished runners' threads
    for (const ActorEntry& dead : registry_.Expire()) {
      TANDEM_LOG(kWarning, kComponent)
          << "actor " << dead.id << " (" << dead.address << ") missed its heartbeats; removed"
          << (dead.job_id.empty() ? "" : absl::StrCat(", failing ", dead.job_id));
      if (std::shared_ptr<JobRunner> runner = RunnerOf(dead.job_id)) {
        runner->ActorLost(dead.id, "stopped sending heartbeats");
      }
    }
    Schedule();
    lock.lock();
  }
}

}  // namespace tandem::coordinator
