// The decisions a training run makes between its steps, in one place for the colocated trainer
// (trainer/colocated.cc) and the coordinator's job runner (coordinator/job_runner.h): when to
// evaluate, checkpoint and redraw loss.svg, when the loss says the run diverged, and how a step's
// numbers become its metrics.jsonl record and the run's summary. It decides and counts; it reads
// no clock and writes no file, so both placements keep their own timing and their own order of
// writes.
//
//   rundir::RunLoop loop(RunLoopOptions{schedule.steps, schedule.global_batch, schedule.eval_every,
//                                       schedule.checkpoint_every, has_eval_set},
//                        resume_step);
//   for (int64_t step = loop.first_step(); step <= schedule.steps; ++step) {
//     ... train the step, measure step_seconds ...
//     ASSIGN_OR_RETURN(StepRecord record,
//                      loop.RecordStep(step, {loss, lr, vision_lr, vision_norm, llm_norm},
//                                      step_seconds, elapsed_s));   // the divergence check
//     RETURN_IF_ERROR(metrics.Append(record));
//     if (loop.ShouldEvaluate(step)) loop.RecordEval(...);
//     if (loop.ShouldCheckpoint(step)) loop.RecordCheckpoint(directory);
//     if (loop.ShouldWritePlot(step)) ... write loss.svg ...
//   }
//   summary.json <- SummaryJson(loop.Finish(elapsed_s));
//
// A placement that runs several steps between its own work (the job runner) asks SegmentEnd for
// the last step before the next evaluation or checkpoint.
//
// Thread-safety: none; one run's thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rundir/run_log.h"
#include "rundir/summary.h"

namespace tandem::rundir {

// The schedule's fields that steer the loop (jobspec::ScheduleConfig's, copied so that this
// library stays below jobspec).
struct RunLoopOptions {
  int64_t steps = 0;             // REQUIRES: > 0; the last step
  int64_t global_batch = 0;      // samples per step
  int64_t eval_every = 0;        // steps between evaluations; 0: only after the last step
  int64_t checkpoint_every = 0;  // steps between checkpoints; 0: only after the last step
  // False: never evaluate (the job has no held-out set). The job runner passes true: its actors
  // know the data, and answer an evaluation without samples when there is none.
  bool has_eval_set = true;
  // A mixture's sources (data.mixture), and each one's samples after n samples drawn in all: step
  // records count them (StepRecord::samples_by_source). Empty and null for one data set.
  std::vector<std::string> sources;
  std::function<std::vector<int64_t>(int64_t drawn)> source_counts;
};

// What a step reports before the loop derives the rest of its record.
struct StepOutcome {
  double loss = 0;              // over the global batch
  double lr = 0;                // the LLM group's learning rate of this update
  double vision_lr = 0;         // the vision group's
  double vision_grad_norm = 0;  // each group's gradient norm before clipping
  double llm_grad_norm = 0;
  // Each rank's seconds of compute (its step's wall time less its waits) in rank order.
  std::vector<double> vision_compute_s;
  std::vector<double> llm_compute_s;
  // Each rank's planned work in rank order: tiles (vision), its rows' cost (LLM).
  std::vector<double> vision_planned;
  std::vector<double> llm_planned;
  int64_t llm_positions = 0;    // of the LLM's rows, padding included
  int64_t llm_padding = 0;      // of them, positions holding no sample
  int64_t skipped_samples = 0;  // left out as unreadable (data.on_bad_sample "skip")
};

// How uneven a group's ranks were: the slowest one's compute (or the busiest one's planned work)
// over the mean; 0 with no rank or nothing measured.
double Imbalance(const std::vector<double>& compute_s);

// Caption scores of held-out samples (data/caption_metrics.h): a rank's, or summed over a group's
// scoring ranks.
struct EvalCounts {
  int64_t samples = 0;
  int64_t exact = 0;
  int64_t tokens = 0;
  int64_t correct_tokens = 0;

  EvalCounts& operator+=(const EvalCounts& other) {
    samples += other.samples;
    exact += other.exact;
    tokens += other.tokens;
    correct_tokens += other.correct_tokens;
    return *this;
  }
};

// An evaluation's record from the caption counts of every scoring rank: exact / samples and
// correct / tokens (0 for none).
EvalRecord EvalRecordOf(int64_t step, int64_t samples, int64_t exact, int64_t tokens,
                        int64_t correct_tokens);
inline EvalRecord EvalRecordOf(int64_t step, const EvalCounts& counts) {
  return EvalRecordOf(step, counts.samples, counts.exact, counts.tokens, counts.correct_tokens);
}

// loss.svg is redrawn after every this many steps, and after the last.
inline constexpr int64_t kPlotEvery = 50;

// The gradient norm of both models together: hypot of the two groups' norms.
double WholeModelGradNorm(double vision_grad_norm, double llm_grad_norm);

// OK for a finite loss; else InternalError "loss is nan at step 7: training diverged (lower the
// learning rate or enable gradient_clipping)".
absl::Status CheckLoss(double loss, int64_t step);

class RunLoop {
 public:
  // `resume_step`: the last step done before this run (0 from scratch); the summary counts its
  // samples (resume_step * global_batch).
  RunLoop(const RunLoopOptions& options, int64_t resume_step);

  const RunLoopOptions& options() const { return options_; }
  int64_t first_step() const { return resume_step_ + 1; }
  bool IsLast(int64_t step) const { return step == options_.steps; }

  // After `step`: evaluate at every multiple of eval_every and after the last step, when there is
  // an eval set.
  bool ShouldEvaluate(int64_t step) const;
  // After `step`: checkpoint at every multiple of checkpoint_every and after the last step.
  bool ShouldCheckpoint(int64_t step) const;
  // After `step`: redraw loss.svg every kPlotEvery steps and after the last step.
  bool ShouldWritePlot(int64_t step) const;
  // The first step at or after `first` after which the run evaluates or checkpoints (at most the
  // last step): the steps first..SegmentEnd(first) need nothing between them.
  int64_t SegmentEnd(int64_t first) const;

  // Checks the loss (CheckLoss's error, and nothing counted, for a non-finite one), builds the
  // step's record (whole-model gradient norm, samples_per_s = global_batch / step_seconds) and
  // counts the step in the summary (steps, samples, final_loss). `step_seconds`: the step's time,
  // summed as training time for the summary's samples_per_s; `elapsed_s`: since training started.
  absl::StatusOr<StepRecord> RecordStep(int64_t step, const StepOutcome& outcome,
                                        double step_seconds, double elapsed_s);
  // The summary's evaluation fields take the evaluation's values.
  void RecordEval(const EvalRecord& eval);
  // The summary's last checkpoint (a complete one: written, or resumed from).
  void RecordCheckpoint(const std::string& directory);

  // The summary so far; the caller fills the fields the loop does not know (name, run directory,
  // parameters, vocabulary).
  RunSummary& summary() { return summary_; }
  // The summary with elapsed_s (`elapsed_s`, wall clock of the run) and samples_per_s (samples
  // over the summed step times) set.
  const RunSummary& Finish(double elapsed_s);

 private:
  RunLoopOptions options_;
  int64_t resume_step_;
  double train_seconds_ = 0;
  RunSummary summary_;
};

}  // namespace tandem::rundir
