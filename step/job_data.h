// What every stage of a job reads: its datasets and the tokenizer built from the training captions
// (DESIGN §4). Each rank of both groups opens the same data and so agrees on the vocabulary and on
// every sample without being told; stages in one process share one JobData. LibTorch-free.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "jobspec/job_config.h"

namespace tandem::step {

struct JobData {
  data::Datasets datasets;
  data::Tokenizer tokenizer;

  int64_t train_samples() const { return datasets.train->size(); }
  int64_t eval_samples() const { return datasets.eval ? datasets.eval->size() : 0; }
};

// Opens the job's datasets (images at the vision model's size, relative paths against the spec's
// directory) and builds the tokenizer. The errors of data::OpenDatasets.
absl::StatusOr<std::shared_ptr<const JobData>> OpenJobData(const jobspec::JobConfig& job);

}  // namespace tandem::step
