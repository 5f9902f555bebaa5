// One attempt of a job (job_runner.h): the runner's side of rundir::RunDriver, which holds the
// sequence (run directory, resume point, segments of steps, evaluations, checkpoints, export,
// summary) as for the colocated trainer. Here each command goes to every member actor at once.
#include <algorithm>
#include <filesystem>
#include <mutex>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/job_runner.h"
#include "data/mixture_dataset.h"
#include "jobspec/job_spec.h"
#include "proto/tandem/v1/coordinator.pb.h"
#include "rundir/checkpoint_dir.h"
#include "rundir/run_driver.h"
#include "rundir/run_log.h"

namespace tandem::coordinator {

namespace fs = std::filesystem;
namespace {
using SteadyClock = std::chrono::steady_clock;
double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

rundir::RunLoopOptions LoopOptions(const jobspec::ScheduleConfig& schedule,
                                   const data::DataConfig& data) {
  rundir::RunLoopOptions options;
  options.sources = data::MixtureNames(data);
  options.source_counts = data::MixtureCounter(data);
  options.steps = schedule.steps;
  options.global_batch = schedule.global_batch;
  options.eval_every = schedule.eval_every;
  options.checkpoint_every = schedule.checkpoint_every;
  return options;
}
}  // namespace

// The run's groups as the runner's members: each of RunGroups' commands goes to every member.
struct JobRunner::Attempt : rundir::RunGroups {
  Attempt(JobRunner& r, jobspec::JobConfig spec) : runner(r), job(std::move(spec)) {}

  absl::Status RunSteps(int64_t first, int64_t last, const StepDone& done) override {
    return runner.RunSteps(first, last, [&](int64_t step, const StepAnswers& answers) {
      rundir::StepOutcome outcome;
      sample = StepSample{};
      bool vision_seen = false, llm_seen = false;
      for (size_t i = 0; i < runner.members_.size(); ++i) {
        const ActorStepReply& r = answers[i];
        const int rank = runner.members_[i]->rank;
        const bool llm = runner.members_[i]->role == Role::kLlm;
        std::vector<double>& compute = llm ? outcome.llm_compute_s : outcome.vision_compute_s;
        std::vector<double>& planned = llm ? outcome.llm_planned : outcome.vision_planned;
        if (static_cast<int>(compute.size()) <= rank) compute.resize(rank + 1, 0.0);
        if (static_cast<int>(planned.size()) <= rank) planned.resize(rank + 1, 0.0);
        compute[rank] = r.compute_s;
        planned[rank] = r.planned;
        if (job.snapshot_every > 0) {
          std::vector<int64_t>& held =
              llm ? sample.llm_snapshot_bytes : sample.vision_snapshot_bytes;
          if (static_cast<int>(held.size()) <= rank) held.resize(rank + 1, 0);
          held[rank] = r.snapshot_bytes;
        }
        outcome.skipped_samples = std::max(outcome.skipped_samples, r.skipped_samples);
        if (runner.members_[i]->role == Role::kLlm) {
          sample.llm_to_vision_bytes += r.bytes_sent;
          outcome.llm_positions += r.positions;
          outcome.llm_padding += r.padding;
          outcome.loss += r.loss;  // each LLM rank's share of the global batch's loss
          if (!llm_seen) outcome.lr = r.lr, outcome.llm_grad_norm = r.grad_norm, llm_seen = true;
        } else {
          sample.vision_to_llm_bytes += r.bytes_sent;
          if (!vision_seen) {
            outcome.vision_lr = r.lr, outcome.vision_grad_norm = r.grad_norm, vision_seen = true;
          }
        }
      }
      return done(step, outcome);
    });
  }

  absl::StatusOr<int64_t> BeforeSegment(int64_t first, int64_t last) override {
    if (runner.cancelled_) return absl::CancelledError("cancelled");
    RETURN_IF_ERROR(runner.AwaitHold(first - 1));
    // A step a hold file names ends a segment too, so the job can be held right after it.
    if (const std::optional<int64_t> held = runner.hold_.HeldStep(); held && *held >= first) {
      last = std::min(last, *held);
    }
    return last;
  }

  absl::Status OnStep(const rundir::StepRecord& record) override {
    JobRecord& job_record = runner.job_;
    job_record.step = record.step;
    job_record.loss = record.loss;
    RETURN_IF_ERROR(runner.store_->UpdateProgress(job_record.id, record.step, record.loss));
    const int64_t steps = job.schedule.steps;
    sample.job_id = job_record.id;
    sample.name = job.name;
    sample.step = record.step;
    sample.steps = steps;
    sample.loss = record.loss;
    sample.samples_per_s = record.samples_per_s;
    sample.samples = job.schedule.global_batch;
    sample.step_seconds = record.samples_per_s > 0 ? sample.samples / record.samples_per_s : 0;
    sample.vision_imbalance = record.vision_imbalance;
    sample.llm_imbalance = record.llm_imbalance;
    sample.vision_planned_imbalance = record.vision_planned_imbalance;
    sample.llm_planned_imbalance = record.llm_planned_imbalance;
    sample.padding_waste = record.padding_waste;
    sample.samples_by_source = record.samples_by_source;
    sample.skipped_samples = record.skipped_samples;
    runner.metrics_->RecordStep(sample);
    v1::JobUpdate update;
    v1::StepMetrics* m = update.mutable_step();
    m->set_step(record.step);
    m->set_steps(steps);
    m->set_loss(record.loss);
    m->set_lr(record.lr);
    m->set_grad_norm(record.grad_norm);
    m->set_samples_per_s(record.samples_per_s);
    m->set_elapsed_s(record.elapsed_s);
    runner.feeds_->Publish(job_record.id, std::move(update));
    return absl::OkStatus();
  }

  absl::StatusOr<rundir::EvalCounts> Evaluate(int64_t step) override {
    rundir::EvalCounts counts;
    std::mutex mu;
    RETURN_IF_ERROR(runner.ForAll("evaluation", [&](size_t i, Member& m) -> absl::Status {
      absl::StatusOr<ActorEvalReply> reply = m.client->Evaluate(runner.job_.id, step);
      RETURN_IF_ERROR(Described(reply.status(), absl::StrCat("evaluation after step ", step)));
      std::lock_guard<std::mutex> lock(mu);
      counts += {reply->samples, reply->exact, reply->tokens, reply->correct_tokens};
      return absl::OkStatus();
    }));
    return counts;
  }

  void OnEval(const rundir::EvalRecord& eval) override {
    v1::JobUpdate update;
    update.mutable_eval()->set_step(eval.step);
    update.mutable_eval()->set_caption_exact_match(eval.caption_exact_match);
    update.mutable_eval()->set_token_accuracy(eval.token_accuracy);
    runner.feeds_->Publish(runner.job_.id, std::move(update));
    runner.Event(absl::StrFormat("step %d: held-out exact match %.3f, token accuracy %.3f",
                                 eval.step, eval.caption_exact_match, eval.token_accuracy));
  }

  absl::Status SaveCheckpoint(int64_t step, const std::string& directory) override {
    return runner.ForAll("checkpoint", [&](size_t i, Member& m) {
      return Described(m.client->SaveCheckpoint(runner.job_.id, step, directory),
                       absl::StrCat("checkpoint of step ", step));
    });
  }

  absl::Status FinishCheckpoint(int64_t step, const std::string& directory) override {
    return runner.ForAll("checkpoint", [&](size_t i, Member& m) {
      return Described(m.client->FinishCheckpoint(runner.job_.id, step, directory),
                       absl::StrCat("checkpoint of step ", step));
    });
  }

  void OnCheckpoint(const std::string& directory) override {
    runner.Event(absl::StrCat("checkpoint ", directory));
  }

  absl::Status Export(const std::string& vision_path, const std::string& llm_path) override {
    return runner.ForAll("export", [&](size_t i, Member& m) {
      return Described(
          m.client->Export(runner.job_.id, m.role == Role::kVision ? vision_path : llm_path),
          "export");
    });
  }

  JobRunner& runner;
  const jobspec::JobConfig job;
  std::unique_ptr<rundir::RunDriver> driver;
  StepSample sample;  // the step being recorded: its transfer bytes, then the rest
};

absl::Status JobRunner::Execute() {
  const SteadyClock::time_point start = SteadyClock::now();
  // A restart under failure.snapshot_every resumes from memory where it can.
  const int64_t memory_step =
      spec_->config.snapshot_every > 0 && job_.attempt > 1 ? PlaceFromMemory() : 0;
  ASSIGN_OR_RETURN(std::unique_ptr<Attempt> attempt, StartAttempt(memory_step));
  Attempt& a = *attempt;
  rundir::RunDriver& driver = *a.driver;
  const int64_t resume_step = driver.loop().first_step() - 1;
  const std::optional<rundir::CheckpointInfo>& resume = driver.resume_point();
  const bool from_memory = driver.resumes_from_memory();
  if (memory_step > 0 && !from_memory) {
    Event(absl::StrCat("metrics.jsonl does not hold every step up to ", memory_step,
                       ", the step in memory: the restart resumes from disk"));
  }
  const absl::Status assigned =
      AssignAll(&driver.summary(), resume ? resume->directory : "", resume_step, from_memory);
  // A checkpoint of the job's own that its actors cannot load: the next attempt passes over it.
  if (from_memory) resumed_from_memory_ = resume_step;
  if (!assigned.ok() && !from_memory && resume && driver.resumes_own_checkpoint() &&
      absl::StrContains(assigned.message(), resume->directory)) {
    RETURN_IF_ERROR(
        rundir::MarkCheckpointDamaged(resume->directory, std::string(assigned.message())));
    damaged_checkpoint_ = resume->directory;
    Event(absl::StrCat("checkpoint ", resume->directory, " cannot be loaded: marked damaged"));
  }
  RETURN_IF_ERROR(assigned);
  Event(absl::StrCat("assigned: vision ", a.job.vision.actors, " x llm ", a.job.llm.actors,
                     " actors; setup took ",
                     absl::StrFormat("%.1f", Seconds(SteadyClock::now() - start)), "s"));
  if (from_memory) {
    Event(absl::StrCat("resumed from memory at step ", resume_step, ": ",
                       memory_copies_.empty() ? "every rank from its own snapshot"
                                              : absl::StrCat(memory_copies_,
                                                             ", the others from "
                                                             "their own snapshots"),
                       " (failure.snapshot_every)"));
  } else if (resume) {
    Event(absl::StrCat("resumed from ", resume->directory, " at step ", resume_step,
                       " (written by vision ", resume->vision_actors, " x llm ", resume->llm_actors,
                       " actors)"));
  }
  driver.summary().job_name = a.job.name;
  driver.summary().run_dir = job_.run_dir;
  ASSIGN_OR_RETURN(const rundir::RunSummary summary, driver.Run(a, start));
  job_.summary_json = rundir::SummaryJson(summary);
  return absl::OkStatus();
}

absl::Status JobRunner::CheckRunDir() const {
  if (job_.run_dir.empty() || !fs::path(job_.run_dir).is_absolute()) {
    // Never the coordinator's working directory: its submission was not recorded whole.
    return absl::FailedPreconditionError(absl::StrCat(
        "the job's run directory '", job_.run_dir, "' is not an absolute path; submit it again"));
  }
  return absl::OkStatus();
}

int64_t JobRunner::PlaceFromMemory() {
  std::vector<SnapshotHoldings> held(members_.size());
  const absl::Status asked = ForAll("HeldSnapshots", [&](size_t i, Member& m) -> absl::Status {
    absl::StatusOr<SnapshotHoldings> answer = m.client->HeldSnapshots(job_.id);
    if (answer.ok()) held[i] = *std::move(answer);
    return absl::OkStatus();  // an actor that cannot say holds nothing
  });
  if (!asked.ok()) return 0;
  std::vector<SnapshotHoldings> vision, llm;
  std::vector<Member*> vision_members, llm_members;
  for (size_t i = 0; i < members_.size(); ++i) {
    const bool is_vision = members_[i]->role == Role::kVision;
    (is_vision ? vision : llm).push_back(held[i]);
    (is_vision ? vision_members : llm_members).push_back(members_[i].get());
  }
  const std::optional<rundir::CheckpointInfo> checkpoint = rundir::LatestCheckpoint(job_.run_dir);
  // A step whose answers did not all reach the runner before the failure has no record: the run
  // cannot resume after it.
  std::vector<rundir::StepRecord> steps;
  std::vector<rundir::EvalRecord> evals;
  const fs::path metrics = fs::path(job_.run_dir) / "metrics.jsonl";
  if (fs::exists(metrics) && !rundir::ReadMetrics(metrics.string(), &steps, &evals).ok()) {
    steps.clear();
  }
  const std::optional<MemoryResumePlan> plan = PlanMemoryResume(
      vision, llm, checkpoint ? checkpoint->step : 0, steps.empty() ? 0 : steps.back().step);
  if (!plan) {
    Event("no step's state is whole in the actors' memory: the restart resumes from disk");
    return 0;
  }
  for (size_t i = 0; i < vision_members.size(); ++i) {
    vision_members[i]->rank = plan->vision_ranks[i];
    vision_members[i]->restore = plan->vision[i];
  }
  for (size_t i = 0; i < llm_members.size(); ++i) {
    llm_members[i]->rank = plan->llm_ranks[i];
    llm_members[i]->restore = plan->llm[i];
  }
  memory_copies_ = plan->copies;
  return plan->step;
}

absl::StatusOr<std::unique_ptr<JobRunner::Attempt>> JobRunner::StartAttempt(int64_t memory_step) {
  auto attempt = std::make_unique<Attempt>(*this, spec_->config);
  const jobspec::JobConfig& job = attempt->job;
  max_restarts_ = job.max_restarts;
  RETURN_IF_ERROR(CheckRunDir());
  rundir::RunDriverOptions options;
  options.run_dir = job_.run_dir;
  options.holder = absl::StrCat("coordinator job ", job_.id, " (", job_.name, ")");
  options.job_json = spec_->json;
  options.job_name = job.name;
  options.loop = LoopOptions(job.schedule, job.data);
  options.resume_from = job.resume_from;
  options.vision_actors = job.vision.actors;
  options.llm_actors = job.llm.actors;
  options.async_checkpoints = job.async_checkpoints;
  options.memory_step = memory_step;
  ASSIGN_OR_RETURN(attempt->driver, rundir::RunDriver::Open(options));
  rundir::RunDriver& driver = *attempt->driver;
  if (driver.leftovers() > 0) {
    Event(absl::StrCat("removed ", driver.leftovers(), " temporary files an earlier attempt left"));
  }
  const int64_t resume_step = driver.loop().first_step() - 1;
  if (job_.step != resume_step) {
    job_.step = resume_step;
    job_.loss = driver.metrics().steps().empty() ? 0 : driver.metrics().steps().back().loss;
    RETURN_IF_ERROR(store_->UpdateJob(job_));
  }
  return attempt;
}

absl::Status JobRunner::AssignAll(rundir::RunSummary* summary, const std::string& resume_from,
                                  int64_t resume_step, bool from_memory) {
  // Each group's addresses by rank.
  std::vector<std::string> vision_addresses, llm_addresses;
  for (const auto& m : members_) {
    std::vector<std::string>& addresses =
        m->role == Role::kVision ? vision_addresses : llm_addresses;
    if (static_cast<int>(addresses.size()) <= m->rank) addresses.resize(m->rank + 1);
    addresses[m->rank] = m->actor.address;
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
    assignment.spec = spec_->spec;
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
    if (from_memory) assignment.restore = m.restore;
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

}  // namespace tandem::coordinator
