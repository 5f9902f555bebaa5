#include "coordinator/job_runner.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/job_record_proto.h"
#include "coordinator/laggards.h"
#include "jobspec/job_spec.h"
#include "proto/tandem/v1/actor.grpc.pb.h"
#include "rpc/channel.h"
#include "rpc/status.h"
#include "rundir/checkpoint_dir.h"
#include "rundir/run_log.h"
#include "rundir/summary.h"

namespace tandem::coordinator {

namespace fs = std::filesystem;
namespace {
constexpr char kComponent[] = "coordinator";
constexpr std::chrono::milliseconds kMargin{30000};
// AssignJob calls that the channel answers UNAVAILABLE are made this many times in all.
constexpr int kAssignAttempts = 3;
// How long a Release may take: it interrupts the command in flight, so a live actor answers at
// once.
constexpr std::chrono::seconds kReleaseTimeout{30};
// How long an unreachable actor's supervisor may take to report why it ended.
constexpr std::chrono::milliseconds kExitReportWait{1000};
using SteadyClock = std::chrono::steady_clock;
double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }
// The first multiple of `every` at or after `step`; no limit when `every` is 0.
int64_t FirstMultipleFrom(int64_t step, int64_t every) {
  return every > 0 ? (step + every - 1) / every * every : std::numeric_limits<int64_t>::max();
}
double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

struct JobRunner::Member {
  ActorEntry actor;
  v1::Role role = v1::ROLE_VISION;
  int rank = 0;
  std::unique_ptr<v1::Actor::Stub> stub;
  std::string Name() const {
    return absl::StrCat(actor.id, " (", role == v1::ROLE_VISION ? "vision" : "llm", " rank ", rank,
                        ", ", actor.address, ")");
  }
};

JobRunner::JobRunner(JobRecord job, std::vector<ActorEntry> vision, std::vector<ActorEntry> llm,
                     JobStore* store, JobFeeds* feeds, MemoryStore* rendezvous, Registry* registry,
                     Metrics* metrics, RunnerOptions options,
                     std::function<void(const std::string&)> done)
    : job_(std::move(job)),
      store_(store),
      feeds_(feeds),
      rendezvous_(rendezvous),
      registry_(registry),
      metrics_(metrics),
      options_(options),
      hold_(options.hold_dir, job_.name),
      done_(std::move(done)) {
  auto add = [&](const std::vector<ActorEntry>& group, v1::Role role) {
    for (size_t r = 0; r < group.size(); ++r) {
      auto m = std::make_unique<Member>();
      m->actor = group[r];
      m->role = role;
      m->rank = static_cast<int>(r);
      m->stub = v1::Actor::NewStub(rpc::MakeChannel(group[r].address));
      members_.push_back(std::move(m));
    }
  };
  add(vision, v1::ROLE_VISION);
  add(llm, v1::ROLE_LLM);
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
    if (stop_reason_.empty()) stop_reason_ = reason;
    suspended_ = suspended_ || suspend;
  }
  cancelled_ = true;
  hold_.Interrupt();
  ReleaseAll(reason);  // interrupts a step waiting on transfers
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
      v1::ReleaseRequest request;
      request.set_job_id(job_.id);
      request.set_reason(reason);
      v1::ReleaseResponse response;
      const grpc::Status status = members_[i]->stub->Release(
          rpc::ContextWithTimeout(kReleaseTimeout).get(), request, &response);
      // Release always succeeds on a live actor: a failure to reach it is the actor's loss.
      if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
          status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        // A supervisor that saw the process end says why, within moments.
        const std::optional<std::string> exit =
            registry_->AwaitExitReport(members_[i]->actor.address, attempt_start_, kExitReportWait);
        unreachable[i] = exit ? absl::StrCat(members_[i]->Name(), " died: ", *exit)
                              : absl::StrCat("lost contact with ", members_[i]->Name(), " (",
                                             status.error_message(), ")");
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
    threads.emplace_back([&, i] { results[i] = call(i, *members_[i]); });
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
  std::vector<StepAnswers> answers(static_cast<size_t>(last - first + 1), StepAnswers(n));
  std::vector<size_t> answered(answers.size(), 0);
  bool stop = false;           // guarded by mu
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
          v1::RunStepRequest request;
          request.set_job_id(job_.id);
          request.set_step(step);
          v1::RunStepResponse response;
          absl::Status status = rpc::FromGrpc(
              m.stub->RunStep(rpc::ContextWithTimeout(options_.command_timeout + kMargin).get(),
                              request, &response),
              absl::StrCat("step ", step));
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
          answers[step - first][i] = std::move(response);
          ++answered[step - first];
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
      changed.wait(lock, [&] { return stop || answered[step - first] == n; });
      if (answered[step - first] < n) break;
      step_answers = std::move(answers[step - first]);
    }
    status = on_step(step, step_answers);
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

absl::Status JobRunner::AssignAll(rundir::RunSummary* summary, const std::string& resume_from,
                                  int64_t resume_step) {
  std::vector<std::string> vision_addresses, llm_addresses;
  int vision = 0, llm = 0;
  for (const auto& m : members_) {
    (m->role == v1::ROLE_VISION ? vision_addresses : llm_addresses).push_back(m->actor.address);
    (m->role == v1::ROLE_VISION ? vision : llm) += 1;
  }
  const std::string prefix = absl::StrCat(job_.id, "/", job_.attempt);
  std::vector<v1::AssignJobResponse> responses(members_.size());
  RETURN_IF_ERROR(ForAll("AssignJob", [&](size_t i, Member& m) {
    v1::AssignJobRequest request;
    request.set_job_id(job_.id);
    request.set_job_json(job_.spec_json);
    request.set_spec_dir(job_.spec_dir);
    request.set_role(m.role);
    request.set_rank(m.rank);
    request.set_group_size(m.role == v1::ROLE_VISION ? vision : llm);
    for (const std::string& a : m.role == v1::ROLE_VISION ? llm_addresses : vision_addresses) {
      request.mutable_peers()->add_addresses(a);
    }
    request.set_rendezvous_prefix(
        absl::StrCat(prefix, "/", m.role == v1::ROLE_VISION ? "vision" : "llm"));
    request.set_run_dir(job_.run_dir);
    request.set_timeout_ms(options_.command_timeout.count());
    request.set_threads(job_.threads);
    request.set_attempt(job_.attempt);
    request.set_resume_from(resume_from);
    // UNAVAILABLE is the channel's (an actor's AssignJob never answers it): a connection that did
    // not open, seen once on a loaded machine with every actor alive. It is tried twice more, a
    // second apart; an actor that is gone fails the same way each time, and its heartbeats end
    // the attempt anyway.
    absl::Status assigned;
    for (int attempt = 1;; ++attempt) {
      assigned = rpc::FromGrpc(
          m.stub->AssignJob(rpc::ContextWithTimeout(options_.command_timeout + kMargin).get(),
                            request, &responses[i]),
          "AssignJob");
      if (assigned.code() != absl::StatusCode::kUnavailable || attempt == kAssignAttempts ||
          cancelled_) {
        break;
      }
      TANDEM_LOG(kWarning, kComponent) << job_.id << ": " << m.Name() << ": " << assigned.message()
                                       << "; trying again in 1 s";
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    RETURN_IF_ERROR(assigned);
    if (responses[i].step() != resume_step) {
      return absl::DataLossError(absl::StrCat("resumed at step ", responses[i].step(), " from ",
                                              resume_from, ", expected step ", resume_step));
    }
    return absl::OkStatus();
  }));
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i]->role == v1::ROLE_VISION) {
      summary->vision_parameters = responses[i].parameters();
    } else {
      summary->llm_parameters = responses[i].parameters();
      summary->vocab_size = responses[i].vocab_size();
    }
  }
  return absl::OkStatus();
}

absl::Status JobRunner::Execute() {
  ASSIGN_OR_RETURN(jobspec::JobConfig job, jobspec::ParseJobSpecJson(job_.spec_json, job_.id));
  const jobspec::ScheduleConfig& schedule = job.schedule;
  if (job_.run_dir.empty() || !fs::path(job_.run_dir).is_absolute()) {
    // Never the coordinator's working directory: its submission was not recorded whole.
    return absl::FailedPreconditionError(absl::StrCat(
        "the job's run directory '", job_.run_dir, "' is not an absolute path; submit it again"));
  }
  std::error_code ec;
  fs::create_directories(fs::path(job_.run_dir) / "checkpoints", ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot create ", job_.run_dir, ": ", ec.message()));
  auto run_path = [&](const std::string& name) { return (fs::path(job_.run_dir) / name).string(); };
  max_restarts_ = job.max_restarts;
  RETURN_IF_ERROR(WriteFileAtomically(run_path("job.json"), job_.spec_json + "\n"));
  // Where this attempt starts: the job's own last complete checkpoint, else the one its spec names.
  std::optional<rundir::CheckpointInfo> resume = rundir::LatestCheckpoint(job_.run_dir);
  if (!resume && !job.resume_from.empty()) {
    ASSIGN_OR_RETURN(resume, rundir::ReadCheckpoint(job.resume_from));
  }
  const int64_t resume_step = resume ? resume->step : 0;
  ASSIGN_OR_RETURN(rundir::MetricsLog metrics,
                   rundir::MetricsLog::OpenResumed(run_path("metrics.jsonl"), resume_step));
  if (job_.step != resume_step) {
    job_.step = resume_step;
    job_.loss = metrics.steps().empty() ? 0 : metrics.steps().back().loss;
    RETURN_IF_ERROR(store_->UpdateJob(job_));
  }

  const auto start = SteadyClock::now();
  rundir::RunSummary summary;
  RETURN_IF_ERROR(AssignAll(&summary, resume ? resume->directory : "", resume_step));
  Event(absl::StrCat("assigned: vision ", job.vision.actors, " x llm ", job.llm.actors,
                     " actors; setup took ",
                     absl::StrFormat("%.1f", Seconds(SteadyClock::now() - start)), "s"));
  if (resume) {
    Event(absl::StrCat("resumed from ", resume->directory, " at step ", resume_step,
                       " (written by vision ", resume->vision_actors, " x llm ", resume->llm_actors,
                       " actors)"));
    summary.last_checkpoint = resume->directory;
  }
  summary.samples = resume_step * schedule.global_batch;  // the job's, not only this attempt's

  summary.job_name = job.name;
  summary.run_dir = job_.run_dir;
  const auto train_start = SteadyClock::now();
  double train_seconds = 0;
  auto last_answer = SteadyClock::now();  // when the previous step's answers were all in
  // Steps run in segments that end where the coordinator has work of its own: an evaluation, a
  // checkpoint, the end. Within a segment no member waits for the coordinator between steps.
  auto record_step = [&](int64_t step, const StepAnswers& responses) -> absl::Status {
    const auto now = SteadyClock::now();
    const double step_seconds = Seconds(now - last_answer);
    last_answer = now;
    train_seconds += step_seconds;
    rundir::StepRecord record;
    record.step = step;
    StepSample sample;
    bool vision_seen = false, llm_seen = false;
    for (size_t i = 0; i < members_.size(); ++i) {
      const v1::RunStepResponse& r = responses[i];
      (members_[i]->role == v1::ROLE_LLM ? sample.llm_to_vision_bytes
                                         : sample.vision_to_llm_bytes) += r.bytes_sent();
      if (members_[i]->role == v1::ROLE_LLM) {
        record.loss += r.loss();
        if (!llm_seen) record.lr = r.lr(), record.llm_grad_norm = r.grad_norm(), llm_seen = true;
      } else if (!vision_seen) {
        record.vision_lr = r.lr(), record.vision_grad_norm = r.grad_norm(), vision_seen = true;
      }
    }
    record.grad_norm = std::hypot(record.vision_grad_norm, record.llm_grad_norm);
    record.samples_per_s = schedule.global_batch / std::max(step_seconds, 1e-9);
    record.elapsed_s = Seconds(SteadyClock::now() - train_start);
    if (!std::isfinite(record.loss)) {
      return absl::InternalError(
          absl::StrFormat("loss is %f at step %d: training diverged (lower the learning rate or "
                          "enable gradient_clipping)",
                          record.loss, step));
    }
    RETURN_IF_ERROR(metrics.Append(record));
    job_.step = step;
    job_.loss = record.loss;
    RETURN_IF_ERROR(store_->UpdateProgress(job_.id, step, record.loss));
    sample.job_id = job_.id;
    sample.name = job.name;
    sample.step = step;
    sample.steps = schedule.steps;
    sample.loss = record.loss;
    sample.step_seconds = step_seconds;
    sample.samples_per_s = record.samples_per_s;
    sample.samples = schedule.global_batch;
    metrics_->RecordStep(sample);
    summary.steps = step;
    summary.samples += schedule.global_batch;
    summary.final_loss = record.loss;
    v1::JobUpdate update;
    v1::StepMetrics* m = update.mutable_step();
    m->set_step(step);
    m->set_steps(schedule.steps);
    m->set_loss(record.loss);
    m->set_lr(record.lr);
    m->set_grad_norm(record.grad_norm);
    m->set_samples_per_s(record.samples_per_s);
    m->set_elapsed_s(record.elapsed_s);
    feeds_->Publish(job_.id, std::move(update));
    if (step == schedule.steps || step % 50 == 0) {
      RETURN_IF_ERROR(
          WriteFileAtomically(run_path("loss.svg"),
                              rundir::RenderLossSvg(job.name, metrics.steps(), metrics.evals())));
    }
    return absl::OkStatus();
  };

  for (int64_t done = job_.step; done < schedule.steps;) {
    if (cancelled_) return absl::CancelledError("cancelled");
    RETURN_IF_ERROR(AwaitHold(done));
    const int64_t first = done + 1;
    int64_t step = std::min({schedule.steps, FirstMultipleFrom(first, schedule.eval_every),
                             FirstMultipleFrom(first, schedule.checkpoint_every)});
    // A step a hold file names ends a segment too, so the job can be held right after it.
    if (const std::optional<int64_t> held = hold_.HeldStep(); held && *held >= first) {
      step = std::min(step, *held);
    }
    last_answer = SteadyClock::now();  // evaluation and checkpoints are not step time
    RETURN_IF_ERROR(RunSteps(first, step, record_step));
    done = step;
    const bool last = step == schedule.steps;
    if ((schedule.eval_every > 0 && step % schedule.eval_every == 0) || last) {
      int64_t samples = 0, exact = 0, tokens = 0, correct = 0;
      std::mutex mu;
      RETURN_IF_ERROR(ForAll("evaluation", [&](size_t i, Member& m) {
        v1::EvaluateRequest request;
        request.set_job_id(job_.id);
        request.set_step(step);
        v1::EvaluateResponse response;
        absl::Status status = rpc::FromGrpc(
            m.stub->Evaluate(rpc::ContextWithTimeout(options_.command_timeout + kMargin).get(),
                             request, &response),
            absl::StrCat("evaluation after step ", step));
        std::lock_guard<std::mutex> lock(mu);
        samples += response.samples();
        exact += response.exact();
        tokens += response.tokens();
        correct += response.correct_tokens();
        return status;
      }));
      if (samples > 0) {
        rundir::EvalRecord eval{step, static_cast<double>(exact) / samples,
                                 tokens > 0 ? static_cast<double>(correct) / tokens : 0.0};
        RETURN_IF_ERROR(metrics.Append(eval));
        summary.evaluated = true;
        summary.caption_exact_match = eval.caption_exact_match;
        summary.token_accuracy = eval.token_accuracy;
        v1::JobUpdate e;
        e.mutable_eval()->set_step(step);
        e.mutable_eval()->set_caption_exact_match(eval.caption_exact_match);
        e.mutable_eval()->set_token_accuracy(eval.token_accuracy);
        feeds_->Publish(job_.id, std::move(e));
        Event(absl::StrFormat("step %d: held-out caption exact match %.3f, token accuracy %.3f",
                              step, eval.caption_exact_match, eval.token_accuracy));
      }
    }
    if ((schedule.checkpoint_every > 0 && step % schedule.checkpoint_every == 0) || last) {
      const std::string dir = run_path("checkpoints/" + rundir::CheckpointName(step));
      RETURN_IF_ERROR(ForAll("checkpoint", [&](size_t i, Member& m) {
        v1::SaveCheckpointRequest request;
        request.set_job_id(job_.id);
        request.set_step(step);
        request.set_directory(dir);
        v1::SaveCheckpointResponse response;
        return rpc::FromGrpc(m.stub->SaveCheckpoint(
                                 rpc::ContextWithTimeout(options_.command_timeout + kMargin).get(),
                                 request, &response),
                             absl::StrCat("checkpoint of step ", step));
      }));
      // It counts once every rank of both groups saved its shard: the marker goes last.
      RETURN_IF_ERROR(
          rundir::MarkCheckpointComplete({dir, step, job.vision.actors, job.llm.actors}));
      summary.last_checkpoint = dir;
      Event(absl::StrCat("checkpoint ", dir));
    }
  }
  RETURN_IF_ERROR(ForAll("export", [&](size_t i, Member& m) {
    v1::ExportRequest request;
    request.set_job_id(job_.id);
    request.set_path(
        run_path(m.role == v1::ROLE_VISION ? "vision.safetensors" : "llm.safetensors"));
    v1::ExportResponse response;
    return rpc::FromGrpc(
        m.stub->Export(rpc::ContextWithTimeout(options_.command_timeout + kMargin).get(), request,
                       &response),
        "export");
  }));
  summary.elapsed_s = Seconds(SteadyClock::now() - start);
  summary.samples_per_s = summary.samples / std::max(train_seconds, 1e-9);
  job_.summary_json = rundir::SummaryJson(summary);
  return WriteFileAtomically(run_path("summary.json"), job_.summary_json + "\n");
}

std::string JobRunner::Laggards() const {
  std::vector<RankProgress> ranks;
  const std::vector<ActorEntry> actors = registry_->List();
  for (const auto& m : members_) {
    for (const ActorEntry& a : actors) {
      if (a.id != m->actor.id || a.job_id != job_.id) continue;
      ranks.push_back({m->role == v1::ROLE_VISION ? "vision" : "llm", m->rank,
                       absl::StrCat(a.id, ", ", a.address), a.last_collective});
    }
  }
  return DescribeLaggards(ranks);
}

void JobRunner::Run() {
  ++job_.attempt;
  SetState(JobState::kRunning, "");
  absl::Status status = Execute();
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
    if (lost && job_.restarts < max_restarts_) {
      ++job_.restarts;
      const std::optional<rundir::CheckpointInfo> checkpoint =
          rundir::LatestCheckpoint(job_.run_dir);
      SetState(JobState::kRestarting, absl::StrCat(message, "; restart ", job_.restarts, " of ",
                                                   max_restarts_, " (failure.max_restarts) from ",
                                                   checkpoint ? checkpoint->directory : "the start",
                                                   " once its actors are free"));
    } else {
      if (lost) {
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
