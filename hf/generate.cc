#include "hf/generate.h"

#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/image.h"
#include "data/image_preprocessor.h"
#include "hf/export.h"
#include "hf/llava_model.h"
#include "models/any_res.h"
#include "tokenizer/chat_template.h"

namespace tandem::hf {
namespace {

constexpr char kImageMarker[] = "<image>";

size_t Count(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size()))
    ++count;
  return count;
}

// The images' features in the order of the prompt's marks, and how many positions each takes:
// the tower's features, or LLaVA-NeXT's arrangement of each image's tiles.
struct EncodedImages {
  at::Tensor features;  // [images, features, hidden], or [1, positions, hidden] (any-res)
  std::vector<int64_t> positions;
};

absl::StatusOr<EncodedImages> EncodeImages(LlavaModel& model,
                                           const std::vector<std::string>& paths) {
  const models::VisionConfig& v = model.vision->config();
  EncodedImages out;
  std::vector<at::Tensor> tiles;
  std::vector<data::AnyResLayout> layouts;
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(const data::Image decoded, data::DecodeImageFile(path));
    ASSIGN_OR_RETURN(const std::vector<data::Image> images,
                     data::PreprocessTiles(model.preprocessor, decoded));
    for (const data::Image& image : images) {
      tiles.push_back(torch::from_blob(const_cast<float*>(image.pixels.data()),
                                       {1, image.channels, image.height, image.width},
                                       torch::kFloat)
                          .clone());
    }
    if (v.any_res()) {
      layouts.push_back(data::LayoutAnyRes({decoded.height, decoded.width}, v.grid_pinpoints,
                                           v.image_size, v.grid()));
      out.positions.push_back(layouts.back().positions());
    } else {
      out.positions.push_back(v.num_features());
    }
  }
  if (tiles.empty()) return out;
  out.features = model.vision->forward(at::cat(tiles, 0));
  if (v.any_res())
    out.features = models::ArrangeAnyRes(out.features, layouts, model.llm->image_newline());
  return out;
}

// Removes a temporary export however Generate leaves.
struct RemoveOnExit {
  std::filesystem::path path;
  ~RemoveOnExit() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

absl::StatusOr<GenerateResult> GenerateOrThrow(const GenerateRequest& request);

}  // namespace

absl::StatusOr<GenerateResult> Generate(const GenerateRequest& request) {
  try {
    return GenerateOrThrow(request);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("generate: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("generate: ", e.what()));
  }
}

namespace {

absl::StatusOr<GenerateResult> GenerateOrThrow(const GenerateRequest& request) {
  if (request.threads > 0) at::set_num_threads(request.threads);
  if (request.max_new_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-new-tokens must be positive, got ", request.max_new_tokens));
  }
  const size_t markers = Count(request.prompt, kImageMarker);
  if (markers != request.images.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt has ", markers, markers == 1 ? " \"<image>\" mark" : " \"<image>\" marks",
        " for ", request.images.size(), request.images.size() == 1 ? " --image" : " --image files",
        ": each image needs one mark, in order"));
  }
  std::error_code ec;
  for (const std::string& image : request.images) {
    if (!std::filesystem::is_regular_file(image, ec))
      return absl::NotFoundError(absl::StrCat(image, ": no such image file"));
  }
  // A run directory is exported to a temporary LLaVA directory first, so that both generate alike.
  std::string model_dir = request.model_dir;
  RemoveOnExit exported;
  if (IsRunDirectory(request.model_dir)) {
    exported.path = std::filesystem::temp_directory_path() /
                    absl::StrCat("tandem-generate-", ::getpid(), "-", std::random_device{}());
    ExportOptions options;
    options.run_dir = request.model_dir;
    options.out_dir = exported.path.string();
    RETURN_IF_ERROR(ExportRunAsLlava(options));
    model_dir = exported.path.string();
  }
  absl::StatusOr<LlavaModel> loaded = LoadLlava(model_dir);
  if (!loaded.ok()) return loaded.status();
  LlavaModel& model = *loaded;
  const int64_t image_token = model.config.llm->image_token_id;
  if (model.tokenizer.TokenToId(kImageMarker) != image_token) {
    return absl::InvalidArgumentError(
        absl::StrCat(request.model_dir, ": the tokenizer's \"<image>\" is not ",
                     "config.json's image_token_index ", image_token));
  }

  std::string text = request.prompt;
  bool add_special_tokens = true;
  if (request.chat) {
    absl::StatusOr<tokenizer::ChatTemplate> chat =
        tokenizer::ChatTemplate::For(request.chat_template, model.tokenizer);
    if (!chat.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(request.model_dir, ": ", chat.status().message()));
    absl::StatusOr<std::string> rendered =
        chat->Render({{"user", request.prompt}}, /*add_generation_prompt=*/true);
    if (!rendered.ok()) {
      return absl::Status(rendered.status().code(),
                          absl::StrCat(request.model_dir, ": ", rendered.status().message()));
    }
    text = *std::move(rendered);
    add_special_tokens = false;  // the template wrote them, as apply_chat_template tokenizes
  }
  ASSIGN_OR_RETURN(const std::vector<int64_t> ids,
                   model.tokenizer.Encode(text, add_special_tokens));

  torch::NoGradGuard no_grad;
  ASSIGN_OR_RETURN(const EncodedImages images, EncodeImages(model, request.images));
  std::vector<int64_t> prompt;
  size_t image = 0;
  for (int64_t id : ids) {
    if (id != image_token) {
      prompt.push_back(id);
    } else if (image < images.positions.size()) {  // the marks were counted against the images
      prompt.insert(prompt.end(), static_cast<size_t>(images.positions[image++]), image_token);
    }
  }
  if (static_cast<int64_t>(prompt.size()) >= model.config.llm->max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt's ", prompt.size(),
                                                   " tokens leave no room in the ", "model's ",
                                                   model.config.llm->max_seq_len, " positions"));
  }
  GenerateResult result;
  result.prompt_tokens = static_cast<int64_t>(prompt.size());
  result.prompt_token_ids = prompt;
  result.prompt_text = text;
  result.token_ids = models::GenerateGreedyCached(model.llm, images.features, prompt,
                                                  model.stop_ids, request.max_new_tokens);
  result.text = model.tokenizer.Decode(result.token_ids, /*skip_special_tokens=*/true);
  return result;
}

}  // namespace
}  // namespace tandem::hf
