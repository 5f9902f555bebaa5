// What the coordinator serves at /metrics, in the Prometheus text exposition format (0.0.4).
//
//   tandem_jobs{state}                          gauge    jobs the coordinator knows, by state
//   tandem_actors{pool}                         gauge    registered actors
//   tandem_actors_alive{pool}                   gauge    of those, heartbeating within the timeout
//   tandem_actors_busy{pool}                    gauge    of those, reserved for a job
//   tandem_steps_total                          counter  training steps completed, all jobs
//   tandem_samples_total                        counter  samples trained, all jobs
//   tandem_skipped_samples_total                counter  samples left out as unreadable
//                                                        (data.on_bad_sample "skip"), all jobs
//   tandem_transfer_bytes_total{direction}      counter  bytes sent between the groups:
//                                                        vision_to_llm (embeddings),
//                                                        llm_to_vision (their gradients)
//   tandem_job_step{job,name}                   gauge    a running job's last completed step
//   tandem_job_steps{job,name}                  gauge    its schedule.steps
//   tandem_job_loss{job,name}                   gauge    its last step's loss
//   tandem_job_step_seconds{job,name}           gauge    its last step's wall time
//   tandem_job_samples_per_second{job,name}     gauge    its last step's throughput
//   tandem_job_transfer_bytes_per_step{job,name,direction}  gauge  bytes between the groups in it
//   tandem_job_imbalance{job,name,group}        gauge    its last step's slowest rank's compute
//                                                        over its group's mean
//   tandem_job_planned_imbalance{job,name,group}  gauge  its busiest rank's planned work over the
//                                                        mean (what the data left uneven)
//   tandem_job_padding_waste{job,name}          gauge    share of its last step's LLM row
//                                                        positions that held no sample
//   tandem_job_source_samples{job,name,source}  gauge    a data.mixture's samples from each
//                                                        source since the run began
//
// The tandem_job_* series exist while the job runs (RUNNING); counters count from the
// coordinator's start. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/job_store.h"
#include "coordinator/registry.h"

namespace tandem::coordinator {

// One step of a running job, as the runner records it.
struct StepSample {
  std::string job_id;
  std::string name;
  int64_t step = 0;
  int64_t steps = 0;
  double loss = 0;
  double step_seconds = 0;
  double samples_per_s = 0;
  int64_t samples = 0;
  int64_t vision_to_llm_bytes = 0;
  int64_t llm_to_vision_bytes = 0;
  double vision_imbalance = 0;
  double llm_imbalance = 0;
  double vision_planned_imbalance = 0;
  double llm_planned_imbalance = 0;
  double padding_waste = 0;
  std::vector<std::pair<std::string, int64_t>> samples_by_source;  // a mixture's, in its order
  int64_t skipped_samples = 0;  // of `samples`, left out as unreadable
  // Per rank of each group: the bytes of snapshots it holds in memory (failure.snapshot_every).
  std::vector<int64_t> vision_snapshot_bytes, llm_snapshot_bytes;
};

class Metrics {
 public:
  void RecordStep(const StepSample& sample);
  // The job no longer runs: its tandem_job_* series end.
  void EndJob(const std::string& job_id);

  // The exposition: `jobs` by state (JobStore::CountJobsByState), actors by pool from `actors`
  // (alive when their last heartbeat is within `heartbeat_timeout` of `now`), and what RecordStep
  // gathered.
  std::string Render(const std::map<JobState, int64_t>& jobs, const std::vector<ActorEntry>& actors,
                     Clock::time_point now, std::chrono::milliseconds heartbeat_timeout) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, StepSample> running_;  // by job id
  int64_t steps_total_ = 0;
  int64_t samples_total_ = 0;
  int64_t skipped_samples_total_ = 0;
  int64_t vision_to_llm_total_ = 0;
  int64_t llm_to_vision_total_ = 0;
};

// A label value with Prometheus' escapes (backslash, double quote, newline).
std::string EscapeLabel(const std::string& value);

}  // namespace tandem::coordinator
