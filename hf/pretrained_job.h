// A job's pretrained models: the sizes of vision.pretrained's tower replace vision.model, before
// the job's data is opened and its stages are built. Every placement calls it (the colocated
// trainer, each actor) and so does `tandem export`; the vision stage then loads the weights
// (LoadPretrainedVision).
//
// For a CLIP or SigLIP directory the tower keeps LLaVA's choice of features
// (hf/pretrained_config.h) and gets a new projector to llm.model.hidden; for a LLaVA directory
// its projector comes too, and must output llm.model.hidden. The normalisation is
// preprocessor_config.json's, whose output size must be the tower's image size. The sequence
// budget (image features + data.max_text_tokens <= llm.model.max_seq_len) is checked here.
// Errors start with "vision.pretrained: " and name the file and key.
// This header is torch-free. Stateless and thread-safe.
#pragma once

#include "absl/status/status.h"
#include "jobspec/job_config.h"

namespace tandem::hf {

absl::Status ResolvePretrainedModels(jobspec::JobConfig& job);

}  // namespace tandem::hf
