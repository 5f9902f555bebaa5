// Named model shapes for job specs ("preset": "vit-b16"), as plain configs. Torch-free.
//
// A preset gives every field of the model config a value; a spec's explicit fields then override
// them (jobspec/job_spec_proto.h). The tables are constant, so every function here is thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "models/model_config.h"

namespace tandem::jobspec {

// The vision preset called `name` ("vit-tiny", "vit-s16", "vit-b16"), with `preset` set to the
// name. output_dim keeps its default: it is always the LLM's hidden size, filled in when a job is
// resolved. std::nullopt for an unknown name.
std::optional<models::VisionConfig> VisionPreset(std::string_view name);

// The LLM preset called `name` ("llm-tiny", "llm-160m", "llm-1b"), with `preset` set to the name.
// vocab_size is 0 (taken from the tokenizer). std::nullopt for an unknown name.
std::optional<models::LlmConfig> LlmPreset(std::string_view name);

// The known names, comma-separated in table order, for error messages: "vit-tiny, vit-s16,
// vit-b16".
std::string VisionPresetNames();
std::string LlmPresetNames();

}  // namespace tandem::jobspec
