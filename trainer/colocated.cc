// The colocated trainer (colocated.h): both stages of the step in one process.
#include "trainer/colocated.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/communicator.h"
#include "engine/engine.h"
#include "jobspec/job_spec.h"
#include "rundir/run_dir_lock.h"
#include "rundir/checkpoint_dir.h"
#include "rundir/new_run.h"
#include "rundir/progress.h"
#include "rundir/run_log.h"
#include "rundir/run_loop.h"
#include "hf/pretrained_job.h"
#include "jobspec/memory_estimate.h"
#include "platform/device.h"
#include "platform/trace.h"
#include "step/stage.h"
#include "trainer/fiber.h"
#include "transport/in_process.h"

namespace tandem::trainer {
namespace {

namespace fs = std::filesystem;
constexpr char kComponent[] = "trainer";
// Transfers and collectives of a colocated run wait this long at most; a failed stage aborts the
// other's waits at once (InProcessFabric::Abort), so only a stage that stops answering reaches it.
constexpr std::chrono::milliseconds kTimeout{300000};

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

class ColocatedRun {
 public:
  ColocatedRun(const jobspec::JobConfig& job, const RunOptions& options)
      : job_(job), options_(options) {}

  absl::StatusOr<rundir::RunSummary> Run() {
    RETURN_IF_ERROR(Setup());
    RETURN_IF_ERROR(Train());
    return summary_;
  }

 private:
  absl::Status Setup();
  // ResourceExhausted, naming the fields, when both groups' estimated memory
  // (jobspec/memory_estimate.h) exceeds the device's (platform::DeviceMemoryBytes). `sized` is the
  // job with its pretrained models' sizes resolved.
  absl::Status CheckMemory(const jobspec::JobConfig& sized) const;
  absl::Status Train();
  // Runs `command` on both stages at once, each a fiber of this thread that gives the thread to
  // the other while it waits on a transfer, as the coordinator runs a command on both groups. The
  // first to fail aborts the other's transfers; its error is the one returned.
  absl::Status Both(const std::function<absl::Status(step::Stage&)>& command);
  absl::StatusOr<rundir::EvalRecord> Evaluate(int64_t step);
  // Writes checkpoints/step-NNNNNN and returns its path.
  absl::StatusOr<std::string> SaveCheckpoint(int64_t step);
  // Loads job_.resume_from into both stages; sets first_step_.
  absl::Status Resume();
  absl::Status WritePlot();
  std::string RunPath(const std::string& name) const {
    return (fs::path(run_dir_) / name).string();
  }

  jobspec::JobConfig job_;  // a copy: Start resolves a pretrained tower's shape into it
  RunOptions options_;
  std::string run_dir_;
  std::optional<rundir::RunDirLock> lock_;  // held while the run writes run_dir_
  std::unique_ptr<transport::InProcessFabric> fabric_;
  Fiber vision_fiber_, llm_fiber_;
  Fiber* running_ = nullptr;  // the fiber Both resumed last
  std::unique_ptr<step::Stage> vision_, llm_;
  std::unique_ptr<rundir::MetricsLog> metrics_;
  rundir::RunSummary summary_;
  int64_t first_step_ = 1;
};

absl::Status ColocatedRun::CheckMemory(const jobspec::JobConfig& sized) const {
  const int64_t memory = platform::DeviceMemoryBytes(options_.device);
  if (memory <= 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const jobspec::MemoryEstimate vision, jobspec::EstimateGroupMemory(sized, Role::kVision));
  ASSIGN_OR_RETURN(const jobspec::MemoryEstimate llm, jobspec::EstimateGroupMemory(sized, Role::kLlm));
  if (vision.total() + llm.total() <= memory) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the job needs an estimated ", jobspec::FormatBytes(vision.total() + llm.total()),
      " in one process, more than the ", jobspec::FormatBytes(memory), " of ", options_.device,
      " here: vision needs ", jobspec::DescribeEstimate(vision, sized), "; llm needs ",
      jobspec::DescribeEstimate(llm, sized)));
}

absl::Status ColocatedRun::Setup() {
  run_dir_ = options_.run_dir;
  RETURN_IF_ERROR(rundir::CheckRunDirIsNew(run_dir_));
  // Pretrained models' shapes, read once; job.json keeps the spec as written.
  jobspec::JobConfig sized = job_;
  RETURN_IF_ERROR(hf::ResolvePretrainedModels(sized));
  // Before anything is written: a job that cannot fit leaves no run directory behind.
  RETURN_IF_ERROR(CheckMemory(sized));
  std::error_code ec;
  fs::create_directories(fs::path(run_dir_) / "checkpoints", ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot create ", run_dir_, ": ", ec.message()));
  ASSIGN_OR_RETURN(lock_, rundir::RunDirLock::Acquire(run_dir_, absl::StrCat("tandem run --colocated (", job_.name, ")")));
  RETURN_IF_ERROR(WriteFileAtomically(RunPath("job.json"), jobspec::JobConfigToJson(job_) + "\n"));
  if (options_.threads > 0) at::set_num_threads(options_.threads);

  job_ = std::move(sized);
  ASSIGN_OR_RETURN(std::shared_ptr<const step::JobData> data,
                   step::OpenJobData(job_, job_.resume_from.empty() ? "" : jobspec::SpecPath(job_.resume_from, job_.spec_dir)));
  fabric_ = std::make_unique<transport::InProcessFabric>("colocated", 1, 1, kTimeout,
                                                        [this] { running_->Yield(); });
  step::Placement placement;
  placement.transfer_key = "colocated";
  placement.timeout = kTimeout;
  try {
    placement.device = c10::Device(options_.device);
    ASSIGN_OR_RETURN(vision_, step::CreateVisionStage(
                                  job_, data, placement,
                                  engine::CreateSingleRankCommunicator("vision"),
                                  fabric_->Endpoint(0, 0)));
    placement.run_dir = run_dir_;  // the LLM stage writes tokenizer.json
    ASSIGN_OR_RETURN(llm_, step::CreateLlmStage(job_, data, placement,
                                                engine::CreateSingleRankCommunicator("llm"),
                                                fabric_->Endpoint(1, 0)));
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot build the models: ", e.what_without_backtrace()));
  }
  if (!job_.resume_from.empty()) RETURN_IF_ERROR(Resume());
  ASSIGN_OR_RETURN(rundir::MetricsLog log, rundir::MetricsLog::Open(RunPath("metrics.jsonl")));
  metrics_ = std::make_unique<rundir::MetricsLog>(std::move(log));

  TANDEM_LOG(kInfo, kComponent) << job_.name << ": colocated run in " << run_dir_ << ", vision "
                                << vision_->parameters() << " and llm "
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
  absl::StatusOr<rundir::CheckpointInfo> resume =
      rundir::ReadResumePoint(jobspec::SpecPath(job_.resume_from, job_.spec_dir), job_.schedule.steps);
  if (!resume.ok()) return absl::Status(resume.status().code(), absl::StrCat("resume_from: ", resume.status().message()));
  const rundir::CheckpointInfo& checkpoint = *resume;
  ASSIGN_OR_RETURN(step::ResumePoint vision, vision_->Resume(checkpoint.directory));
  ASSIGN_OR_RETURN(step::ResumePoint llm, llm_->Resume(checkpoint.directory));
  if (vision.step != checkpoint.step || llm.step != checkpoint.step ||
      !(vision.position == llm.position)) {
    return absl::DataLossError(absl::StrCat(
        "resume_from: ", checkpoint.directory, ": its groups disagree (vision at step ",
        vision.step, ", llm at step ", llm.step, ", marker at step ", checkpoint.step, ")"));
  }
  first_step_ = checkpoint.step + 1;
  TANDEM_LOG(kInfo, kComponent) << job_.name << ": resumed from " << checkpoint.directory
                                << " (written by " << checkpoint.vision_actors << " vision x "
                                << checkpoint.llm_actors << " llm actors)";
  return absl::OkStatus();
}

absl::StatusOr<rundir::EvalRecord> ColocatedRun::Evaluate(int64_t step) {
  step::EvalCounts counts;
  RETURN_IF_ERROR(Both([&](step::Stage& stage) -> absl::Status {
    ASSIGN_OR_RETURN(step::EvalCounts mine, stage.Evaluate(step));
    if (&stage == llm_.get()) counts = mine;
    return absl::OkStatus();
  }));
  return rundir::EvalRecordOf(step, counts.samples, counts.exact, counts.tokens,
                             counts.correct_tokens);
}

absl::StatusOr<std::string> ColocatedRun::SaveCheckpoint(int64_t step) {
  const fs::path dir = fs::path(run_dir_) / "checkpoints" / rundir::CheckpointName(step);
  RETURN_IF_ERROR(vision_->SaveCheckpoint(step, dir.string()));
  RETURN_IF_ERROR(llm_->SaveCheckpoint(step, dir.string()));
  RETURN_IF_ERROR(rundir::MarkCheckpointComplete({dir.string(), step, 1, 1}));
  return dir.string();
}

absl::Status ColocatedRun::WritePlot() {
  return WriteFileAtomically(RunPath("loss.svg"), rundir::RenderLossSvg(
                                                      job_.name, metrics_->steps(),
                                                      metrics_->evals()));
}

absl::Status ColocatedRun::Train() {
  const jobspec::ScheduleConfig& schedule = job_.schedule;
  rundir::RunLoop loop({schedule.steps, schedule.global_batch, schedule.eval_every,
                        schedule.checkpoint_every, llm_->data().eval_samples() > 0},
                       first_step_ - 1);
  rundir::RunSummary& summary = loop.summary();
  summary.job_name = job_.name;
  summary.run_dir = run_dir_;
  summary.vision_parameters = vision_->parameters();
  summary.llm_parameters = llm_->parameters();
  summary.vocab_size = llm_->data().text->vocab_size();
  rundir::ProgressPrinter printer(options_.progress, options_.interactive);
  const auto start = Clock::now();
  double smoothed_rate = 0;
  for (int64_t step = loop.first_step(); step <= schedule.steps; ++step) {
    if (step == options_.profile_first) RETURN_IF_ERROR(platform::StartTrace(options_.device.rfind("cuda", 0) == 0));
    const auto step_start = Clock::now();
    double loss = 0;
    RETURN_IF_ERROR(Both([&](step::Stage& stage) -> absl::Status {
      ASSIGN_OR_RETURN(step::StepResult result, stage.RunStep(step));
      if (&stage == llm_.get()) loss = result.loss;
      return absl::OkStatus();
    }));
    const double step_seconds = Seconds(Clock::now() - step_start);
    ASSIGN_OR_RETURN(
        rundir::StepRecord record,
        loop.RecordStep(step,
                        {loss, llm_->engine().last_lr(), vision_->engine().last_lr(),
                         vision_->engine().last_grad_norm(), llm_->engine().last_grad_norm()},
                        step_seconds, Seconds(Clock::now() - start)));
    RETURN_IF_ERROR(metrics_->Append(record));
    if (step == options_.profile_last) {
      RETURN_IF_ERROR(platform::SaveTrace(RunPath("trace.json")));
      TANDEM_LOG(kInfo, kComponent) << job_.name << ": steps " << options_.profile_first << " to " << step
                                    << " traced into " << RunPath("trace.json");
    }
    smoothed_rate = step == loop.first_step() ? record.samples_per_s
                                              : 0.9 * smoothed_rate + 0.1 * record.samples_per_s;
    printer.Update({step, schedule.steps, loss, smoothed_rate, record.elapsed_s, ""});
    if (loop.ShouldEvaluate(step)) {
      printer.Update({step, schedule.steps, loss, smoothed_rate, record.elapsed_s, "evaluating"});
      ASSIGN_OR_RETURN(rundir::EvalRecord eval, Evaluate(step));
      RETURN_IF_ERROR(metrics_->Append(eval));
      loop.RecordEval(eval);
      printer.Finish();
      TANDEM_LOG(kInfo, kComponent)
          << job_.name << ": step " << step << " held-out exact match "
          << absl::StrFormat("%.3f", eval.caption_exact_match) << ", token accuracy "
          << absl::StrFormat("%.3f", eval.token_accuracy);
    }
    if (loop.ShouldCheckpoint(step)) {
      ASSIGN_OR_RETURN(std::string directory, SaveCheckpoint(step));
      loop.RecordCheckpoint(directory);
    }
    if (loop.ShouldWritePlot(step)) RETURN_IF_ERROR(WritePlot());
  }
  printer.Finish();
  RETURN_IF_ERROR(vision_->Export(RunPath("vision.safetensors")));
  RETURN_IF_ERROR(llm_->Export(RunPath("llm.safetensors")));
  summary_ = loop.Finish(Seconds(Clock::now() - start));
  return WriteFileAtomically(RunPath("summary.json"), rundir::SummaryJson(summary_) + "\n");
}

}  // namespace

absl::StatusOr<rundir::RunSummary> RunColocated(const jobspec::JobConfig& job,
                                                const RunOptions& options) {
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
  ColocatedRun run(job, options);
  return run.Run();
}

}  // namespace tandem::trainer
