#include "hf/pretrained_config.h"

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "common/strict_json.h"
#include "data/image_preprocessor.h"

namespace tandem::hf {
namespace {

using nlohmann::json;

// Reads the keys of one JSON object of config.json, with transformers' defaults for absent or null
// keys, and errors that name the file and the key path.
class Reader {
 public:
  Reader(const json& object, std::string file, std::string path)
      : object_(object), file_(std::move(file)), path_(std::move(path)) {}

  bool Has(absl::string_view key) const {
    const auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }

  absl::StatusOr<int64_t> Int(absl::string_view key, std::optional<int64_t> fallback) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) {
      if (fallback) return *fallback;
      return Error(key, "is required");
    }
    const auto value = ReadJsonInteger(*it).ToInt64();
    if (!value) return Error(key, absl::StrCat("must be an integer, got ", DescribeJsonValue(*it)));
    return *value;
  }

  absl::StatusOr<double> Number(absl::string_view key, double fallback) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return fallback;
    if (!it->is_number())
      return Error(key, absl::StrCat("must be a number, got ", DescribeJsonValue(*it)));
    return it->get<double>();
  }

  absl::StatusOr<bool> Bool(absl::string_view key, bool fallback) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return fallback;
    if (!it->is_boolean())
      return Error(key, absl::StrCat("must be a boolean, got ", DescribeJsonValue(*it)));
    return it->get<bool>();
  }

  absl::StatusOr<std::string> String(absl::string_view key, std::string fallback) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return fallback;
    if (!it->is_string())
      return Error(key, absl::StrCat("must be a string, got ", DescribeJsonValue(*it)));
    return it->get<std::string>();
  }

  // A nested object; absent or null gives an empty one.
  absl::StatusOr<Reader> Object(absl::string_view key) const {
    static const json kEmpty = json::object();
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return Reader(kEmpty, file_, Path(key));
    if (!it->is_object())
      return Error(key, absl::StrCat("must be an object, got ", DescribeJsonValue(*it)));
    return Reader(*it, file_, Path(key));
  }

  const json& raw() const { return object_; }

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", Path(key), " ", what));
  }
  // A message that names its own key (a top-level one), after the file.
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", what));
  }

 private:
  std::string Path(absl::string_view key) const {
    return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
  }

  const json& object_;
  std::string file_;
  std::string path_;
};

// Tandem's models train without dropout: a config that asks for it is refused by the key, rather
// than trained without it unannounced. (CLIP and SigLIP name theirs attention_dropout and dropout;
// Llama and Qwen2 attention_dropout.)
absl::Status RefuseDropout(const Reader& r, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    ASSIGN_OR_RETURN(const double p, r.Number(key, 0.0));
    if (p != 0.0) {
      return r.Error(
          key, absl::StrCat(p,
                            " is not supported: Tandem's models train without dropout (set it to 0 "
                            "to train this model without it)"));
    }
  }
  return absl::OkStatus();
}

// CLIPVisionConfig and SiglipVisionConfig, with their defaults.
absl::StatusOr<models::VisionConfig> ReadVision(const Reader& r, const std::string& model_type) {
  const bool clip = model_type == "clip_vision_model";
  models::VisionConfig v;
  ASSIGN_OR_RETURN(v.hidden, r.Int("hidden_size", 768));
  ASSIGN_OR_RETURN(v.mlp_hidden, r.Int("intermediate_size", 3072));
  ASSIGN_OR_RETURN(v.layers, r.Int("num_hidden_layers", 12));
  ASSIGN_OR_RETURN(v.heads, r.Int("num_attention_heads", 12));
  ASSIGN_OR_RETURN(v.channels, r.Int("num_channels", 3));
  ASSIGN_OR_RETURN(v.image_size, r.Int("image_size", 224));
  ASSIGN_OR_RETURN(v.patch_size, r.Int("patch_size", clip ? 32 : 16));
  ASSIGN_OR_RETURN(v.activation, r.String("hidden_act", clip ? "quick_gelu" : "gelu_pytorch_tanh"));
  ASSIGN_OR_RETURN(v.norm_eps, r.Number("layer_norm_eps", clip ? 1e-5 : 1e-6));
  RETURN_IF_ERROR(RefuseDropout(r, {"attention_dropout", "dropout"}));
  for (const auto& [key, value, max] :
       {std::tuple<const char*, int64_t, int64_t>{"intermediate_size", v.mlp_hidden,
                                                  models::kMaxMlpWidth},
        {"num_hidden_layers", v.layers, models::kMaxLayers},
        {"image_size", v.image_size, models::kMaxImageSize},
        {"hidden_size", v.hidden, models::kMaxWidth},
        {"num_attention_heads", v.heads, models::kMaxHeads}}) {
    if (value <= 0 || value > max) {
      return r.Error(key, absl::StrCat("must be between 1 and ", max, ", got ", value));
    }
  }
  if (v.channels != 3)
    return r.Error("num_channels", absl::StrCat("must be 3 (RGB images), got ", v.channels));
  if (v.hidden <= 0 || v.heads <= 0 || v.hidden % v.heads != 0) {
    return r.Error(
        "hidden_size",
        absl::StrCat(v.hidden, " must be a positive multiple of num_attention_heads ", v.heads));
  }
  if (v.patch_size <= 0 || v.image_size % v.patch_size != 0) {
    return r.Error("image_size",
                   absl::StrCat(v.image_size, " must be a multiple of patch_size ", v.patch_size));
  }
  if (v.activation == "gelu_pytorch_tanh" || v.activation == "gelu_new") v.activation = "gelu_tanh";
  if (v.activation != "gelu" && v.activation != "gelu_tanh" && v.activation != "quick_gelu") {
    return r.Error("hidden_act",
                   absl::StrCat("\"", v.activation,
                                "\" is not supported (gelu, gelu_pytorch_tanh, quick_gelu)"));
  }
  v.positions = "learned";
  v.class_token = clip;
  v.patch_bias = !clip;
  v.pre_norm = clip;
  v.final_norm = false;
  v.post_norm = true;
  if (!clip) {
    ASSIGN_OR_RETURN(v.pooling_head, r.Bool("vision_use_head", true));
  }
  // image_mean and image_std stay empty (0.5): they are preprocessor_config.json's, not
  // config.json's.
  v.projector = "mlp2x";
  v.projector_activation = "gelu";
  v.output_dim = 0;
  return v;
}

absl::StatusOr<models::LlmConfig> ReadLlm(const Reader& r, const std::string& model_type) {
  const bool qwen2 = model_type == "qwen2";
  models::LlmConfig m;
  ASSIGN_OR_RETURN(m.vocab_size, r.Int("vocab_size", qwen2 ? 151936 : 32000));
  ASSIGN_OR_RETURN(m.hidden, r.Int("hidden_size", 4096));
  ASSIGN_OR_RETURN(m.mlp_hidden, r.Int("intermediate_size", qwen2 ? 22016 : 11008));
  ASSIGN_OR_RETURN(m.layers, r.Int("num_hidden_layers", 32));
  ASSIGN_OR_RETURN(m.heads, r.Int("num_attention_heads", 32));
  ASSIGN_OR_RETURN(m.kv_heads, r.Int("num_key_value_heads", m.heads));
  ASSIGN_OR_RETURN(m.max_seq_len, r.Int("max_position_embeddings", qwen2 ? 32768 : 2048));
  ASSIGN_OR_RETURN(m.norm_eps, r.Number("rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(m.tie_embeddings, r.Bool("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(m.head_dim, r.Int("head_dim", 0));
  if (m.head_dim == m.hidden / std::max<int64_t>(m.heads, 1) &&
      m.hidden % std::max<int64_t>(m.heads, 1) == 0) {
    m.head_dim = 0;
  }
  ASSIGN_OR_RETURN(const std::string act, r.String("hidden_act", "silu"));
  if (act != "silu")
    return r.Error("hidden_act", absl::StrCat("\"", act, "\" is not supported (silu)"));
  ASSIGN_OR_RETURN(const bool mlp_bias, r.Bool("mlp_bias", false));
  if (mlp_bias) return r.Error("mlp_bias", "true is not supported");
  RETURN_IF_ERROR(RefuseDropout(r, {"attention_dropout"}));
  if (qwen2) {
    m.attention_bias = true;  // Qwen2's q, k and v always have biases, o never
    ASSIGN_OR_RETURN(const bool sliding, r.Bool("use_sliding_window", false));
    if (sliding) return r.Error("use_sliding_window", "true is not supported");
  } else {
    ASSIGN_OR_RETURN(const bool bias, r.Bool("attention_bias", false));
    if (bias)
      return r.Error("attention_bias", "true (biases on q, k, v and o) is not supported for llama");
  }
  for (const auto& [key, value, max] :
       {std::tuple<const char*, int64_t, int64_t>{"vocab_size", m.vocab_size,
                                                  models::kMaxVocabulary},
        {"hidden_size", m.hidden, models::kMaxWidth},
        {"intermediate_size", m.mlp_hidden, models::kMaxMlpWidth},
        {"num_hidden_layers", m.layers, models::kMaxLayers},
        {"max_position_embeddings", m.max_seq_len, models::kMaxSequence},
        {"num_attention_heads", m.heads, models::kMaxHeads},
        {"num_key_value_heads", m.kv_heads, models::kMaxHeads}}) {
    if (value <= 0 || value > max) {
      return r.Error(key, absl::StrCat("must be between 1 and ", max, ", got ", value));
    }
  }
  if (m.head_dim < 0 || m.head_dim % 2 != 0) {
    return r.Error("head_dim", absl::StrCat("must be even and positive for rotary positions, got ",
                                            m.head_dim));
  }
  if (m.head_dim == 0 &&
      (m.heads <= 0 || m.hidden % m.heads != 0 || (m.hidden / m.heads) % 2 != 0)) {
    return r.Error("hidden_size",
                   absl::StrCat(m.hidden, " must be a multiple of num_attention_heads ", m.heads,
                                " with an even head size"));
  }
  if (m.heads <= 0 || m.kv_heads <= 0 || m.heads % m.kv_heads != 0) {
    return r.Error("num_key_value_heads",
                   absl::StrCat(m.kv_heads, " must divide num_attention_heads ", m.heads));
  }

  // Rotary: transformers 5 writes rope_parameters {rope_type, rope_theta, ...}; earlier versions
  // rope_theta beside rope_scaling {type or rope_type, factor, ...} (or null).
  ASSIGN_OR_RETURN(m.rope_theta, r.Number("rope_theta", 10000.0));
  const absl::string_view scaling_key =
      r.Has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  ASSIGN_OR_RETURN(const Reader scaling, r.Object(scaling_key));
  ASSIGN_OR_RETURN(m.rope_theta, scaling.Number("rope_theta", m.rope_theta));
  ASSIGN_OR_RETURN(std::string type, scaling.String("type", "default"));
  ASSIGN_OR_RETURN(type, scaling.String("rope_type", type));
  if (type != "default" && type != "linear" && type != "llama3") {
    return scaling.Error("rope_type",
                         absl::StrCat("\"", type, "\" is not supported (default, linear, llama3)"));
  }
  m.rope_scaling.type = type;
  ASSIGN_OR_RETURN(m.rope_scaling.factor, scaling.Number("factor", 1.0));
  ASSIGN_OR_RETURN(m.rope_scaling.low_freq_factor, scaling.Number("low_freq_factor", 1.0));
  ASSIGN_OR_RETURN(m.rope_scaling.high_freq_factor, scaling.Number("high_freq_factor", 4.0));
  ASSIGN_OR_RETURN(m.rope_scaling.original_max_positions,
                   scaling.Int("original_max_position_embeddings", m.max_seq_len));
  return m;
}

absl::Status ReadTokenIds(const Reader& r, PretrainedConfig& config) {
  ASSIGN_OR_RETURN(config.bos_token_id, r.Int("bos_token_id", -1));
  ASSIGN_OR_RETURN(config.pad_token_id, r.Int("pad_token_id", -1));
  config.eos_token_ids.clear();
  const auto it = r.raw().find("eos_token_id");
  if (it != r.raw().end() && it->is_array()) {
    for (const auto& id : *it) {
      const auto value = ReadJsonInteger(id).ToInt64();
      if (!value)
        return r.Error("eos_token_id",
                       absl::StrCat("must hold integers, got ", DescribeJsonValue(id)));
      config.eos_token_ids.push_back(*value);
    }
  } else {
    ASSIGN_OR_RETURN(const int64_t eos, r.Int("eos_token_id", -1));
    if (eos >= 0) config.eos_token_ids.push_back(eos);
  }
  return absl::OkStatus();
}

bool IsVisionType(const std::string& t) {
  return t == "clip_vision_model" || t == "siglip_vision_model";
}
bool IsLlmType(const std::string& t) { return t == "llama" || t == "qwen2"; }

absl::StatusOr<std::string> ModelType(const Reader& r) {
  ASSIGN_OR_RETURN(std::string type, r.String("model_type", ""));
  if (type.empty()) return r.Error("model_type", "is required");
  return type;
}

// LLaVA-NeXT (LlavaNextConfig): image_grid_pinpoints, transformers' default when left out, and the
// newline embedding.
absl::Status ReadAnyRes(const Reader& r, models::VisionConfig& v, models::LlmConfig& m) {
  json pinpoints = json::parse("[[336,672],[672,336],[672,672],[1008,336],[336,1008]]");
  if (r.Has("image_grid_pinpoints")) pinpoints = r.raw()["image_grid_pinpoints"];
  auto parsed = data::ParseGridPinpoints(pinpoints, v.image_size, "the tower's image_size");
  if (!parsed.ok()) return r.Error(parsed.status().message());
  v.grid_pinpoints = *std::move(parsed);
  if (v.num_features() != v.num_patches()) {
    return r.Error("vision_feature_select_strategy",
                   absl::StrCat("keeps ", v.num_features(),
                                " features a tile, but LLaVA-NeXT's grid "
                                "needs the ",
                                v.grid(), " x ", v.grid(), " patches only"));
  }
  m.image_newline = true;
  return absl::OkStatus();
}

absl::Status ReadLlava(const Reader& r, PretrainedConfig& config) {
  ASSIGN_OR_RETURN(const Reader vision, r.Object("vision_config"));
  ASSIGN_OR_RETURN(const Reader text, r.Object("text_config"));
  ASSIGN_OR_RETURN(config.vision_model_type, vision.String("model_type", "clip_vision_model"));
  ASSIGN_OR_RETURN(config.llm_model_type, text.String("model_type", "llama"));
  if (!IsVisionType(config.vision_model_type)) {
    return vision.Error(
        "model_type", absl::StrCat("\"", config.vision_model_type,
                                   "\" is not supported (clip_vision_model, siglip_vision_model)"));
  }
  if (!IsLlmType(config.llm_model_type)) {
    return text.Error("model_type", absl::StrCat("\"", config.llm_model_type,
                                                 "\" is not supported (llama, qwen2)"));
  }
  ASSIGN_OR_RETURN(auto v, ReadVision(vision, config.vision_model_type));
  ASSIGN_OR_RETURN(auto m, ReadLlm(text, config.llm_model_type));
  // transformers 5 writes tie_word_embeddings at both levels; earlier LLaVA configs at the top
  // only.
  if (!text.Has("tie_word_embeddings")) {
    ASSIGN_OR_RETURN(m.tie_embeddings, r.Bool("tie_word_embeddings", false));
  }
  ASSIGN_OR_RETURN(m.image_token_id, r.Int("image_token_index", 32000));
  ASSIGN_OR_RETURN(m.image_token_id, r.Int("image_token_id", m.image_token_id));
  if (m.image_token_id < 0 || m.image_token_id >= m.vocab_size) {
    return r.Error("image_token_index",
                   absl::StrCat(m.image_token_id, " is outside the vocabulary of ", m.vocab_size));
  }
  const auto layer = r.raw().find("vision_feature_layer");
  if (layer != r.raw().end() && layer->is_array()) {
    return r.Error("vision_feature_layer", "as a list of layers is not supported");
  }
  ASSIGN_OR_RETURN(v.feature_layer, r.Int("vision_feature_layer", -2));
  if (v.feature_index() < 0 || v.feature_index() > v.layers) {
    return r.Error("vision_feature_layer",
                   absl::StrCat(v.feature_layer, " is outside the ", v.layers + 1,
                                " hidden states of the vision tower"));
  }
  ASSIGN_OR_RETURN(const std::string strategy,
                   r.String("vision_feature_select_strategy", "default"));
  if (strategy != "default" && strategy != "full") {
    return r.Error("vision_feature_select_strategy",
                   absl::StrCat("must be \"default\" or \"full\", got \"", strategy, "\""));
  }
  v.drop_first_feature = strategy == "default";
  ASSIGN_OR_RETURN(v.projector_activation, r.String("projector_hidden_act", "gelu"));
  if (v.projector_activation == "gelu_pytorch_tanh" || v.projector_activation == "gelu_new") {
    v.projector_activation = "gelu_tanh";
  }
  bool known = false;
  for (absl::string_view name : {"gelu", "gelu_tanh", "quick_gelu", "silu", "relu", "linear"}) {
    known = known || v.projector_activation == name;
  }
  if (!known)
    return r.Error("projector_hidden_act",
                   absl::StrCat("\"", v.projector_activation, "\" is not supported"));
  ASSIGN_OR_RETURN(const bool projector_bias, r.Bool("multimodal_projector_bias", true));
  if (!projector_bias) return r.Error("multimodal_projector_bias", "false is not supported");
  if (config.model_type == "llava_next") RETURN_IF_ERROR(ReadAnyRes(r, v, m));
  v.output_dim = m.hidden;
  config.vision = v;
  config.llm = m;
  return ReadTokenIds(text, config);
}

}  // namespace

absl::StatusOr<PretrainedConfig> ReadPretrainedConfig(const std::string& directory) {
  const std::string file = (std::filesystem::path(directory) / "config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) {
    return absl::NotFoundError(
        absl::StrCat(file, ": cannot read (not a Hugging Face model directory?)"));
  }
  ASSIGN_OR_RETURN(const std::string text, ReadUserFile(file));
  auto parsed = ParseJsonStrict(text);
  if (!parsed.ok())
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", parsed.status().message()));
  if (!parsed->is_object())
    return absl::InvalidArgumentError(absl::StrCat(file, ": must hold a JSON object"));
  const Reader root(*parsed, file, "");

  PretrainedConfig config;
  config.directory = directory;
  ASSIGN_OR_RETURN(config.model_type, ModelType(root));
  ASSIGN_OR_RETURN(config.dtype, root.String("torch_dtype", ""));
  ASSIGN_OR_RETURN(config.dtype, root.String("dtype", config.dtype));
  if (!config.dtype.empty() && config.dtype != "float32" && config.dtype != "bfloat16" &&
      config.dtype != "float16") {
    return root.Error(
        root.Has("dtype") ? "dtype" : "torch_dtype",
        absl::StrCat("\"", config.dtype, "\" is not supported (float32, bfloat16, float16)"));
  }
  const std::string& type = config.model_type;
  if (type == "llava" || type == "llava_next") {
    config.kind = PretrainedKind::kLlava;
    RETURN_IF_ERROR(ReadLlava(root, config));
  } else if (IsVisionType(type) || type == "clip" || type == "siglip") {
    config.kind = PretrainedKind::kVisionTower;
    config.vision_model_type = IsVisionType(type) ? type : absl::StrCat(type, "_vision_model");
    if (IsVisionType(type)) {
      ASSIGN_OR_RETURN(config.vision, ReadVision(root, type));
    } else {
      ASSIGN_OR_RETURN(const Reader vision, root.Object("vision_config"));
      ASSIGN_OR_RETURN(config.vision, ReadVision(vision, config.vision_model_type));
    }
    // LLaVA's choice of features, as its CLIP (LLaVA-1.5) and SigLIP (LLaVA-OneVision) models make
    // it.
    const bool clip = config.vision_model_type == "clip_vision_model";
    config.vision->feature_layer = clip ? -2 : -1;
    config.vision->drop_first_feature = clip;
  } else if (IsLlmType(type)) {
    config.kind = PretrainedKind::kLlm;
    config.llm_model_type = type;
    ASSIGN_OR_RETURN(config.llm, ReadLlm(root, type));
    RETURN_IF_ERROR(ReadTokenIds(root, config));
  } else {
    return root.Error("model_type",
                      absl::StrCat("\"", type,
                                   "\" is not supported (llava, llava_next, clip_vision_model, "
                                   "siglip_vision_model, clip, siglip, llama, qwen2)"));
  }
  return config;
}

}  // namespace tandem::hf
