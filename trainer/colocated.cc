// The colocated trainer (colocated.h): both stages of the step in one process.
#include "trainer/colocated.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data/mixture_dataset.h"
#include "engine/communicator.h"
#include "engine/engine.h"
#include "hf/pretrained_job.h"
#include "jobspec/job_spec.h"
#include "jobspec/memory_estimate.h"
#include "platform/device.h"
#include "platform/trace.h"
#include "rundir/checkpoint_dir.h"
#include "rundir/new_run.h"
#include "rundir/progress.h"
#include "rundir/run_driver.h"
#include "rundir/run_log.h"
#include "step/stage.h"
#include "trainer/fiber.h"
#include "transport/in_process.h"

namespace tandem::trainer {
namespace {

constexpr char kComponent[] = "trainer";
// Transfers and collectives of a colocated run wait this long at most; a failed stage aborts the
// other's waits at once (InProcessFabric::Abort), so only a stage that stops answering reaches it.
constexpr std::chrono::milliseconds kTimeout{300000};

using Clock = std::chrono::steady_clock;

// The colocated placement of a run: rundir::RunDriver drives the sequence; the commands run on
// both stages at once, each a fiber of this thread.
class ColocatedRun : public rundir::RunGroups {
 public:
  ColocatedRun(const jobspec::ResolvedJobSpec& job, const RunOptions& options)
      : job_(job.config),
        job_json_(job.json),
        options_(options),
        printer_(options.progress, options.interactive) {}

  absl::StatusOr<rundir::RunSummary> Run() {
    RETURN_IF_ERROR(Setup());
    rundir::RunSummary& summary = driver_->summary();
    summary.job_name = job_.name;
    summary.run_dir = options_.run_dir;
    summary.vision_parameters = vision_->parameters();
    summary.llm_parameters = llm_->parameters();
    summary.vocab_size = llm_->data().text->vocab_size();
    absl::StatusOr<rundir::RunSummary> result = driver_->Run(*this, Clock::now());
    printer_.Finish();
    return result;
  }

  // rundir::RunGroups
  absl::Status RunSteps(int64_t first, int64_t last, const StepDone& done) override;
  absl::StatusOr<rundir::EvalCounts> Evaluate(int64_t step) override;
  absl::Status SaveCheckpoint(int64_t step, const std::string& directory) override;
  absl::Status FinishCheckpoint(int64_t step, const std::string& directory) override;
  absl::Status Export(const std::string& vision_path, const std::string& llm_path) override;
  absl::Status OnStep(const rundir::StepRecord& record) override;
  void OnEvaluating(int64_t step) override;
  void OnEval(const rundir::EvalRecord& eval) override;

 private:
  absl::Status Setup();
  // ResourceExhausted, naming the fields, when both groups' estimated memory
  // (jobspec/memory_estimate.h) exceeds the device's (platform::DeviceMemoryBytes). `sized` is the
  // job with its pretrained models' sizes resolved.
  absl::Status CheckMemory(const jobspec::JobConfig& sized) const;
  // Runs `command` on both stages at once, each a fiber of this thread that gives the thread to
  // the other while it waits on a transfer, as the coordinator runs a command on both groups. The
  // first to fail aborts the other's transfers; its error is the one returned.
  absl::Status Both(const std::function<absl::Status(step::Stage&)>& command);
  // Loads the driver's resume point into both stages.
  absl::Status Resume();

  jobspec::JobConfig job_;  // a copy: Setup resolves the pretrained models' shapes into it
  std::string job_json_;    // job.json
  RunOptions options_;
  std::unique_ptr<rundir::RunDriver> driver_;
  std::unique_ptr<transport::InProcessFabric> fabric_;
  Fiber vision_fiber_, llm_fiber_;
  Fiber* running_ = nullptr;  // the fiber Both resumed last
  std::unique_ptr<step::Stage> vision_, llm_;
  rundir::ProgressPrinter printer_;
  double smoothed_rate_ = 0;
  double last_loss_ = 0;
  double last_elapsed_s_ = 0;
};

absl::Status ColocatedRun::CheckMemory(const jobspec::JobConfig& sized) const {
  const int64_t memory = platform::DeviceMemoryBytes(options_.device);
  if (memory <= 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const jobspec::MemoryEstimate vision,
                   jobspec::EstimateGroupMemory(sized, Role::kVision));
  ASSIGN_OR_RETURN(const jobspec::MemoryEstimate llm,
                   jobspec::EstimateGroupMemory(sized, Role::kLlm));
  if (vision.total() + llm.total() <= memory) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the job needs an estimated ", jobspec::FormatBytes(vision.total() + llm.total()),
      " in one process, more than the ", jobspec::FormatBytes(memory), " of ", options_.device,
      " here: vision needs ", jobspec::DescribeEstimate(vision, sized), "; llm needs ",
      jobspec::DescribeEstimate(llm, sized)));
}

absl::Status ColocatedRun::Setup() {
  RETURN_IF_ERROR(rundir::CheckRunDirIsNew(options_.run_dir));
  // Pretrained models' shapes, read once; job.json keeps the spec as written.
  jobspec::JobConfig sized = job_;
  RETURN_IF_ERROR(hf::ResolvePretrainedModels(sized));
  // Before anything is written: a job that cannot fit leaves no run directory behind.
  RETURN_IF_ERROR(CheckMemory(sized));
  const jobspec::ScheduleConfig& schedule = job_.schedule;
  rundir::RunDriverOptions run;
  run.run_dir = options_.run_dir;
  run.holder = absl::StrCat("tandem run --colocated (", job_.name, ")");
  run.job_json = job_json_;
  run.job_name = job_.name;
  run.loop.steps = schedule.steps;
  run.loop.global_batch = schedule.global_batch;
  run.loop.eval_every = schedule.eval_every;
  run.loop.checkpoint_every = schedule.checkpoint_every;
  run.loop.sources = data::MixtureNames(job_.data);
  run.loop.source_counts = data::MixtureCounter(job_.data);
  run.resume_from = job_.resume_from;
  run.async_checkpoints = job_.async_checkpoints;
  ASSIGN_OR_RETURN(driver_, rundir::RunDriver::Open(run));
  if (options_.threads > 0) at::set_num_threads(options_.threads);

  job_ = std::move(sized);
  ASSIGN_OR_RETURN(std::shared_ptr<const step::JobData> data,
                   step::OpenJobData(job_, job_.resume_from));
  fabric_ = std::make_unique<transport::InProcessFabric>("colocated", 1, 1, kTimeout,
                                                         [this] { running_->Yield(); });
  step::Placement placement;
  placement.transfer_key = "colocated";
  placement.timeout = kTimeout;
  try {
    placement.device = c10::Device(options_.device);
    ASSIGN_OR_RETURN(vision_,
                     step::CreateVisionStage(job_, data, placement,
                                             engine::CreateSingleRankCommunicator("vision"),
                                             fabric_->Endpoint(0, 0)));
    placement.run_dir = options_.run_dir;  // the LLM stage writes tokenizer.json
    ASSIGN_OR_RETURN(llm_, step::CreateLlmStage(job_, data, placement,
                                                engine::CreateSingleRankCommunicator("llm"),
                                                fabric_->Endpoint(1, 0)));
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot build the models: ", e.what_without_backtrace()));
  }
  if (driver_->resume_point()) RETURN_IF_ERROR(Resume());

  TANDEM_LOG(kInfo, kComponent) << job_.name << ": colocated run in " << options_.run_dir
                                << ", vision " << vision_->parameters() << " and llm "
                                << llm_->parameters() << " parameters, vocabulary "
                                << data->text->vocab_size() << ", " << data->train_samples()
                                << " training samples";
  return absl::OkStatus();
}

absl::Status ColocatedRun::Both(const std::function<absl::Status(step::Stage&)>& command) {
  absl::Status first;  // the first failure
  auto body = [&](step::Stage* stage) {
    return [&command, &first, this, stage] {
      absl::Status status;
      try {
        status = command(*stage);
      } catch (const std::exception& e) {
        status = step::TorchError(stage->group(), e);
      }
      if (!status.ok() && first.ok()) {
        first = status;
        fabric_->Abort();  // the other stage's waits end now
      }
    };
  };
  vision_fiber_.Start(body(vision_.get()));
  llm_fiber_.Start(body(llm_.get()));
  while (!vision_fiber_.finished() || !llm_fiber_.finished()) {
    // The LLM stage first: it posts the step's embedding buffers before the vision stage sends
    // into them, so the sends land at once instead of on a thread of their own.
    for (Fiber* fiber : {&llm_fiber_, &vision_fiber_}) {
      if (fiber->finished()) continue;
      running_ = fiber;
      fiber->Resume();
    }
  }
  running_ = nullptr;
  return first;
}

absl::Status ColocatedRun::Resume() {
  const rundir::CheckpointInfo& checkpoint = *driver_->resume_point();
  ASSIGN_OR_RETURN(step::ResumePoint vision, vision_->Resume(checkpoint.directory));
  ASSIGN_OR_RETURN(step::ResumePoint llm, llm_->Resume(checkpoint.directory));
  if (vision.step != checkpoint.step || llm.step != checkpoint.step ||
      !(vision.position == llm.position)) {
    return absl::DataLossError(absl::StrCat(
        "resume_from: ", checkpoint.directory, ": its groups disagree (vision at step ",
        vision.step, ", llm at step ", llm.step, ", marker at step ", checkpoint.step, ")"));
  }
  TANDEM_LOG(kInfo, kComponent) << job_.name << ": resumed from " << checkpoint.directory
                                << " (written by " << checkpoint.vision_actors << " vision x "
                                << checkpoint.llm_actors << " llm actors)";
  return absl::OkStatus();
}

absl::Status ColocatedRun::RunSteps(int64_t first, int64_t last, const StepDone& done) {
  for (int64_t step = first; step <= last; ++step) {
    if (step == options_.profile_first)
      RETURN_IF_ERROR(platform::StartTrace(options_.device.rfind("cuda", 0) == 0));
    rundir::StepOutcome outcome;
    RETURN_IF_ERROR(Both([&](step::Stage& stage) -> absl::Status {
      ASSIGN_OR_RETURN(step::StepResult result, stage.RunStep(step));
      if (&stage == llm_.get()) {
        outcome.loss = result.loss;
        outcome.llm_compute_s = {result.compute_s};
        outcome.llm_planned = {result.planned};
        outcome.llm_positions = result.positions;
        outcome.llm_padding = result.padding;
      } else {
        outcome.vision_compute_s = {result.compute_s};
        outcome.vision_planned = {result.planned};
        outcome.skipped_samples = result.skipped_samples;
      }
      return absl::OkStatus();
    }));
    outcome.lr = llm_->engine().last_lr();
    outcome.vision_lr = vision_->engine().last_lr();
    outcome.vision_grad_norm = vision_->engine().last_grad_norm();
    outcome.llm_grad_norm = llm_->engine().last_grad_norm();
    RETURN_IF_ERROR(done(step, outcome));
    if (step == options_.profile_last) {
      const std::string trace = driver_->RunPath("trace.json");
      RETURN_IF_ERROR(platform::SaveTrace(trace));
      TANDEM_LOG(kInfo, kComponent) << job_.name << ": steps " << options_.profile_first << " to "
                                    << step << " traced into " << trace;
    }
  }
  return absl::OkStatus();
}

absl::Status ColocatedRun::OnStep(const rundir::StepRecord& record) {
  smoothed_rate_ = record.step == driver_->loop().first_step()
                       ? record.samples_per_s
                       : 0.9 * smoothed_rate_ + 0.1 * record.samples_per_s;
  last_loss_ = record.loss;
  last_elapsed_s_ = record.elapsed_s;
  printer_.Update(
      {record.step, job_.schedule.steps, record.loss, smoothed_rate_, record.elapsed_s, ""});
  return absl::OkStatus();
}

void ColocatedRun::OnEvaluating(int64_t step) {
  printer_.Update(
      {step, job_.schedule.steps, last_loss_, smoothed_rate_, last_elapsed_s_, "evaluating"});
}

void ColocatedRun::OnEval(const rundir::EvalRecord& eval) {
  printer_.Finish();
  TANDEM_LOG(kInfo, kComponent) << job_.name << ": step " << eval.step << " held-out exact match "
                                << absl::StrFormat("%.3f", eval.caption_exact_match)
                                << ", token accuracy "
                                << absl::StrFormat("%.3f", eval.token_accuracy);
}

absl::StatusOr<rundir::EvalCounts> ColocatedRun::Evaluate(int64_t step) {
  step::EvalCounts counts;
  RETURN_IF_ERROR(Both([&](step::Stage& stage) -> absl::Status {
    ASSIGN_OR_RETURN(step::EvalCounts mine, stage.Evaluate(step));
    if (&stage == llm_.get()) counts = mine;
    return absl::OkStatus();
  }));
  return counts;
}

absl::Status ColocatedRun::SaveCheckpoint(int64_t step, const std::string& directory) {
  RETURN_IF_ERROR(vision_->SaveCheckpoint(step, directory));
  return llm_->SaveCheckpoint(step, directory);
}

absl::Status ColocatedRun::FinishCheckpoint(int64_t step, const std::string& directory) {
  RETURN_IF_ERROR(vision_->FinishCheckpoint(step, directory));
  return llm_->FinishCheckpoint(step, directory);
}

absl::Status ColocatedRun::Export(const std::string& vision_path, const std::string& llm_path) {
  printer_.Finish();
  RETURN_IF_ERROR(vision_->Export(vision_path));
  return llm_->Export(llm_path);
}

}  // namespace

absl::StatusOr<rundir::RunSummary> RunColocated(const jobspec::ResolvedJobSpec& resolved,
                                                const RunOptions& options) {
  const jobspec::JobConfig& job = resolved.config;
  if (job.vision.actors != 1 || job.llm.actors != 1) {
    TANDEM_LOG(kInfo, kComponent) << job.name
                                  << ": --colocated runs each group as one rank (the spec asks for "
                                  << job.vision.actors << " vision and " << job.llm.actors
                                  << " llm actors); the global batch and its loss are the same";
  }
  RETURN_IF_ERROR(jobspec::ValidateJobConfig(job));
  if (options.profile_last > job.schedule.steps) {
    return absl::InvalidArgumentError(absl::StrCat("--profile ", options.profile_first, " ",
                                                   options.profile_last, ": the job has ",
                                                   job.schedule.steps, " steps"));
  }
  if (options.profile_first > 0) RETURN_IF_ERROR(platform::TracingAvailable());
  ColocatedRun run(resolved, options);
  return run.Run();
}

}  // namespace tandem::trainer
