// What a finished run reports (summary.json, `--output json`), written by the colocated trainer and
// by the coordinator alike. Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tandem::rundir {

struct RunSummary {
  std::string job_name;
  std::string run_dir;
  int64_t steps = 0;
  int64_t samples = 0;             // training samples consumed
  double final_loss = 0;           // loss of the last step
  bool evaluated = false;          // false when the job has no held-out set
  double caption_exact_match = 0;  // last evaluation
  double token_accuracy = 0;
  double elapsed_s = 0;      // training and evaluation, wall clock
  double samples_per_s = 0;  // training samples over training time
  int64_t vision_parameters = 0;
  int64_t llm_parameters = 0;
  int64_t vocab_size = 0;
  std::string last_checkpoint;  // directory of the final checkpoint
};

// The summary as one JSON object (`--output json`, summary.json) or as a few lines for people.
std::string SummaryJson(const RunSummary& summary);
std::string SummaryText(const RunSummary& summary);
// Reads SummaryJson's output back (InvalidArgument for anything else).
absl::StatusOr<RunSummary> ParseSummaryJson(const std::string& json);

}  // namespace tandem::rundir
