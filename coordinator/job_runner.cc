// The runner's lifecycle (start, stop, the end state of an attempt and the releases) and its
// fan-out of commands to the members. The attempt's own steps are in job_runner_attempt.cc.
#include "coordinator/job_runner.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/job_record_proto.h"
#include "coordinator/laggards.h"
#include "rundir/checkpoint_dir.h"

namespace tandem::coordinator {

namespace {
constexpr char kComponent[] = "coordinator";
// How long an unreachable actor's supervisor may take to report why it ended.
constexpr std::chrono::milliseconds kExitReportWait{1000};
double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Runs `call` on one of a runner's threads: an exception (std::bad_alloc, say) becomes an
// InternalError naming `what`, so it fails the job, never the coordinator's process.
template <typename Call>
auto Guarded(const char* what, Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, ": an exception that is not a std::exception"));
  }
}
}  // namespace

std::string JobRunner::Member::Name() const {
  return absl::StrCat(actor.id, " (", RoleName(role), " rank ", rank.load(), ", ", actor.address,
                      ")");
}

absl::Status JobRunner::Described(const absl::Status& status, const std::string& what) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

JobRunner::JobRunner(JobRecord job, std::shared_ptr<const jobspec::ResolvedJobSpec> spec,
                     std::vector<ActorEntry> vision, std::vector<ActorEntry> llm, JobStore* store,
                     JobFeeds* feeds, MemoryStore* rendezvous, Registry* registry, Metrics* metrics,
                     ActorClientFactory* actors, RunnerOptions options,
                     std::function<void(const std::string&)> done)
    : job_(std::move(job)),
      spec_(std::move(spec)),
      store_(store),
      feeds_(feeds),
      rendezvous_(rendezvous),
      registry_(registry),
      metrics_(metrics),
      options_(options),
      hold_(options.hold_dir, job_.name),
      done_(std::move(done)) {
  auto add = [&](const std::vector<ActorEntry>& group, Role role) {
    for (size_t r = 0; r < group.size(); ++r) {
      auto m = std::make_unique<Member>();
      m->actor = group[r];
      m->role = role;
      m->rank = static_cast<int>(r);
      m->client = actors->Connect(group[r].address, m->Name());
      members_.push_back(std::move(m));
    }
  };
  add(vision, Role::kVision);
  add(llm, Role::kLlm);
}

JobRunner::~JobRunner() {
  if (thread_.joinable()) thread_.join();
}

void JobRunner::Start() {
  attempt_start_ = registry_->now();
  thread_ = std::thread([this] { Run(); });
}

void JobRunner::Cancel(const std::string& reason) { Stop(reason, /*suspend=*/false); }

void JobRunner::Suspend(const std::string& reason) { Stop(reason, /*suspend=*/true); }

void JobRunner::Stop(const std::string& reason, bool suspend) {
  {
    std::lock_guard<std::mutex> lock(reason_mu_);
    // A cancel wins over a suspension (the coordinator stopping) in either order: a job the user
    // cancelled is never resumed.
    if (!suspend && (stop_reason_.empty() || suspended_)) {
      stop_reason_ = reason;
      suspended_ = false;
    } else if (suspend && stop_reason_.empty()) {
      stop_reason_ = reason;
      suspended_ = true;
    }
  }
  cancelled_ = true;
  hold_.Interrupt();
  for (const auto& m : members_) {
    m->client->StopRetrying();
    if (assigning_) m->client->CancelCalls();  // AssignAll returns now; Release stops the building
  }
  ReleaseAll(reason);  // interrupts a step waiting on transfers, and an assignment being built
}

void JobRunner::ActorLost(const std::string& actor_id, const std::string& what) {
  std::string name = actor_id;
  for (const auto& m : members_) {
    if (m->actor.id == actor_id) name = m->Name();
  }
  {
    std::lock_guard<std::mutex> lock(reason_mu_);
    lost_contact_.emplace(actor_id, absl::StrCat(name, " ", what));
  }
  cancelled_ = true;
  hold_.Interrupt();
  for (const auto& m : members_) {
    m->client->StopRetrying();
    // A stopped process answers nothing: the step waiting on it ends now, not at its deadline.
    if (m->actor.id == actor_id) m->client->CancelCalls();
  }
  ReleaseAll(absl::StrCat("actor ", actor_id, " was lost"));
}

void JobRunner::Event(const std::string& text) {
  absl::StatusOr<int64_t> sequence = store_->AppendEvent(job_.id, text);
  v1::JobUpdate update;
  v1::JobEvent* event = update.mutable_event();
  event->set_sequence(sequence.ok() ? *sequence : 0);
  event->set_time(UnixNow());
  event->set_text(text);
  feeds_->Publish(job_.id, std::move(update));
  TANDEM_LOG(kInfo, kComponent) << job_.id << ": " << text;
}

absl::Status JobRunner::AwaitHold(int64_t step) {
  if (hold_.HeldStep() != step) return absl::OkStatus();
  const std::string held =
      absl::StrCat("held before step ", step + 1, ": ", hold_.path(), " exists");
  job_.message = held;
  RETURN_IF_ERROR(store_->UpdateJob(job_));
  Event(held);
  if (!hold_.WaitWhileHeld(step)) {
    return absl::CancelledError(absl::StrCat("stopped while held before step ", step + 1));
  }
  job_.message.clear();
  RETURN_IF_ERROR(store_->UpdateJob(job_));
  Event(absl::StrCat("released before step ", step + 1, ": ", hold_.path(),
                     " no longer names step ", step));
  return absl::OkStatus();
}

void JobRunner::SetState(JobState state, const std::string& message) {
  job_.state = state;
  job_.message = message;
  if (state == JobState::kRunning) job_.started_at = UnixNow();
  if (IsFinal(state)) job_.ended_at = UnixNow();
  if (absl::Status status = store_->UpdateJob(job_); !status.ok()) {
    TANDEM_LOG(kError, kComponent)
        << job_.id << ": cannot record state " << JobStateName(state) << ": " << status.message();
  }
  Event(message.empty() ? std::string(JobStateName(state))
                        : absl::StrCat(JobStateName(state), ": ", message));
}

void JobRunner::ReleaseAll(const std::string& reason) {
  std::vector<std::thread> threads;
  std::vector<std::string> unreachable(members_.size());
  for (size_t i = 0; i < members_.size(); ++i) {
    {
      std::lock_guard<std::mutex> lock(reason_mu_);
      if (lost_contact_.count(members_[i]->actor.id) > 0) continue;  // known gone
    }
    threads.emplace_back([&, i] {
      const absl::Status status = members_[i]->client->Release(job_.id, reason);
      // Release always succeeds on a live actor: a failure to reach it is the actor's loss.
      if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) {
        // A supervisor that saw the process end says why, within moments.
        const std::optional<std::string> exit =
            registry_->AwaitExitReport(members_[i]->actor.address, attempt_start_, kExitReportWait);
        unreachable[i] = exit ? absl::StrCat(members_[i]->Name(), " died: ", *exit)
                              : absl::StrCat("lost contact with ", members_[i]->Name(), " (",
                                             status.message(), ")");
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < members_.size(); ++i) {
    if (unreachable[i].empty()) continue;
    registry_->Remove(members_[i]->actor.id);
    std::lock_guard<std::mutex> lock(reason_mu_);
    lost_contact_.emplace(members_[i]->actor.id, unreachable[i]);
  }
}

namespace {

// The root cause among members' results: a member's own failure rather than a peer's Cancelled or
// deadline echo of it. Returns the index, or results.size() when all are OK.
size_t RootCause(const std::vector<absl::Status>& results) {
  size_t first = results.size();
  auto echo = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kCancelled ||
           s.code() == absl::StatusCode::kDeadlineExceeded;
  };
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok()) continue;
    if (first == results.size() || (!echo(results[i]) && echo(results[first]))) first = i;
  }
  return first;
}

}  // namespace

absl::Status JobRunner::ForAll(const char* what,
                               const std::function<absl::Status(size_t, Member&)>& call) {
  std::vector<absl::Status> results(members_.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members_.size(); ++i) {
    threads.emplace_back(
        [&, i] { results[i] = Guarded(what, [&] { return call(i, *members_[i]); }); });
  }
  for (auto& t : threads) t.join();
  const size_t first = RootCause(results);
  if (first == results.size()) return absl::OkStatus();
  return absl::Status(
      results[first].code(),
      absl::StrCat(what, " failed on ", members_[first]->Name(), ": ", results[first].message()));
}

absl::Status JobRunner::RunSteps(
    int64_t first, int64_t last,
    const std::function<absl::Status(int64_t, const StepAnswers&)>& on_step) {
  const size_t n = members_.size();
  std::mutex mu;
  std::condition_variable changed;
  // The answers of the steps answered but not yet handed to on_step: a few at a time, however many
  // steps the segment has (it may be every step of the job).
  struct Answered {
    StepAnswers answers;
    size_t count = 0;
  };
  std::map<int64_t, Answered> answers;  // guarded by mu
  bool stop = false;                    // guarded by mu
  absl::Status first_failure;  // guarded by mu: the first in time; later ones follow from it
  size_t failed_member = 0;    // guarded by mu

  // Two lanes per member, one for the odd and one for the even steps: each actor always has its
  // next RunStep waiting (the actor runs them in order), so no step waits for a round trip to here.
  constexpr int kLanes = 2;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    for (int lane = 0; lane < kLanes; ++lane) {
      threads.emplace_back([&, i, lane] {
        Member& m = *members_[i];
        for (int64_t step = first + lane; step <= last; step += kLanes) {
          {
            std::lock_guard<std::mutex> lock(mu);
            if (cancelled_) stop = true;
            if (stop) {
              changed.notify_all();
              return;
            }
          }
          absl::StatusOr<ActorStepReply> reply =
              Guarded("step", [&] { return m.client->RunStep(job_.id, step); });
          absl::Status status = Described(reply.status(), absl::StrCat("step ", step));
          std::lock_guard<std::mutex> lock(mu);
          if (!status.ok()) {
            // A member's ABORTED ("an earlier step failed") may beat its real failure here.
            const bool replaces_echo = failed_member == i &&
                                       first_failure.code() == absl::StatusCode::kAborted &&
                                       status.code() != absl::StatusCode::kAborted;
            if (!stop || replaces_echo) first_failure = std::move(status), failed_member = i;
            stop = true;
            changed.notify_all();
            return;
          }
          Answered& entry = answers[step];
          if (entry.answers.empty()) entry.answers.resize(n);
          entry.answers[i] = *std::move(reply);
          ++entry.count;
          changed.notify_all();
        }
      });
    }
  }

  absl::Status status;
  for (int64_t step = first; step <= last && status.ok(); ++step) {
    StepAnswers step_answers;
    {
      std::unique_lock<std::mutex> lock(mu);
      const auto complete = [&] {
        const auto it = answers.find(step);
        return it != answers.end() && it->second.count == n;
      };
      changed.wait(lock, [&] { return stop || complete(); });
      if (!complete()) break;
      step_answers = std::move(answers[step].answers);
      answers.erase(step);
    }
    status = Guarded("recording the step", [&] { return on_step(step, step_answers); });
  }
  bool failed = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    failed = stop || !status.ok();
    stop = true;
  }
  // A member may be waiting on transfers from one that failed: releasing the job interrupts it.
  if (failed) ReleaseAll(status.ok() ? "a step failed" : std::string(status.message()));
  for (auto& t : threads) t.join();
  if (!status.ok()) return status;
  if (cancelled_) return absl::CancelledError("cancelled");
  if (!first_failure.ok()) {
    return absl::Status(first_failure.code(),
                        absl::StrCat("step failed on ", members_[failed_member]->Name(), ": ",
                                     first_failure.message()));
  }
  return absl::OkStatus();
}

std::string JobRunner::Laggards() const {
  std::vector<RankProgress> ranks;
  const std::vector<ActorEntry> actors = registry_->List();
  for (const auto& m : members_) {
    for (const ActorEntry& a : actors) {
      if (a.id != m->actor.id || a.job_id != job_.id) continue;
      ranks.push_back({RoleName(m->role), m->rank.load(), absl::StrCat(a.id, ", ", a.address),
                       a.last_collective});
    }
  }
  return DescribeLaggards(ranks);
}

void JobRunner::Run() {
  ++job_.attempt;
  damaged_checkpoint_.clear();
  SetState(JobState::kRunning, "");
  absl::Status status = Guarded("the job's runner", [&] { return Execute(); });
  std::string reason;
  bool lost = false, suspended = false;
  {
    std::lock_guard<std::mutex> lock(reason_mu_);
    reason = stop_reason_;
    lost = !lost_contact_.empty();
    suspended = suspended_;
  }
  if (status.ok()) {
    ReleaseAll("job succeeded");
    SetState(JobState::kSucceeded, "");
  } else if (suspended) {
    ReleaseAll(reason);
    SetState(JobState::kRestarting,
             absl::StrCat(reason, "; it resumes from its last complete checkpoint"));
  } else if (!reason.empty()) {  // cancelled by request
    ReleaseAll(reason);
    SetState(JobState::kCancelled, reason);
  } else {
    // Releasing every member also finds those that cannot be reached any more.
    ReleaseAll("job failed");
    std::string message(status.message());
    {
      std::lock_guard<std::mutex> lock(reason_mu_);
      for (const auto& [id, what] : lost_contact_) message = absl::StrCat(what, "; ", message);
      lost = !lost_contact_.empty();
    }
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      if (const std::string behind = Laggards(); !behind.empty()) {
        message = absl::StrCat(message, "; the collective waited for: ", behind);
      }
    }
    const bool damaged = !damaged_checkpoint_.empty();
    if (damaged) message = absl::StrCat(message, "; ", damaged_checkpoint_, " is marked damaged");
    // A restore from memory that failed before a step was done: the actors dropped the snapshots
    // with it, and the next attempt resumes from disk.
    const bool memory_failed = resumed_from_memory_ > 0 && job_.step == resumed_from_memory_;
    if (memory_failed) {
      message = absl::StrCat(message, "; the restore from memory at step ", resumed_from_memory_,
                             " failed");
    }
    if ((lost || damaged || memory_failed) && job_.restarts < max_restarts_) {
      ++job_.restarts;
      const std::optional<rundir::CheckpointInfo> checkpoint =
          rundir::LatestCheckpoint(job_.run_dir);
      const std::string from = checkpoint ? checkpoint->directory : "the start";
      SetState(JobState::kRestarting,
               absl::StrCat(message, "; restart ", job_.restarts, " of ", max_restarts_,
                            " (failure.max_restarts) from ",
                            spec_->config.snapshot_every > 0 && !memory_failed
                                ? absl::StrCat("the snapshots in memory where every rank's state "
                                               "is held, else ",
                                               from)
                                : from,
                            " once its actors are free"));
    } else {
      if (lost || damaged || memory_failed) {
        message = absl::StrCat(message, "; gave up after ", job_.restarts,
                               " restarts (failure.max_restarts is ", max_restarts_, ")");
      }
      SetState(JobState::kFailed, message);
    }
  }
  metrics_->EndJob(job_.id);
  rendezvous_->DeleteWithPrefix(absl::StrCat(job_.id, "/", job_.attempt, "/"));
  registry_->Free(job_.id);
  if (IsFinal(job_.state)) {
    v1::JobUpdate final_update;
    *final_update.mutable_job() = ToProto(job_);
    feeds_->Publish(job_.id, std::move(final_update));
    feeds_->Close(job_.id);
  }
  if (done_) done_(job_.id);
}

}  // namespace tandem::coordinator
