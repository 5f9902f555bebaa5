#include "hf/llava_model.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "common/strict_json.h"
#include "hf/checkpoint_files.h"
#include "hf/pretrained_weights.h"

namespace tandem::hf {
namespace {

namespace fs = std::filesystem;

void AddStop(std::vector<int64_t>& ids, int64_t id) {
  if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

// generation_config.json's eos_token_id (one or a list), when the file is there.
absl::Status ReadGenerationStops(const fs::path& file, std::vector<int64_t>& ids) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string text, ReadUserFile(file.string()));
  auto parsed = ParseJsonStrict(text);
  if (!parsed.ok())
    return absl::InvalidArgumentError(absl::StrCat(file.string(), ": ", parsed.status().message()));
  const auto it = parsed->find("eos_token_id");
  if (it == parsed->end()) return absl::OkStatus();
  for (const auto& id : it->is_array() ? *it : nlohmann::json::array({*it})) {
    if (auto value = ReadJsonInteger(id).ToInt64()) AddStop(ids, *value);
  }
  return absl::OkStatus();
}

absl::StatusOr<LlavaModel> LoadLlavaOrThrow(const std::string& directory);

}  // namespace

absl::StatusOr<LlavaModel> LoadLlava(const std::string& directory) {
  try {
    return LoadLlavaOrThrow(directory);
  } catch (const c10::Error& e) {  // a config the models refuse (TORCH_CHECK), named by the model
    return absl::InvalidArgumentError(absl::StrCat(directory, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(directory, ": ", e.what()));
  }
}

namespace {

absl::StatusOr<LlavaModel> LoadLlavaOrThrow(const std::string& directory) {
  LlavaModel model;
  ASSIGN_OR_RETURN(model.config, ReadPretrainedConfig(directory));
  if (model.config.kind != PretrainedKind::kLlava) {
    return absl::InvalidArgumentError(
        absl::StrCat(directory, ": a ", model.config.model_type,
                     " model, not a LLaVA one (model_type \"llava\" or \"llava_next\")"));
  }
  const fs::path dir(directory);
  ASSIGN_OR_RETURN(model.preprocessor, data::ReadModelImagePreprocessor(directory));
  models::VisionConfig vision = *model.config.vision;
  if (model.preprocessor.output_size() != vision.image_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        directory, ": its image processor makes images of ", model.preprocessor.output_size(),
        " pixels, config.json's vision tower takes ", vision.image_size));
  }
  if (model.preprocessor.grid_pinpoints != vision.grid_pinpoints) {
    return absl::InvalidArgumentError(absl::StrCat(
        directory, ": the image processor's image_grid_pinpoints differ from config.json's",
        vision.any_res() ? "" : " (a llava model reads an image as one tile)"));
  }
  vision.image_mean = model.preprocessor.image_mean;
  vision.image_std = model.preprocessor.image_std;
  ASSIGN_OR_RETURN(model.tokenizer, tokenizer::HfTokenizer::Load(directory));
  const models::LlmConfig& llm = *model.config.llm;
  if (model.tokenizer.vocab_size() > llm.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(directory, ": the tokenizer has ", model.tokenizer.vocab_size(),
                     " tokens, the LLM's vocab_size is ", llm.vocab_size));
  }
  ASSIGN_OR_RETURN(const auto files, CheckpointFiles::Open(directory));
  model.vision = models::VisionEncoder(vision);
  model.llm = models::Llm(llm);
  RETURN_IF_ERROR(LoadVisionWeights(model.config, files, *model.vision));
  RETURN_IF_ERROR(LoadLlmWeights(model.config, files, *model.llm));
  model.vision->eval();
  model.llm->eval();
  for (int64_t id : model.config.eos_token_ids) AddStop(model.stop_ids, id);
  RETURN_IF_ERROR(ReadGenerationStops(dir / "generation_config.json", model.stop_ids));
  if (auto eos = model.tokenizer.eos_id()) AddStop(model.stop_ids, *eos);
  return model;
}

}  // namespace
}  // namespace tandem::hf
