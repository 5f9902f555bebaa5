#include "rundir/run_driver.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "rundir/new_run.h"

namespace tandem::rundir {
namespace {

namespace fs = std::filesystem;

double Seconds(RunDriver::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

absl::StatusOr<std::unique_ptr<RunDriver>> RunDriver::Open(const RunDriverOptions& options) {
  std::error_code ec;
  fs::create_directories(fs::path(options.run_dir) / "checkpoints", ec);
  if (ec)
    return absl::UnavailableError(
        absl::StrCat("cannot create ", options.run_dir, ": ", ec.message()));
  ASSIGN_OR_RETURN(RunDirLock lock, RunDirLock::Acquire(options.run_dir, options.holder));
  ASSIGN_OR_RETURN(const int leftovers, lock.RemoveLeftoverTempFiles());
  RETURN_IF_ERROR(WriteFileAtomically((fs::path(options.run_dir) / "job.json").string(),
                                      options.job_json + "\n"));
  // Where the run starts: its own last complete checkpoint, else the one its spec names.
  std::optional<CheckpointInfo> resume = LatestCheckpoint(options.run_dir);
  const bool own = resume.has_value();
  if (!resume && !options.resume_from.empty()) {
    absl::StatusOr<CheckpointInfo> named = ReadResumePoint(options.resume_from, options.loop.steps);
    if (!named.ok()) {
      return absl::Status(named.status().code(),
                          absl::StrCat("resume_from: ", named.status().message()));
    }
    resume = *std::move(named);
  }
  const std::string metrics_path = (fs::path(options.run_dir) / "metrics.jsonl").string();
  bool from_memory = options.memory_step > 0 && options.memory_step >= (resume ? resume->step : 0);
  ASSIGN_OR_RETURN(
      MetricsLog metrics,
      MetricsLog::OpenResumed(metrics_path,
                              from_memory ? options.memory_step : (resume ? resume->step : 0)));
  // From memory only where metrics.jsonl holds every step up to there (a coordinator that
  // restarted may have lost what it had not synced since the last checkpoint).
  if (from_memory &&
      (metrics.steps().empty() || metrics.steps().back().step != options.memory_step)) {
    from_memory = false;
    ASSIGN_OR_RETURN(metrics, MetricsLog::OpenResumed(metrics_path, resume ? resume->step : 0));
  }
  return std::unique_ptr<RunDriver>(new RunDriver(options, std::move(lock), std::move(resume), own,
                                                  from_memory, std::move(metrics), leftovers));
}

RunDriver::RunDriver(RunDriverOptions options, RunDirLock lock,
                     std::optional<CheckpointInfo> resume, bool resume_is_own, bool from_memory,
                     MetricsLog metrics, int leftovers)
    : options_(std::move(options)),
      lock_(std::move(lock)),
      resume_(std::move(resume)),
      resume_is_own_(resume_is_own),
      from_memory_(from_memory),
      metrics_(std::move(metrics)),
      leftovers_(leftovers),
      loop_(options_.loop, from_memory ? options_.memory_step : (resume_ ? resume_->step : 0)) {}

std::string RunDriver::RunPath(const std::string& name) const {
  return (fs::path(options_.run_dir) / name).string();
}

absl::StatusOr<RunSummary> RunDriver::Run(RunGroups& groups, Clock::time_point started) {
  if (resume_) loop_.RecordCheckpoint(resume_->directory);
  const Clock::time_point train_start = Clock::now();
  const int64_t steps = loop_.options().steps;
  // An asynchronous checkpoint being written: its step. The step after it is a segment of its own,
  // after which the checkpoint is finished and counts.
  std::optional<int64_t> writing;
  for (int64_t done = loop_.first_step() - 1; done < steps;) {
    const int64_t first = done + 1;
    const int64_t planned = writing ? first : loop_.SegmentEnd(first);
    ASSIGN_OR_RETURN(int64_t last, groups.BeforeSegment(first, planned));
    last = std::clamp(last, first, planned);
    Clock::time_point last_answer = Clock::now();  // evaluations and checkpoints are not step time
    RETURN_IF_ERROR(
        groups.RunSteps(first, last, [&](int64_t step, const StepOutcome& outcome) -> absl::Status {
          const Clock::time_point now = Clock::now();
          const double step_seconds = Seconds(now - last_answer);
          last_answer = now;
          ASSIGN_OR_RETURN(const StepRecord record, loop_.RecordStep(step, outcome, step_seconds,
                                                                     Seconds(now - train_start)));
          RETURN_IF_ERROR(metrics_.Append(record));
          RETURN_IF_ERROR(groups.OnStep(record));
          // The segment's last step is drawn after its evaluation, which the plot shows.
          if (step != last && loop_.ShouldWritePlot(step)) RETURN_IF_ERROR(WritePlot());
          return absl::OkStatus();
        }));
    done = last;
    if (writing) {
      RETURN_IF_ERROR(FinishCheckpoint(groups, *writing));
      writing.reset();
    }
    if (loop_.ShouldEvaluate(last)) RETURN_IF_ERROR(Evaluate(groups, last));
    if (loop_.ShouldCheckpoint(last)) {
      RETURN_IF_ERROR(groups.SaveCheckpoint(last, CheckpointDirectory(last)));
      // The last one is finished at once: no step is left to write it beside.
      if (options_.async_checkpoints && last < steps) {
        writing = last;
      } else {
        RETURN_IF_ERROR(FinishCheckpoint(groups, last));
      }
    }
    if (loop_.ShouldWritePlot(last)) RETURN_IF_ERROR(WritePlot());
  }
  RETURN_IF_ERROR(groups.Export(RunPath("vision.safetensors"), RunPath("llm.safetensors")));
  const RunSummary summary = loop_.Finish(Seconds(Clock::now() - started));
  RETURN_IF_ERROR(WriteFileAtomically(RunPath("summary.json"), SummaryJson(summary) + "\n"));
  return summary;
}

absl::Status RunDriver::WritePlot() {
  return WriteFileAtomically(RunPath("loss.svg"),
                             RenderLossSvg(options_.job_name, metrics_.steps(), metrics_.evals()));
}

absl::Status RunDriver::Evaluate(RunGroups& groups, int64_t step) {
  groups.OnEvaluating(step);
  ASSIGN_OR_RETURN(const EvalCounts counts, groups.Evaluate(step));
  if (counts.samples == 0) return absl::OkStatus();  // the job has no held-out set
  const EvalRecord eval = EvalRecordOf(step, counts);
  RETURN_IF_ERROR(metrics_.Append(eval));
  loop_.RecordEval(eval);
  groups.OnEval(eval);
  return absl::OkStatus();
}

std::string RunDriver::CheckpointDirectory(int64_t step) const {
  return RunPath("checkpoints/" + CheckpointName(step));
}

absl::Status RunDriver::FinishCheckpoint(RunGroups& groups, int64_t step) {
  const std::string dir = CheckpointDirectory(step);
  if (options_.async_checkpoints) RETURN_IF_ERROR(groups.FinishCheckpoint(step, dir));
  // The records up to this step are on disk before the checkpoint counts, so a resume from it after
  // a power loss finds them. It counts once every rank of both groups saved its shard: the marker
  // goes last.
  RETURN_IF_ERROR(metrics_.Sync());
  RETURN_IF_ERROR(MarkCheckpointComplete({dir, step, options_.vision_actors, options_.llm_actors}));
  loop_.RecordCheckpoint(dir);
  groups.OnCheckpoint(dir);
  return absl::OkStatus();
}

}  // namespace tandem::rundir
