// The files a training run leaves in its run directory, written as the run goes: `metrics.jsonl`
// (one JSON object per line), and `loss.svg` (drawn from the same records). Torch-free, so the
// coordinator can write the same files for a disaggregated job.
//
//   metrics.jsonl, one line per optimizer step:
//     {"step": 12, "loss": 1.93, "lr": 0.0029, "vision_lr": 0.0029, "grad_norm": 0.81,
//      "vision_grad_norm": 0.3, "llm_grad_norm": 0.75, "samples_per_s": 950.2, "elapsed_s": 4.1}
//   and one line per evaluation:
//     {"eval": {"step": 250, "caption_exact_match": 0.97, "token_accuracy": 0.995}}
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::rundir {

struct StepRecord {
  int64_t step = 0;
  double loss = 0;                       // mean token cross-entropy over the global batch
  double lr = 0;                         // the LLM group's learning rate of this update
  double vision_lr = 0;                  // the vision group's
  double grad_norm = 0;                  // global L2 norm over both models, before clipping
  double vision_grad_norm = 0;           // the vision group's part of it
  double llm_grad_norm = 0;              // the LLM group's part
  double samples_per_s = 0;              // over this step
  double elapsed_s = 0;                  // since training started
  std::vector<double> vision_compute_s;  // each vision rank's compute seconds, in rank order
  std::vector<double> llm_compute_s;     // each LLM rank's
  double vision_imbalance = 0;           // slowest rank's compute over the group's mean
  double llm_imbalance = 0;
  // The busiest rank's planned work over the group's mean: what the plan left uneven, which the
  // measured imbalance adds the machines' unevenness to.
  double vision_planned_imbalance = 0;
  double llm_planned_imbalance = 0;
  double padding_waste = 0;  // share of the LLM's row positions that held no sample
  // Samples drawn for this step and left out as unreadable (data.on_bad_sample "skip").
  int64_t skipped_samples = 0;
  // A mixture's samples from each source since the run began (data.mixture), in its order;
  // empty for one data set.
  std::vector<std::pair<std::string, int64_t>> samples_by_source;
};

struct EvalRecord {
  int64_t step = 0;
  double caption_exact_match = 0;
  double token_accuracy = 0;
};

// Appends records to <run_dir>/metrics.jsonl, flushed line by line so `tail -f` works.
class MetricsLog {
 public:
  static absl::StatusOr<MetricsLog> Open(const std::string& path);
  // For a run that resumes after step `last_step` (0: from scratch): keeps the file's records up to
  // that step and drops the later ones (a run that died after its checkpoint trained them, and they
  // are trained again), rewriting the file atomically, then appends. A file that does not exist is
  // created; one that cannot be read is an error naming its line, and is left as it was. A last
  // line that is not a whole record (the process or the machine died while writing it) is dropped.
  static absl::StatusOr<MetricsLog> OpenResumed(const std::string& path, int64_t last_step);
  MetricsLog(MetricsLog&& other) noexcept;
  MetricsLog& operator=(MetricsLog&& other) noexcept;
  ~MetricsLog();

  absl::Status Append(const StepRecord& record);
  absl::Status Append(const EvalRecord& record);
  // fsyncs what was appended: called when a checkpoint is complete, so that a resume from it finds
  // every record up to its step after a power loss too.
  absl::Status Sync();

  const std::vector<StepRecord>& steps() const { return steps_; }
  const std::vector<EvalRecord>& evals() const { return evals_; }
  const std::string& path() const { return path_; }

 private:
  MetricsLog(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status WriteLine(const std::string& line);

  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<StepRecord> steps_;
  std::vector<EvalRecord> evals_;
};

std::string StepRecordJson(const StepRecord& record);
std::string EvalRecordJson(const EvalRecord& record);

// Reads a metrics.jsonl back (for plots of finished runs, and resumes); errors name the file and
// line. The last line may be torn (cut short, or the zeros a lost write leaves): it is skipped, and
// *torn_tail (when given) says so. Any other line that is not a record is an error.
absl::Status ReadMetrics(const std::string& path, std::vector<StepRecord>* steps,
                         std::vector<EvalRecord>* evals, bool* torn_tail = nullptr);

// An SVG chart: training loss (left axis, log scale when it spans more than a decade) against step,
// and the evaluations' exact match and token accuracy (right axis, 0..1). Self-contained:
// opens in any browser.
std::string RenderLossSvg(const std::string& title, const std::vector<StepRecord>& steps,
                          const std::vector<EvalRecord>& evals);

}  // namespace tandem::rundir
