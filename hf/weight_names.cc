#include "hf/weight_names.h"

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace tandem::hf {
namespace {

bool Consume(absl::string_view& name, absl::string_view prefix) {
  return absl::ConsumePrefix(&name, prefix);
}

// "blocks.<i>.<rest>" -> i and rest.
bool SplitBlock(absl::string_view name, absl::string_view prefix, std::string& index,
                absl::string_view& rest) {
  if (!Consume(name, prefix)) return false;
  const size_t dot = name.find('.');
  if (dot == absl::string_view::npos) return false;
  int64_t number = 0;
  if (!absl::SimpleAtoi(name.substr(0, dot), &number)) return false;
  index = std::string(name.substr(0, dot));
  rest = name.substr(dot + 1);
  return true;
}

// The suffix after a module path: ".weight", ".bias" or "" for a bare parameter.
std::optional<absl::string_view> After(absl::string_view name, absl::string_view module) {
  if (!Consume(name, module)) return std::nullopt;
  return name;
}

absl::Status NoName(absl::string_view ours) {
  return absl::NotFoundError(
      absl::StrCat("parameter '", ours, "' has no Hugging Face LLaVA counterpart"));
}

}  // namespace

absl::StatusOr<std::optional<LocalName>> ClassifyCheckpointName(PretrainedKind kind,
                                                                const std::string& full) {
  absl::string_view name = full;
  const auto local = [](Part part, absl::string_view rest) {
    return std::optional<LocalName>(LocalName{part, std::string(rest)});
  };
  // Older checkpoints store the position ids buffer; transformers ignores it on load too.
  if (absl::EndsWith(name, "position_ids")) return std::optional<LocalName>();
  switch (kind) {
    case PretrainedKind::kLlava: {
      if (absl::StartsWith(name, "model.vision_tower.") ||
          absl::StartsWith(name, "model.multi_modal_projector.") ||
          absl::StartsWith(name, "model.language_model.") || name == "model.image_newline") {
        name.remove_prefix(6);
      }
      if (name == "image_newline") return local(Part::kNewline, name);
      if (Consume(name, "vision_tower.")) {
        Consume(name, "vision_model.");
        return local(Part::kVision, name);
      }
      if (Consume(name, "multi_modal_projector.")) return local(Part::kProjector, name);
      if (Consume(name, "language_model.model.")) return local(Part::kLlm, name);
      if (Consume(name, "language_model.lm_head.")) return local(Part::kLmHead, name);
      if (Consume(name, "language_model.")) return local(Part::kLlm, name);
      if (Consume(name, "lm_head.")) return local(Part::kLmHead, name);
      break;
    }
    case PretrainedKind::kVisionTower: {
      for (absl::string_view skipped :
           {"text_model.", "visual_projection.", "text_projection.", "logit_scale", "logit_bias"}) {
        if (absl::StartsWith(name, skipped)) return std::optional<LocalName>();
      }
      Consume(name, "vision_model.");
      for (absl::string_view root :
           {"embeddings.", "encoder.", "pre_layrnorm.", "post_layernorm.", "head."}) {
        if (absl::StartsWith(name, root)) return local(Part::kVision, name);
      }
      break;
    }
    case PretrainedKind::kLlm: {
      if (Consume(name, "model.")) return local(Part::kLlm, name);
      if (Consume(name, "lm_head.")) return local(Part::kLmHead, name);
      break;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", full, "' belongs to no part of the model"));
}

absl::StatusOr<std::vector<LocalName>> TheirVisionNames(const std::string& ours) {
  absl::string_view name = ours;
  const auto one = [](Part part, std::string name) {
    return std::vector<LocalName>{{part, std::move(name)}};
  };
  if (auto rest = After(name, "patch_embed."))
    return one(Part::kVision, absl::StrCat("embeddings.patch_embedding.", *rest));
  if (name == "class_token") return one(Part::kVision, "embeddings.class_embedding");
  if (name == "positions") return one(Part::kVision, "embeddings.position_embedding.weight");
  if (auto rest = After(name, "pre_norm."))
    return one(Part::kVision, absl::StrCat("pre_layrnorm.", *rest));
  if (auto rest = After(name, "post_norm."))
    return one(Part::kVision, absl::StrCat("post_layernorm.", *rest));
  if (absl::StartsWith(name, "head.")) return one(Part::kVision, ours);
  if (auto rest = After(name, "projector.linear_"))
    return one(Part::kProjector, absl::StrCat("linear_", *rest));
  std::string index;
  absl::string_view rest;
  if (SplitBlock(name, "blocks.", index, rest)) {
    const std::string layer = absl::StrCat("encoder.layers.", index, ".");
    if (auto p = After(rest, "norm1."))
      return one(Part::kVision, absl::StrCat(layer, "layer_norm1.", *p));
    if (auto p = After(rest, "norm2."))
      return one(Part::kVision, absl::StrCat(layer, "layer_norm2.", *p));
    if (auto p = After(rest, "attn.proj."))
      return one(Part::kVision, absl::StrCat(layer, "self_attn.out_proj.", *p));
    if (auto p = After(rest, "mlp.")) return one(Part::kVision, absl::StrCat(layer, "mlp.", *p));
    if (auto p = After(rest, "attn.qkv.")) {
      std::vector<LocalName> names;
      for (const char* projection : {"q_proj.", "k_proj.", "v_proj."}) {
        names.push_back({Part::kVision, absl::StrCat(layer, "self_attn.", projection, *p)});
      }
      return names;
    }
  }
  return NoName(ours);
}

absl::StatusOr<std::vector<LocalName>> TheirLlmNames(const std::string& ours) {
  absl::string_view name = ours;
  const auto one = [](Part part, std::string name) {
    return std::vector<LocalName>{{part, std::move(name)}};
  };
  if (name == "embed.weight") return one(Part::kLlm, "embed_tokens.weight");
  if (name == "norm.weight") return one(Part::kLlm, "norm.weight");
  if (name == "head.weight") return one(Part::kLmHead, "weight");
  if (name == "image_newline") return one(Part::kNewline, "image_newline");
  std::string index;
  absl::string_view rest;
  if (SplitBlock(name, "blocks.", index, rest)) {
    const std::string layer = absl::StrCat("layers.", index, ".");
    static const std::map<absl::string_view, absl::string_view> kModules = {
        {"attn_norm.", "input_layernorm."}, {"mlp_norm.", "post_attention_layernorm."},
        {"attn.q.", "self_attn.q_proj."},   {"attn.k.", "self_attn.k_proj."},
        {"attn.v.", "self_attn.v_proj."},   {"attn.o.", "self_attn.o_proj."},
        {"mlp.gate.", "mlp.gate_proj."},    {"mlp.up.", "mlp.up_proj."},
        {"mlp.down.", "mlp.down_proj."}};
    for (const auto& [module, theirs] : kModules) {
      if (auto p = After(rest, module)) return one(Part::kLlm, absl::StrCat(layer, theirs, *p));
    }
  }
  return NoName(ours);
}

std::string FullName(PretrainedKind kind, const LocalName& local) {
  switch (kind) {
    case PretrainedKind::kLlava:
      switch (local.part) {
        case Part::kVision:
          return absl::StrCat("vision_tower.", local.name);
        case Part::kProjector:
          return absl::StrCat("multi_modal_projector.", local.name);
        case Part::kLlm:
          return absl::StrCat("language_model.model.", local.name);
        case Part::kLmHead:
          return absl::StrCat("language_model.lm_head.", local.name);
        case Part::kNewline:
          return local.name;
      }
      break;
    case PretrainedKind::kVisionTower:
      return local.name;
    case PretrainedKind::kLlm:
      return local.part == Part::kLmHead ? absl::StrCat("lm_head.", local.name)
                                         : absl::StrCat("model.", local.name);
  }
  return local.name;
}

}  // namespace tandem::hf
