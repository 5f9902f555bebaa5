#include "coordinator/metrics.h"

#include <array>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::coordinator {
namespace {

constexpr JobState kStates[] = {JobState::kQueued,    JobState::kRunning, JobState::kRestarting,
                                JobState::kSucceeded, JobState::kFailed,  JobState::kCancelled};

// Appends "# HELP" and "# TYPE" for one metric.
void Header(std::string* out, const char* name, const char* type, const char* help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

std::string Number(double value) { return absl::StrFormat("%.17g", value); }

std::string JobLabels(const StepSample& s) {
  return absl::StrCat("job=\"", EscapeLabel(s.job_id), "\",name=\"", EscapeLabel(s.name), "\"");
}

}  // namespace

std::string EscapeLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void Metrics::RecordStep(const StepSample& sample) {
  std::lock_guard<std::mutex> lock(mu_);
  running_[sample.job_id] = sample;
  ++steps_total_;
  samples_total_ += sample.samples - sample.skipped_samples;
  skipped_samples_total_ += sample.skipped_samples;
  vision_to_llm_total_ += sample.vision_to_llm_bytes;
  llm_to_vision_total_ += sample.llm_to_vision_bytes;
}

void Metrics::EndJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  running_.erase(job_id);
}

std::string Metrics::Render(const std::map<JobState, int64_t>& jobs,
                            const std::vector<ActorEntry>& actors, Clock::time_point now,
                            std::chrono::milliseconds heartbeat_timeout) const {
  std::string out;
  Header(&out, "tandem_jobs", "gauge", "Jobs the coordinator knows, by state.");
  for (JobState state : kStates) {
    const auto count = jobs.find(state);
    absl::StrAppend(&out, "tandem_jobs{state=\"", absl::AsciiStrToLower(JobStateName(state)),
                    "\"} ", count == jobs.end() ? 0 : count->second, "\n");
  }

  struct PoolCounts {
    int registered = 0, alive = 0, busy = 0;
  };
  std::map<std::string, PoolCounts> pools;
  for (const ActorEntry& actor : actors) {
    PoolCounts& counts = pools[actor.pool];
    ++counts.registered;
    if (now - actor.last_heartbeat <= heartbeat_timeout) ++counts.alive;
    if (!actor.job_id.empty()) ++counts.busy;
  }
  auto per_pool = [&](const char* name, const char* help, int PoolCounts::*field) {
    Header(&out, name, "gauge", help);
    for (const auto& [pool, counts] : pools) {
      absl::StrAppend(&out, name, "{pool=\"", EscapeLabel(pool), "\"} ", counts.*field, "\n");
    }
  };
  per_pool("tandem_actors", "Registered actors, by pool.", &PoolCounts::registered);
  per_pool("tandem_actors_alive", "Registered actors heartbeating within the timeout, by pool.",
           &PoolCounts::alive);
  per_pool("tandem_actors_busy", "Registered actors reserved for a job, by pool.",
           &PoolCounts::busy);

  std::lock_guard<std::mutex> lock(mu_);
  Header(&out, "tandem_steps_total", "counter", "Training steps completed, all jobs.");
  absl::StrAppend(&out, "tandem_steps_total ", steps_total_, "\n");
  Header(&out, "tandem_samples_total", "counter", "Samples trained, all jobs.");
  absl::StrAppend(&out, "tandem_samples_total ", samples_total_, "\n");
  Header(&out, "tandem_skipped_samples_total", "counter",
         "Samples left out as unreadable (data.on_bad_sample \"skip\"), all jobs.");
  absl::StrAppend(&out, "tandem_skipped_samples_total ", skipped_samples_total_, "\n");
  Header(&out, "tandem_transfer_bytes_total", "counter",
         "Bytes sent between the groups: embeddings (vision_to_llm) and their gradients "
         "(llm_to_vision).");
  absl::StrAppend(&out, "tandem_transfer_bytes_total{direction=\"vision_to_llm\"} ",
                  vision_to_llm_total_, "\n");
  absl::StrAppend(&out, "tandem_transfer_bytes_total{direction=\"llm_to_vision\"} ",
                  llm_to_vision_total_, "\n");

  auto per_job = [&](const char* name, const char* help, auto value) {
    Header(&out, name, "gauge", help);
    for (const auto& [id, sample] : running_) {
      absl::StrAppend(&out, name, "{", JobLabels(sample), "} ", value(sample), "\n");
    }
  };
  per_job("tandem_job_step", "A running job's last completed step.",
          [](const StepSample& s) { return absl::StrCat(s.step); });
  per_job("tandem_job_steps", "A running job's schedule.steps.",
          [](const StepSample& s) { return absl::StrCat(s.steps); });
  per_job("tandem_job_loss", "A running job's last step loss.",
          [](const StepSample& s) { return Number(s.loss); });
  per_job("tandem_job_step_seconds", "A running job's last step wall time, in seconds.",
          [](const StepSample& s) { return Number(s.step_seconds); });
  per_job("tandem_job_samples_per_second", "A running job's last step throughput.",
          [](const StepSample& s) { return Number(s.samples_per_s); });
  // Two series a job, told apart by `label`: value(sample, 0) and value(sample, 1).
  auto per_job_pair = [&](const char* name, const char* help, const char* label,
                          std::array<const char*, 2> values, auto value) {
    Header(&out, name, "gauge", help);
    for (const auto& [id, sample] : running_) {
      for (int i = 0; i < 2; ++i) {
        absl::StrAppend(&out, name, "{", JobLabels(sample), ",", label, "=\"", values[i], "\"} ",
                        value(sample, i), "\n");
      }
    }
  };
  per_job_pair("tandem_job_transfer_bytes_per_step",
               "Bytes a running job's last step sent between the groups, by direction.",
               "direction", {"vision_to_llm", "llm_to_vision"}, [](const StepSample& s, int i) {
                 return absl::StrCat(i == 0 ? s.vision_to_llm_bytes : s.llm_to_vision_bytes);
               });
  per_job_pair("tandem_job_imbalance",
               "A running job's last step: its slowest rank's compute time over its group's mean.",
               "group", {"vision", "llm"}, [](const StepSample& s, int i) {
                 return Number(i == 0 ? s.vision_imbalance : s.llm_imbalance);
               });
  per_job_pair("tandem_job_planned_imbalance",
               "A running job's last step: its busiest rank's planned work over its group's mean.",
               "group", {"vision", "llm"}, [](const StepSample& s, int i) {
                 return Number(i == 0 ? s.vision_planned_imbalance : s.llm_planned_imbalance);
               });
  per_job("tandem_job_padding_waste",
          "A running job's last step: the share of the LLM's row positions that held no sample.",
          [](const StepSample& s) { return Number(s.padding_waste); });
  const char* sources = "tandem_job_source_samples";
  Header(&out, sources, "gauge",
         "A running job's samples from each source of its data.mixture since the run began.");
  for (const auto& [id, sample] : running_) {
    for (const auto& [source, count] : sample.samples_by_source) {
      absl::StrAppend(&out, sources, "{", JobLabels(sample), ",source=\"", source, "\"} ", count,
                      "\n");
    }
  }
  const char* snapshots = "tandem_job_snapshot_bytes";
  Header(&out, snapshots, "gauge",
         "A running job's snapshots in memory (failure.snapshot_every) each rank holds, in bytes.");
  for (const auto& [id, sample] : running_) {
    for (const auto& [group, bytes] : {std::pair{"vision", &sample.vision_snapshot_bytes},
                                       std::pair{"llm", &sample.llm_snapshot_bytes}}) {
      for (size_t rank = 0; rank < bytes->size(); ++rank) {
        absl::StrAppend(&out, snapshots, "{", JobLabels(sample), ",group=\"", group, "\",rank=\"",
                        rank, "\"} ", (*bytes)[rank], "\n");
      }
    }
  }
  return out;
}

}  // namespace tandem::coordinator
