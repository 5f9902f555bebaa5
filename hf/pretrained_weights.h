// Loads a Hugging Face checkpoint's tensors into Tandem's models (names: NOTE [Hugging Face names]
// in hf/weight_names.h), checking every name, shape and dtype against the model its config.json
// describes.
//
//   ASSIGN_OR_RETURN(auto config, hf::ReadPretrainedConfig(dir));
//   ASSIGN_OR_RETURN(auto files, hf::CheckpointFiles::Open(dir));
//   models::VisionEncoder vision(*config.vision);           // output_dim filled in for a tower
//   RETURN_IF_ERROR(hf::LoadVisionWeights(config, files, *vision));
//
// LoadVisionWeights fills the vision tower, and from a LLaVA checkpoint the projector too (a tower
// read alone leaves the projector as initialised). LoadLlmWeights fills the LLM; a tied model needs
// no lm_head and ignores one that is there. An LLM with more vocabulary rows than config.json's (a
// token added after the vocabulary: LLaVA's <image>) gets zero rows after the checkpoint's. A
// tensor the model needs and the checkpoint lacks, a tensor of a loaded part that the model has no
// place for, a shape that differs from the config's, a dtype other than config.json's (or not
// floating point) are each InvalidArgument naming the tensor and the directory; the model may then
// be partly filled and must not be used. Call before an engine takes the model. Not thread-safe for
// one model.
#pragma once

#include "absl/status/status.h"
#include "hf/checkpoint_files.h"
#include "hf/pretrained_config.h"
#include "models/llm.h"
#include "models/vision_encoder.h"

namespace tandem::hf {

// `new_projector`: a LLaVA checkpoint's projector is not loaded either.
absl::Status LoadVisionWeights(const PretrainedConfig& config, const CheckpointFiles& files,
                               models::VisionEncoderImpl& vision, bool new_projector = false);
absl::Status LoadLlmWeights(const PretrainedConfig& config, const CheckpointFiles& files,
                            models::LlmImpl& llm);

// ReadPretrainedConfig, CheckpointFiles::Open and LoadVisionWeights (LoadLlmWeights) for
// `directory` (a job's vision.pretrained and llm.pretrained, hf/pretrained_job.h).
absl::Status LoadPretrainedVision(const std::string& directory, models::VisionEncoderImpl& vision,
                                  bool new_projector);
absl::Status LoadPretrainedLlm(const std::string& directory, models::LlmImpl& llm);

}  // namespace tandem::hf
