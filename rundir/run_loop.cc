#include "rundir/run_loop.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace tandem::rundir {
namespace {

bool IsMultiple(int64_t step, int64_t every) { return every > 0 && step % every == 0; }

// The first multiple of `every` at or after `step` (>= 0); no limit when `every` is 0 or the
// multiple is past int64's range.
int64_t FirstMultipleFrom(int64_t step, int64_t every) {
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  if (every <= 0) return kNever;
  const int64_t remainder = step % every;
  if (remainder == 0) return step;
  const int64_t gap = every - remainder;
  return step > kNever - gap ? kNever : step + gap;
}

}  // namespace

double WholeModelGradNorm(double vision_grad_norm, double llm_grad_norm) {
  return std::hypot(vision_grad_norm, llm_grad_norm);
}

absl::Status CheckLoss(double loss, int64_t step) {
  if (std::isfinite(loss)) return absl::OkStatus();
  return absl::InternalError(
      absl::StrFormat("loss is %f at step %d: training diverged (lower the learning rate or "
                      "enable gradient_clipping)",
                      loss, step));
}

RunLoop::RunLoop(const RunLoopOptions& options, int64_t resume_step)
    : options_(options), resume_step_(resume_step) {
  summary_.samples = resume_step * options.global_batch;  // the run's, not only this attempt's
}

bool RunLoop::ShouldEvaluate(int64_t step) const {
  return options_.has_eval_set && (IsMultiple(step, options_.eval_every) || IsLast(step));
}

bool RunLoop::ShouldCheckpoint(int64_t step) const {
  return IsMultiple(step, options_.checkpoint_every) || IsLast(step);
}

bool RunLoop::ShouldWritePlot(int64_t step) const {
  return IsMultiple(step, kPlotEvery) || IsLast(step);
}

int64_t RunLoop::SegmentEnd(int64_t first) const {
  const int64_t eval_every = options_.has_eval_set ? options_.eval_every : 0;
  return std::min({options_.steps, FirstMultipleFrom(first, eval_every),
                   FirstMultipleFrom(first, options_.checkpoint_every)});
}

double Imbalance(const std::vector<double>& compute_s) {
  if (compute_s.empty()) return 0;
  double sum = 0, slowest = 0;
  for (const double s : compute_s) {
    sum += s;
    slowest = std::max(slowest, s);
  }
  return sum > 0 ? slowest / (sum / static_cast<double>(compute_s.size())) : 0;
}

absl::StatusOr<StepRecord> RunLoop::RecordStep(int64_t step, const StepOutcome& outcome,
                                               double step_seconds, double elapsed_s) {
  if (absl::Status diverged = CheckLoss(outcome.loss, step); !diverged.ok()) return diverged;
  StepRecord record;
  record.step = step;
  record.loss = outcome.loss;
  record.lr = outcome.lr;
  record.vision_lr = outcome.vision_lr;
  record.vision_grad_norm = outcome.vision_grad_norm;
  record.llm_grad_norm = outcome.llm_grad_norm;
  record.grad_norm = WholeModelGradNorm(outcome.vision_grad_norm, outcome.llm_grad_norm);
  record.samples_per_s = options_.global_batch / std::max(step_seconds, 1e-9);
  record.skipped_samples = outcome.skipped_samples;
  record.vision_compute_s = outcome.vision_compute_s;
  record.llm_compute_s = outcome.llm_compute_s;
  record.vision_imbalance = Imbalance(outcome.vision_compute_s);
  record.llm_imbalance = Imbalance(outcome.llm_compute_s);
  record.vision_planned_imbalance = Imbalance(outcome.vision_planned);
  record.llm_planned_imbalance = Imbalance(outcome.llm_planned);
  record.padding_waste = outcome.llm_positions > 0 ? static_cast<double>(outcome.llm_padding) /
                                                         static_cast<double>(outcome.llm_positions)
                                                   : 0.0;
  record.elapsed_s = elapsed_s;
  if (options_.source_counts) {
    const std::vector<int64_t> counts = options_.source_counts(step * options_.global_batch);
    for (size_t s = 0; s < options_.sources.size() && s < counts.size(); ++s)
      record.samples_by_source.emplace_back(options_.sources[s], counts[s]);
  }
  train_seconds_ += step_seconds;
  summary_.steps = step;
  summary_.samples += options_.global_batch;
  summary_.final_loss = outcome.loss;
  return record;
}

void RunLoop::RecordEval(const EvalRecord& eval) {
  summary_.evaluated = true;
  summary_.caption_exact_match = eval.caption_exact_match;
  summary_.token_accuracy = eval.token_accuracy;
}

void RunLoop::RecordCheckpoint(const std::string& directory) {
  summary_.last_checkpoint = directory;
}

const RunSummary& RunLoop::Finish(double elapsed_s) {
  summary_.elapsed_s = elapsed_s;
  summary_.samples_per_s = summary_.samples / std::max(train_seconds_, 1e-9);
  return summary_;
}

EvalRecord EvalRecordOf(int64_t step, int64_t samples, int64_t exact, int64_t tokens,
                        int64_t correct_tokens) {
  return EvalRecord{step, samples > 0 ? static_cast<double>(exact) / samples : 0.0,
                    tokens > 0 ? static_cast<double>(correct_tokens) / tokens : 0.0};
}

}  // namespace tandem::rundir
