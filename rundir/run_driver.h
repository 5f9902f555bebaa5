// One run's sequence, written once for both placements: the colocated trainer
// (trainer/colocated.cc), whose groups are two fibers of one process, and the coordinator's job
// runner (coordinator/job_runner.h), whose groups are actors it sends commands to. A placement
// implements RunGroups ("run these steps on both groups", "evaluate", "save", "export") and
// this class does the rest:
//
//   ASSIGN_OR_RETURN(auto driver, rundir::RunDriver::Open(options));
//     the run directory: created with checkpoints/, locked, the temporary files of a killed writer
//     removed, job.json written; the resume point: the run's own last complete checkpoint (an
//     attempt after a failure), else the spec's resume_from, which must leave steps to train;
//     metrics.jsonl cut back to that step.
//   ... the placement builds or assigns both groups from driver->resume_point(), and fills
//       driver->summary()'s names and sizes ...
//   ASSIGN_OR_RETURN(rundir::RunSummary summary, driver->Run(groups, started));
//     segments of steps (RunLoop::SegmentEnd, cut short where the groups' BeforeSegment says), each
//     step's record in metrics.jsonl, loss.svg, the evaluations, the checkpoints (both groups save,
//     metrics.jsonl is synced, then the complete marker; an asynchronous one is finished after the
//     step that follows it, which is a segment of its own), the final weights and summary.json.
//
// Thread-safety: none; one run's thread owns it. RunGroups' methods are called on that thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rundir/checkpoint_dir.h"
#include "rundir/run_dir_lock.h"
#include "rundir/run_log.h"
#include "rundir/run_loop.h"
#include "rundir/summary.h"

namespace tandem::rundir {

// What a placement does for the driver: commands to both groups at once, and what it adds to
// each event (progress lines, logs, the coordinator's store and feeds).
class RunGroups {
 public:
  virtual ~RunGroups() = default;
  using StepDone = std::function<absl::Status(int64_t step, const StepOutcome& outcome)>;
  // Runs steps first..last on both groups, calling `done` once each step's results are all in, in
  // order. A `done` that fails ends the run with its error.
  virtual absl::Status RunSteps(int64_t first, int64_t last, const StepDone& done) = 0;
  // The held-out caption counts of both groups after `step`; samples 0: the job has none.
  virtual absl::StatusOr<EvalCounts> Evaluate(int64_t step) = 0;
  // Each group's ranks save their shards of `step` into `directory`; with asynchronous checkpoints
  // (RunDriverOptions::async_checkpoints) they return once their state is copied, and
  // FinishCheckpoint completes the save once the shards are written.
  virtual absl::Status SaveCheckpoint(int64_t step, const std::string& directory) = 0;
  virtual absl::Status FinishCheckpoint(int64_t step, const std::string& directory) {
    return absl::OkStatus();
  }
  // Each group writes its final weights: the vision group into `vision_path`, the LLM group into
  // `llm_path`.
  virtual absl::Status Export(const std::string& vision_path, const std::string& llm_path) = 0;

  // Before steps first..last run: the last step of this segment, in [first, last] (a step a hold
  // names), or an error that ends the run (a cancellation). Default: `last`.
  virtual absl::StatusOr<int64_t> BeforeSegment(int64_t first, int64_t last) { return last; }
  // After a step's record is in metrics.jsonl.
  virtual absl::Status OnStep(const StepRecord& record) { return absl::OkStatus(); }
  // Before an evaluation, and after its record is in metrics.jsonl.
  virtual void OnEvaluating(int64_t step) {}
  virtual void OnEval(const EvalRecord& eval) {}
  // After a checkpoint is marked complete.
  virtual void OnCheckpoint(const std::string& directory) {}
};

struct RunDriverOptions {
  std::string run_dir;
  std::string holder;    // who holds the run directory's lock, for another writer's error
  std::string job_json;  // job.json's contents (jobspec::ResolvedJobSpec::json)
  std::string job_name;  // for loss.svg's title
  RunLoopOptions loop;
  std::string resume_from;    // the spec's checkpoint to start from; "" for none
  int64_t vision_actors = 1;  // the group sizes the checkpoints' markers record
  int64_t llm_actors = 1;
  // checkpoint.async: a checkpoint is written while the next step trains, and counts after it.
  bool async_checkpoints = false;
  // A step the groups restore from memory (failure.snapshot_every; 0: none): the run resumes there
  // when it is at least the resume point's, metrics.jsonl cut back to it.
  int64_t memory_step = 0;
};

class RunDriver {
 public:
  using Clock = std::chrono::steady_clock;

  // Prepares the run directory and finds the resume point (above). Errors: the lock's (another
  // writer holds it), the file system's naming the path, ReadResumePoint's for resume_from, and
  // MetricsLog::OpenResumed's.
  static absl::StatusOr<std::unique_ptr<RunDriver>> Open(const RunDriverOptions& options);

  // Where the run starts: nullopt from scratch.
  const std::optional<CheckpointInfo>& resume_point() const { return resume_; }
  // Whether resume_point() is one of this run's own checkpoints (not the spec's resume_from).
  bool resumes_own_checkpoint() const { return resume_is_own_; }
  // Whether the run resumes at RunDriverOptions::memory_step, from memory, rather than at
  // resume_point() (which then only gives the data's tokenizer).
  bool resumes_from_memory() const { return from_memory_; }
  // Temporary files a killed writer left, removed by Open.
  int leftovers() const { return leftovers_; }
  std::string RunPath(const std::string& name) const;
  RunLoop& loop() { return loop_; }
  const MetricsLog& metrics() const { return metrics_; }
  RunSummary& summary() { return loop_.summary(); }

  // Trains from the resume point to the last step (above) and returns the summary written to
  // summary.json; its elapsed_s counts from `started`. The groups' errors are returned as they are.
  absl::StatusOr<RunSummary> Run(RunGroups& groups, Clock::time_point started);

 private:
  RunDriver(RunDriverOptions options, RunDirLock lock, std::optional<CheckpointInfo> resume,
            bool resume_is_own, bool from_memory, MetricsLog metrics, int leftovers);
  absl::Status WritePlot();
  absl::Status Evaluate(RunGroups& groups, int64_t step);
  std::string CheckpointDirectory(int64_t step) const;
  // After both groups saved `step` (and, asynchronously, wrote it: RunGroups::FinishCheckpoint):
  // metrics.jsonl synced, then the checkpoint's complete marker.
  absl::Status FinishCheckpoint(RunGroups& groups, int64_t step);

  const RunDriverOptions options_;
  const RunDirLock lock_;  // held while the run writes its directory
  const std::optional<CheckpointInfo> resume_;
  const bool resume_is_own_;
  const bool from_memory_;
  MetricsLog metrics_;
  const int leftovers_;
  RunLoop loop_;
};

}  // namespace tandem::rundir
