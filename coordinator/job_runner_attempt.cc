// One attempt of a job (job_runner.h): the run directory, the resume point, the assignment, the
// segments of steps with the evaluations and checkpoints between them, the final export and
// summary. What to do between steps is rundir::RunLoop's decision, as in the colocated trainer.
#include <algorithm>
#include <filesystem>
#include <mutex>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "coordinator/job_runner.h"
#include "jobspec/job_spec.h"
#include "proto/tandem/v1/coordinator.pb.h"
#include "rundir/checkpoint_dir.h"
#include "rundir/run_dir_lock.h"
#include "rundir/run_log.h"
#include "rundir/run_loop.h"

namespace tandem::coordinator {

namespace fs = std::filesystem;
namespace {
using SteadyClock = std::chrono::steady_clock;
double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

rundir::RunLoopOptions LoopOptions(const jobspec::ScheduleConfig& schedule) {
  rundir::RunLoopOptions options;
  options.steps = schedule.steps;
  options.global_batch = schedule.global_batch;
  options.eval_every = schedule.eval_every;
  options.checkpoint_every = schedule.checkpoint_every;
  options.has_eval_set = true;  // the actors know; without one they answer no samples
  return options;
}
}  // namespace

struct JobRunner::Attempt {
  Attempt(std::string dir, rundir::RunDirLock dir_lock, jobspec::JobConfig spec,
          std::optional<rundir::CheckpointInfo> resume_point, rundir::MetricsLog log)
      : run_dir(std::move(dir)),
        lock(std::move(dir_lock)),
        job(std::move(spec)),
        resume(std::move(resume_point)),
        metrics(std::move(log)),
        loop(LoopOptions(job.schedule), resume ? resume->step : 0) {}

  std::string RunPath(const std::string& name) const {
    return (fs::path(run_dir) / name).string();
  }

  const std::string run_dir;
  const rundir::RunDirLock lock;  // held while the attempt writes run_dir
  const jobspec::JobConfig job;
  const std::optional<rundir::CheckpointInfo> resume;  // nullopt: from scratch
  bool resume_is_own = false;  // resume is one of the job's checkpoints, not the spec's resume_from
  rundir::MetricsLog metrics;
  rundir::RunLoop loop;
  SteadyClock::time_point start;        // before the assignment: the summary's elapsed_s
  SteadyClock::time_point train_start;  // after it: the records' elapsed_s
  SteadyClock::time_point last_answer;  // when the previous step's answers were all in
};

absl::Status JobRunner::Execute() {
  ASSIGN_OR_RETURN(std::unique_ptr<Attempt> attempt, StartAttempt());
  Attempt& a = *attempt;
  a.start = SteadyClock::now();
  const int64_t resume_step = a.loop.first_step() - 1;
  const absl::Status assigned =
      AssignAll(&a.loop.summary(), a.resume ? a.resume->directory : "", resume_step);
  // A checkpoint of the job's own that its actors cannot load: the next attempt passes over it.
  if (!assigned.ok() && a.resume && a.resume_is_own &&
      absl::StrContains(assigned.message(), a.resume->directory)) {
    RETURN_IF_ERROR(rundir::MarkCheckpointDamaged(a.resume->directory, std::string(assigned.message())));
    damaged_checkpoint_ = a.resume->directory;
    Event(absl::StrCat("checkpoint ", a.resume->directory, " cannot be loaded: marked damaged"));
  }
  RETURN_IF_ERROR(assigned);
  Event(absl::StrCat("assigned: vision ", a.job.vision.actors, " x llm ", a.job.llm.actors,
                     " actors; setup took ",
                     absl::StrFormat("%.1f", Seconds(SteadyClock::now() - a.start)), "s"));
  if (a.resume) {
    Event(absl::StrCat("resumed from ", a.resume->directory, " at step ", resume_step,
                       " (written by vision ", a.resume->vision_actors, " x llm ",
                       a.resume->llm_actors, " actors)"));
    a.loop.RecordCheckpoint(a.resume->directory);
  }
  a.loop.summary().job_name = a.job.name;
  a.loop.summary().run_dir = job_.run_dir;
  RETURN_IF_ERROR(TrainSegments(a));
  return Finish(a);
}

absl::Status JobRunner::CreateRunDir() {
  if (job_.run_dir.empty() || !fs::path(job_.run_dir).is_absolute()) {
    // Never the coordinator's working directory: its submission was not recorded whole.
    return absl::FailedPreconditionError(absl::StrCat(
        "the job's run directory '", job_.run_dir, "' is not an absolute path; submit it again"));
  }
  std::error_code ec;
  fs::create_directories(fs::path(job_.run_dir) / "checkpoints", ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot create ", job_.run_dir, ": ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<JobRunner::Attempt>> JobRunner::StartAttempt() {
  ASSIGN_OR_RETURN(jobspec::JobConfig job, jobspec::ParseJobSpecJson(job_.spec_json, job_.id));
  RETURN_IF_ERROR(CreateRunDir());
  ASSIGN_OR_RETURN(rundir::RunDirLock lock, rundir::RunDirLock::Acquire(job_.run_dir, absl::StrCat("coordinator job ", job_.id, " (", job_.name, ")")));
  ASSIGN_OR_RETURN(const int leftovers, lock.RemoveLeftoverTempFiles());
  if (leftovers > 0) Event(absl::StrCat("removed ", leftovers, " temporary files an earlier attempt left"));
  max_restarts_ = job.max_restarts;
  RETURN_IF_ERROR(
      WriteFileAtomically((fs::path(job_.run_dir) / "job.json").string(), job_.spec_json + "\n"));
  // Where this attempt starts: the job's own last complete checkpoint, else the one its spec names.
  std::optional<rundir::CheckpointInfo> resume = rundir::LatestCheckpoint(job_.run_dir);
  const bool own = resume.has_value();
  if (!resume && !job.resume_from.empty()) {
    ASSIGN_OR_RETURN(resume, rundir::ReadCheckpoint(job.resume_from));
  }
  const int64_t resume_step = resume ? resume->step : 0;
  ASSIGN_OR_RETURN(rundir::MetricsLog metrics,
                   rundir::MetricsLog::OpenResumed(
                       (fs::path(job_.run_dir) / "metrics.jsonl").string(), resume_step));
  if (job_.step != resume_step) {
    job_.step = resume_step;
    job_.loss = metrics.steps().empty() ? 0 : metrics.steps().back().loss;
    RETURN_IF_ERROR(store_->UpdateJob(job_));
  }
  auto attempt = std::make_unique<Attempt>(job_.run_dir, std::move(lock), std::move(job),
                                           std::move(resume), std::move(metrics));
  attempt->resume_is_own = own;
  return attempt;
}

absl::Status JobRunner::AssignAll(rundir::RunSummary* summary, const std::string& resume_from,
                                  int64_t resume_step) {
  std::vector<std::string> vision_addresses, llm_addresses;
  for (const auto& m : members_) {
    (m->role == Role::kVision ? vision_addresses : llm_addresses).push_back(m->actor.address);
  }
  const std::string prefix = absl::StrCat(job_.id, "/", job_.attempt);
  std::vector<ActorAssignReply> replies(members_.size());
  // Set before cancelled_ is read, as Stop sets cancelled_ before reading it: a Stop either finds
  // the calls under way and cancels them, or is seen here first.
  assigning_ = true;
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag = false; }
  } done{assigning_};
  if (cancelled_) return absl::CancelledError("cancelled");
  RETURN_IF_ERROR(ForAll("AssignJob", [&](size_t i, Member& m) -> absl::Status {
    const bool vision = m.role == Role::kVision;
    ActorAssignment assignment;
    assignment.job_id = job_.id;
    assignment.job_json = job_.spec_json;
    assignment.spec_dir = job_.spec_dir;
    assignment.role = m.role;
    assignment.rank = m.rank;
    assignment.group_size = static_cast<int>((vision ? vision_addresses : llm_addresses).size());
    assignment.peers = vision ? llm_addresses : vision_addresses;
    assignment.rendezvous_prefix = absl::StrCat(prefix, "/", RoleName(m.role));
    assignment.run_dir = job_.run_dir;
    assignment.timeout = options_.command_timeout;
    assignment.threads = job_.threads;
    assignment.attempt = job_.attempt;
    assignment.resume_from = resume_from;
    absl::StatusOr<ActorAssignReply> reply = m.client->AssignJob(assignment);
    RETURN_IF_ERROR(Described(reply.status(), "AssignJob"));
    replies[i] = *reply;
    if (reply->step != resume_step) {
      return absl::DataLossError(absl::StrCat("resumed at step ", reply->step, " from ",
                                              resume_from, ", expected step ", resume_step));
    }
    return absl::OkStatus();
  }));
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i]->role == Role::kVision) {
      summary->vision_parameters = replies[i].parameters;
    } else {
      summary->llm_parameters = replies[i].parameters;
      summary->vocab_size = replies[i].vocab_size;
    }
  }
  return absl::OkStatus();
}

// Steps run in segments that end where the coordinator has work of its own: an evaluation, a
// checkpoint, the end. Within a segment no member waits for the coordinator between steps.
absl::Status JobRunner::TrainSegments(Attempt& a) {
  a.train_start = SteadyClock::now();
  a.last_answer = a.train_start;
  const int64_t steps = a.loop.options().steps;
  for (int64_t done = a.loop.first_step() - 1; done < steps;) {
    if (cancelled_) return absl::CancelledError("cancelled");
    RETURN_IF_ERROR(AwaitHold(done));
    const int64_t first = done + 1;
    int64_t last = a.loop.SegmentEnd(first);
    // A step a hold file names ends a segment too, so the job can be held right after it.
    if (const std::optional<int64_t> held = hold_.HeldStep(); held && *held >= first) {
      last = std::min(last, *held);
    }
    a.last_answer = SteadyClock::now();  // evaluation and checkpoints are not step time
    RETURN_IF_ERROR(RunSteps(first, last, [&](int64_t step, const StepAnswers& answers) {
      return RecordStep(a, step, answers);
    }));
    done = last;
    if (a.loop.ShouldEvaluate(last)) RETURN_IF_ERROR(EvaluateAll(a, last));
    if (a.loop.ShouldCheckpoint(last)) RETURN_IF_ERROR(CheckpointAll(a, last));
  }
  return absl::OkStatus();
}

absl::Status JobRunner::RecordStep(Attempt& a, int64_t step, const StepAnswers& answers) {
  const auto now = SteadyClock::now();
  const double step_seconds = Seconds(now - a.last_answer);
  a.last_answer = now;
  rundir::StepOutcome outcome;
  StepSample sample;
  bool vision_seen = false, llm_seen = false;
  for (size_t i = 0; i < members_.size(); ++i) {
    const ActorStepReply& r = answers[i];
    if (members_[i]->role == Role::kLlm) {
      sample.llm_to_vision_bytes += r.bytes_sent;
      outcome.loss += r.loss;  // each LLM rank's share of the global batch's loss
      if (!llm_seen) outcome.lr = r.lr, outcome.llm_grad_norm = r.grad_norm, llm_seen = true;
    } else {
      sample.vision_to_llm_bytes += r.bytes_sent;
      if (!vision_seen) {
        outcome.vision_lr = r.lr, outcome.vision_grad_norm = r.grad_norm, vision_seen = true;
      }
    }
  }
  ASSIGN_OR_RETURN(const rundir::StepRecord record,
                   a.loop.RecordStep(step, outcome, step_seconds,
                                     Seconds(SteadyClock::now() - a.train_start)));
  RETURN_IF_ERROR(a.metrics.Append(record));
  job_.step = step;
  job_.loss = record.loss;
  RETURN_IF_ERROR(store_->UpdateProgress(job_.id, step, record.loss));
  const int64_t steps = a.loop.options().steps;
  sample.job_id = job_.id;
  sample.name = a.job.name;
  sample.step = step;
  sample.steps = steps;
  sample.loss = record.loss;
  sample.step_seconds = step_seconds;
  sample.samples_per_s = record.samples_per_s;
  sample.samples = a.loop.options().global_batch;
  metrics_->RecordStep(sample);
  v1::JobUpdate update;
  v1::StepMetrics* m = update.mutable_step();
  m->set_step(step);
  m->set_steps(steps);
  m->set_loss(record.loss);
  m->set_lr(record.lr);
  m->set_grad_norm(record.grad_norm);
  m->set_samples_per_s(record.samples_per_s);
  m->set_elapsed_s(record.elapsed_s);
  feeds_->Publish(job_.id, std::move(update));
  if (a.loop.ShouldWritePlot(step)) {
    RETURN_IF_ERROR(WriteFileAtomically(
        a.RunPath("loss.svg"),
        rundir::RenderLossSvg(a.job.name, a.metrics.steps(), a.metrics.evals())));
  }
  return absl::OkStatus();
}

absl::Status JobRunner::EvaluateAll(Attempt& a, int64_t step) {
  int64_t samples = 0, exact = 0, tokens = 0, correct = 0;
  std::mutex mu;
  RETURN_IF_ERROR(ForAll("evaluation", [&](size_t i, Member& m) -> absl::Status {
    absl::StatusOr<ActorEvalReply> reply = m.client->Evaluate(job_.id, step);
    RETURN_IF_ERROR(Described(reply.status(), absl::StrCat("evaluation after step ", step)));
    std::lock_guard<std::mutex> lock(mu);
    samples += reply->samples;
    exact += reply->exact;
    tokens += reply->tokens;
    correct += reply->correct_tokens;
    return absl::OkStatus();
  }));
  if (samples == 0) return absl::OkStatus();  // the job has no held-out set
  const rundir::EvalRecord eval = rundir::EvalRecordOf(step, samples, exact, tokens, correct);
  RETURN_IF_ERROR(a.metrics.Append(eval));
  a.loop.RecordEval(eval);
  v1::JobUpdate update;
  update.mutable_eval()->set_step(step);
  update.mutable_eval()->set_caption_exact_match(eval.caption_exact_match);
  update.mutable_eval()->set_token_accuracy(eval.token_accuracy);
  feeds_->Publish(job_.id, std::move(update));
  Event(absl::StrFormat("step %d: held-out exact match %.3f, token accuracy %.3f", step,
                        eval.caption_exact_match, eval.token_accuracy));
  return absl::OkStatus();
}

absl::Status JobRunner::CheckpointAll(Attempt& a, int64_t step) {
  const std::string dir = a.RunPath("checkpoints/" + rundir::CheckpointName(step));
  RETURN_IF_ERROR(ForAll("checkpoint", [&](size_t i, Member& m) {
    return Described(m.client->SaveCheckpoint(job_.id, step, dir),
                     absl::StrCat("checkpoint of step ", step));
  }));
  // The records up to this step are on disk before the checkpoint counts, so a resume from it after
  // a power loss finds them. It counts once every rank of both groups saved its shard: the marker
  // goes last.
  RETURN_IF_ERROR(a.metrics.Sync());
  RETURN_IF_ERROR(
      rundir::MarkCheckpointComplete({dir, step, a.job.vision.actors, a.job.llm.actors}));
  a.loop.RecordCheckpoint(dir);
  Event(absl::StrCat("checkpoint ", dir));
  return absl::OkStatus();
}

absl::Status JobRunner::Finish(Attempt& a) {
  RETURN_IF_ERROR(ForAll("export", [&](size_t i, Member& m) {
    const char* file = m.role == Role::kVision ? "vision.safetensors" : "llm.safetensors";
    return Described(m.client->Export(job_.id, a.RunPath(file)), "export");
  }));
  job_.summary_json = rundir::SummaryJson(a.loop.Finish(Seconds(SteadyClock::now() - a.start)));
  return WriteFileAtomically(a.RunPath("summary.json"), job_.summary_json + "\n");
}

}  // namespace tandem::coordinator
