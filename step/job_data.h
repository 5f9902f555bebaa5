// What every stage of a job reads: its datasets and how their text becomes tokens (docs/design.md
// §4). From scratch, the word tokenizer is built from the training texts; with llm.pretrained, the
// checkpoint's tokenizer and chat template are read (data/text_codec.h). Each rank of both groups
// opens the same data and so agrees on the vocabulary and on every sample without being told;
// stages in one process share one JobData. LibTorch-free.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/text_codec.h"
#include "jobspec/job_config.h"

namespace tandem::step {

// The file beside a checkpoint's weights that lists the training shards (data/shard_manifest.h).
inline constexpr char kDataManifest[] = "data.json";

struct JobData {
  data::Datasets datasets;
  std::shared_ptr<const data::TextCodec> text;  // never null
  // How the training set is shuffled (data/sampler.h): its shards, windowed by
  // data.shards.shuffle_buffer; one shard shuffled whole for data held whole.
  data::SampleOrder train_order;

  int64_t train_samples() const { return datasets.train->size(); }
  int64_t eval_samples() const { return datasets.eval ? datasets.eval->size() : 0; }
};

// Opens the job's datasets (images at the vision model's size, through a pretrained tower's
// preprocessor_config.json when it has one; relative paths against the spec's directory) and
// builds or reads the tokenizer. A job resuming from `resume_checkpoint` ("" for none) whose word
// tokenizer is saved there takes that one, which its weights were trained with: a vocabulary built
// from other texts (another dataset, or shapes conversations after captions) would number the
// words differently; one whose data.json (data/shard_manifest.h) lists other shards than the
// job's is refused. REQUIRES: hf::ResolvePretrainedModels has run on `job`. The errors of
// data::OpenDatasets and of reading the saved tokenizer, and "llm.pretrained: ..." /
// "llm.chat_template: ..." for a tokenizer or chat template that cannot be used.
absl::StatusOr<std::shared_ptr<const JobData>> OpenJobData(
    const jobspec::JobConfig& job, const std::string& resume_checkpoint = "");

}  // namespace tandem::step
