// A job's pretrained models: the sizes of llm.pretrained's LLM replace llm.model and those of
// vision.pretrained's tower replace vision.model, before the job's data is opened and its stages
// are built. Every placement calls it (the colocated trainer, each actor) and so does
// `tandem export`; the stages then load the weights (LoadPretrainedVision, LoadPretrainedLlm), and
// step::OpenJobData the tokenizer.
//
// An LLM keeps its config.json's shape, vocabulary and image token (a LLaVA directory's
// image_token_index, or its tokenizer's "<image>", added after the vocabulary when it has none); a
// from-scratch vision model then projects to its width. For a CLIP or SigLIP directory the tower
// keeps LLaVA's choice of features (hf/pretrained_config.h) and gets a new projector to the LLM's
// width; for a LLaVA directory its projector comes too (unless vision.new_projector), and must
// output that width. The normalisation is preprocessor_config.json's, whose output size must be
// the tower's image size. The sequence budget (image features + data.max_text_tokens <= the LLM's
// positions) is checked here. Errors start with "vision.pretrained: " or "llm.pretrained: " and
// name the file and key. This header is torch-free. Stateless and thread-safe.
#pragma once

#include "absl/status/status.h"
#include "jobspec/job_config.h"

namespace tandem::hf {

absl::Status ResolvePretrainedModels(jobspec::JobConfig& job);

}  // namespace tandem::hf
