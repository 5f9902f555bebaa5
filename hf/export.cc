#include "hf/export.h"

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "data/image_preprocessor.h"
#include "data/tokenizer.h"
#include "engine/communicator.h"
#include "engine/engine.h"
#include "engine/safetensors.h"
#include "engine_config/config.h"
#include "engine_config/param_groups.h"
#include "hf/pretrained_config.h"
#include "hf/pretrained_job.h"
#include "hf/weight_names.h"
#include "jobspec/job_spec.h"
#include "models/llm.h"
#include "models/vision_encoder.h"
#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"

namespace tandem::hf {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

constexpr char kImageToken[] = "<image>";
// Tandem's word tokenizer splits off each ASCII punctuation character (data/tokenizer.h).
constexpr char kPunctuation[] = R"([!-/:-@\[-`{-~])";

// Copies tensors under Tandem's names into `module`'s parameters, checking every shape; `source`
// (a file or a checkpoint directory) names them in errors.
absl::Status CopyWeights(const std::map<std::string, at::Tensor>& by_name,
                         torch::nn::Module& module, const std::string& source) {
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    const auto it = by_name.find(item.key());
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": no weight '", item.key(), "' for the job's model"));
    }
    if (it->second.sizes() != item.value().sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": weight '", item.key(), "' has shape ", c10::str(it->second.sizes()),
          ", the job's model needs ", c10::str(item.value().sizes())));
    }
    item.value().copy_(it->second);
  }
  return absl::OkStatus();
}

// The run's final weights (vision.safetensors, llm.safetensors).
absl::Status LoadRunWeights(torch::nn::Module& module, const std::string& file) {
  ASSIGN_OR_RETURN(const auto tensors, engine::ReadSafetensors(file));
  return CopyWeights(std::map<std::string, at::Tensor>(tensors.begin(), tensors.end()), module,
                     file);
}

// A checkpoint of one group (<checkpoint>/vision or /llm, ZeRO shards of any world size) read into
// `module`: an engine of one rank takes the module over as training did (the group's engine
// config and freeze list), loads the shards, and the gathered fp32 values fill a fresh copy.
absl::Status LoadCheckpointWeights(std::shared_ptr<torch::nn::Module> training,
                                   torch::nn::Module& module, const std::string& engine_json,
                                   const std::vector<std::string>& freeze,
                                   const std::string& directory, const std::string& group) {
  auto json = nlohmann::json::parse(engine_json, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded())
    return absl::InvalidArgumentError(absl::StrCat(group, ".engine: not valid JSON"));
  ASSIGN_OR_RETURN(engine_config::Config config,
                   engine_config::ParseConfigJson(json, absl::StrCat(group, ".engine")));
  config.gradient_reduction = engine_config::GradientReduction::kSum;
  for (auto& item : training->named_parameters(/*recurse=*/true)) {
    for (const std::string& pattern : freeze) {
      if (engine_config::MatchesNamePattern(pattern, item.key()))
        item.value().set_requires_grad(false);
    }
  }
  ASSIGN_OR_RETURN(auto engine, engine::Engine::Create(
                                    training, engine::CreateSingleRankCommunicator(group), config));
  RETURN_IF_ERROR(engine->LoadCheckpoint(directory).status());
  ASSIGN_OR_RETURN(auto trainable, engine->GatherParameters());
  ASSIGN_OR_RETURN(auto frozen, engine->GatherFrozenParameters());
  std::map<std::string, at::Tensor> values(trainable.begin(), trainable.end());
  values.insert(frozen.begin(), frozen.end());
  return CopyWeights(values, module, directory);
}

// transformers' tensors of the vision tower and the projector.
absl::Status AddVisionTensors(const models::VisionEncoderImpl& vision, Tensors& out) {
  const auto& c = vision.config();
  std::vector<std::pair<std::string, at::Tensor>> ours;
  for (const auto& item : vision.named_parameters(/*recurse=*/true))
    ours.emplace_back(item.key(), item.value());
  if (c.positions == "sincos") ours.emplace_back("positions", vision.named_buffers()["positions"]);
  for (const auto& [name, value] : ours) {
    ASSIGN_OR_RETURN(const auto theirs, TheirVisionNames(name));
    at::Tensor tensor = value.detach().to(at::kFloat).contiguous();
    if (name == "class_token") tensor = tensor.reshape({c.hidden});
    if (name == "positions") tensor = tensor.reshape({-1, c.hidden});
    const auto pieces = tensor.chunk(static_cast<int64_t>(theirs.size()), 0);
    for (size_t i = 0; i < theirs.size(); ++i) {
      out.emplace_back(FullName(PretrainedKind::kLlava, theirs[i]), pieces[i].contiguous());
    }
  }
  if (!c.post_norm) {  // a SigLIP tower always has one; LLaVA never runs it
    out.emplace_back("vision_tower.post_layernorm.weight", torch::ones({c.hidden}));
    out.emplace_back("vision_tower.post_layernorm.bias", torch::zeros({c.hidden}));
  }
  return absl::OkStatus();
}

// transformers' tensors of the LLM; Tandem's own gets one more vocabulary row (zeros) for the
// image token.
absl::Status AddLlmTensors(const models::LlmImpl& llm, bool add_image_row, Tensors& out) {
  for (const auto& item : llm.named_parameters(/*recurse=*/true)) {
    ASSIGN_OR_RETURN(const auto theirs, TheirLlmNames(item.key()));
    at::Tensor tensor = item.value().detach().to(at::kFloat).contiguous();
    if (add_image_row && (item.key() == "embed.weight" || item.key() == "head.weight")) {
      tensor = torch::cat({tensor, torch::zeros({1, tensor.size(1)})}, 0);
    }
    out.emplace_back(FullName(PretrainedKind::kLlava, theirs[0]), tensor);
  }
  return absl::OkStatus();
}

std::string HfActivation(const std::string& activation) {
  return activation == "gelu_tanh" ? "gelu_pytorch_tanh" : activation;
}

// A tower with a class token and a pre-norm is CLIP's; Tandem's own and SigLIP's are SigLIP's.
// The LLM's special token ids, as config.json carries them.
struct TokenIds {
  Json bos = data::Tokenizer::kBos;  // a number or null
  Json eos = data::Tokenizer::kEos;  // a number or a list
  Json pad = data::Tokenizer::kPad;  // a number or null
};

Json RopeParameters(const models::LlmConfig& m) {
  Json rope = {{"rope_type", m.rope_scaling.type}, {"rope_theta", m.rope_theta}};
  if (m.rope_scaling.type != "default") rope["factor"] = m.rope_scaling.factor;
  if (m.rope_scaling.type == "llama3") {
    rope["low_freq_factor"] = m.rope_scaling.low_freq_factor;
    rope["high_freq_factor"] = m.rope_scaling.high_freq_factor;
    rope["original_max_position_embeddings"] = m.rope_scaling.original_max_positions;
  }
  return rope;
}

// `m.vocab_size` counts every row the exported LLM has; Qwen2 is the Llama with q/k/v biases.
Json LlavaConfig(const models::VisionConfig& v, const models::LlmConfig& m, int64_t image_token,
                 const TokenIds& ids) {
  const bool clip = v.class_token;
  Json vision = {{"model_type", clip ? "clip_vision_model" : "siglip_vision_model"},
                 {"hidden_size", v.hidden},
                 {"intermediate_size", v.mlp_hidden},
                 {"num_hidden_layers", v.layers},
                 {"num_attention_heads", v.heads},
                 {"num_channels", v.channels},
                 {"image_size", v.image_size},
                 {"patch_size", v.patch_size},
                 {"hidden_act", HfActivation(v.activation)},
                 {"layer_norm_eps", v.norm_eps},
                 {"attention_dropout", 0.0}};
  if (!clip) vision["vision_use_head"] = v.pooling_head;
  Json text = {{"model_type", m.attention_bias ? "qwen2" : "llama"},
               {"vocab_size", m.vocab_size},
               {"hidden_size", m.hidden},
               {"intermediate_size", m.mlp_hidden},
               {"num_hidden_layers", m.layers},
               {"num_attention_heads", m.heads},
               {"num_key_value_heads", m.kv_heads},
               {"head_dim", m.resolved_head_dim()},
               {"max_position_embeddings", m.max_seq_len},
               {"rms_norm_eps", m.norm_eps},
               {"rope_theta", m.rope_theta},
               {"rope_parameters", RopeParameters(m)},
               {"hidden_act", "silu"},
               {"tie_word_embeddings", m.tie_embeddings},
               {"bos_token_id", ids.bos},
               {"eos_token_id", ids.eos},
               {"pad_token_id", ids.pad}};
  if (!m.attention_bias) {
    text["attention_bias"] = false;
    text["mlp_bias"] = false;
  } else {
    text["use_sliding_window"] = false;
  }
  Json config = {{"architectures", {"LlavaForConditionalGeneration"}},
                 {"model_type", "llava"},
                 {"dtype", "float32"},
                 {"image_token_index", image_token},
                 {"image_seq_length", v.num_features()},
                 {"vision_feature_layer", v.feature_layer},
                 {"vision_feature_select_strategy", v.drop_first_feature ? "default" : "full"},
                 {"projector_hidden_act", HfActivation(v.projector_activation)},
                 {"multimodal_projector_bias", true},
                 {"tie_word_embeddings", m.tie_embeddings},
                 {"vision_config", vision},
                 {"text_config", text}};
  if (v.any_res()) {
    config["architectures"] = {"LlavaNextForConditionalGeneration"};
    config["model_type"] = "llava_next";
    Json pinpoints = Json::array();
    for (const data::Resolution& p : v.grid_pinpoints) pinpoints.push_back({p.height, p.width});
    config["image_grid_pinpoints"] = pinpoints;
  }
  return config;
}

Json AddedToken(int64_t id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// Tandem's word tokenizer as a tokenizers WordLevel model, with <image> after its words.
Json TokenizerJson(const data::Tokenizer& t, int64_t image_token) {
  Json vocab = Json::object();
  for (size_t i = 0; i < t.words().size(); ++i) vocab[t.words()[i]] = static_cast<int64_t>(i);
  vocab[kImageToken] = image_token;
  Json added = Json::array();
  for (int32_t id = 0; id < data::Tokenizer::kNumSpecial; ++id)
    added.push_back(AddedToken(id, t.Word(id)));
  added.push_back(AddedToken(image_token, kImageToken));
  const std::string bos = t.Word(data::Tokenizer::kBos);
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "Lowercase"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "WhitespaceSplit"}},
          {{"type", "Split"},
           {"pattern", {{"Regex", kPunctuation}}},
           {"behavior", "Isolated"},
           {"invert", false}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}}}},
        {"pair",
         {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}},
          {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}}}},
        {"special_tokens",
         {{bos, {{"id", bos}, {"ids", {data::Tokenizer::kBos}}, {"tokens", {bos}}}}}}}},
      {"decoder", nullptr},
      {"model",
       {{"type", "WordLevel"}, {"vocab", vocab}, {"unk_token", t.Word(data::Tokenizer::kUnk)}}}};
}

absl::Status WriteJson(const fs::path& path, const Json& json) {
  return WriteFileAtomically(path.string(), json.dump(2) + "\n");
}

// The copied tokenizer files gain the "<image>" token the job added after the vocabulary
// (hf/pretrained_job.h), unless they have it.
absl::Status AddImageToken(const fs::path& dir, int64_t id) {
  ASSIGN_OR_RETURN(const tokenizer::HfTokenizer copied, tokenizer::HfTokenizer::Load(dir.string()));
  if (copied.TokenToId(kImageToken)) return absl::OkStatus();
  const auto patch = [&](const fs::path& path, const auto& change) -> absl::Status {
    ASSIGN_OR_RETURN(const std::string text, ReadFile(path.string()));
    Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!json.is_object())
      return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a JSON object"));
    change(json);
    return WriteJson(path, json);
  };
  const fs::path tokenizer = dir / "tokenizer.json";
  RETURN_IF_ERROR(patch(tokenizer, [&](Json& json) {
    if (!json.contains("added_tokens") || !json["added_tokens"].is_array())
      json["added_tokens"] = Json::array();
    json["added_tokens"].push_back(AddedToken(id, kImageToken));
  }));
  std::error_code ec;
  if (!fs::exists(dir / "tokenizer_config.json", ec)) return absl::OkStatus();
  return patch(dir / "tokenizer_config.json", [&](Json& json) {
    if (!json.contains("added_tokens_decoder") || !json["added_tokens_decoder"].is_object()) return;
    Json token = AddedToken(id, kImageToken);
    token.erase("id");
    json["added_tokens_decoder"][std::to_string(id)] = token;
  });
}

// model.safetensors, or shards of at most max_bytes each with their index.
absl::Status WriteShards(const fs::path& dir, const Tensors& tensors, int64_t max_bytes) {
  std::vector<Tensors> shards(1);
  int64_t bytes = 0, total = 0;
  for (const auto& item : tensors) {
    const int64_t size = item.second.numel() * static_cast<int64_t>(item.second.element_size());
    if (bytes > 0 && bytes + size > max_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(item);
    bytes += size;
    total += size;
  }
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  if (shards.size() == 1)
    return engine::WriteSafetensors((dir / "model.safetensors").string(), shards[0], metadata);
  Json weight_map = Json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    RETURN_IF_ERROR(engine::WriteSafetensors((dir / name).string(), shards[i], metadata));
    for (const auto& item : shards[i]) weight_map[item.first] = name;
  }
  return WriteJson(dir / "model.safetensors.index.json",
                   {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
}

// Where a run's or a checkpoint's files are: job.json is the run's; a checkpoint
// (<run>/checkpoints/step-N, with its "complete" marker) has its own tokenizer.json and shards.
struct Source {
  fs::path run;
  fs::path checkpoint;  // empty for the run's final weights
};

absl::StatusOr<Source> FindSource(const std::string& directory) {
  const fs::path dir(directory);
  std::error_code ec;
  if (fs::exists(dir / "job.json", ec)) return Source{dir, {}};
  const fs::path run = dir.parent_path().parent_path();
  if (fs::exists(dir / "vision", ec) && fs::exists(dir / "llm", ec) &&
      fs::exists(run / "job.json", ec)) {
    if (!fs::exists(dir / "complete", ec)) {
      return absl::FailedPreconditionError(
          absl::StrCat(directory, ": an incomplete checkpoint (no complete marker)"));
    }
    return Source{run, dir};
  }
  return absl::NotFoundError(absl::StrCat(directory,
                                          ": neither a run directory (job.json) nor one of its "
                                          "checkpoints (checkpoints/step-N)"));
}

absl::Status Export(const ExportOptions& options, const fs::path& dir) {
  ASSIGN_OR_RETURN(const Source source, FindSource(options.run_dir));
  const fs::path& run = source.run;
  const fs::path weights = source.checkpoint.empty() ? run : source.checkpoint;
  ASSIGN_OR_RETURN(jobspec::ResolvedJobSpec spec,
                   jobspec::ReadJobSpecFile((run / "job.json").string()));
  jobspec::JobConfig job = std::move(spec.config);
  RETURN_IF_ERROR(ResolvePretrainedModels(job));
  const bool own_llm = job.llm.pretrained.empty();
  std::optional<data::Tokenizer> words;
  if (own_llm) {
    ASSIGN_OR_RETURN(words, data::Tokenizer::Load((weights / "tokenizer.json").string()));
  }
  models::VisionConfig v = job.vision.model;
  models::LlmConfig m = job.llm.model;
  v.output_dim = m.hidden;
  // The export's "<image>" is the id after the words: conversations trained with it
  // (data::TextCodec::WordsAtMarks); captions read a prefix, which LLaVA's layout puts at that
  // token, so their export adds its embedding row. `m` is first the vocabulary as trained.
  const bool new_image_row = own_llm && !jobspec::ConversationData(job.data);
  if (own_llm) m.vocab_size = words->size() + (new_image_row ? 0 : 1);
  if (v.final_norm || v.projector != "mlp2x") {
    return absl::FailedPreconditionError(
        absl::StrCat(options.run_dir, ": the run's vision model has ",
                     v.final_norm ? "a LayerNorm before its projector" : "a linear projector",
                     ", a layout Hugging Face's LLaVA cannot express (models/README.md)"));
  }
  torch::manual_seed(0);
  models::VisionEncoder vision(v);
  models::Llm llm(m);
  if (source.checkpoint.empty()) {
    for (const char* file : {"vision.safetensors", "llm.safetensors"}) {
      std::error_code ec;
      if (!fs::exists(run / file, ec)) {
        return absl::FailedPreconditionError(
            absl::StrCat(options.run_dir, ": no ", file,
                         ": the run has not finished (its final weights are "
                         "written at the end; export one of its checkpoints)"));
      }
    }
    RETURN_IF_ERROR(LoadRunWeights(*vision, (run / "vision.safetensors").string()));
    RETURN_IF_ERROR(LoadRunWeights(*llm, (run / "llm.safetensors").string()));
  } else {
    RETURN_IF_ERROR(LoadCheckpointWeights(models::VisionEncoder(v).ptr(), *vision,
                                          job.vision.engine_json, job.vision.freeze,
                                          (source.checkpoint / "vision").string(), "vision"));
    RETURN_IF_ERROR(LoadCheckpointWeights(models::Llm(m).ptr(), *llm, job.llm.engine_json,
                                          job.llm.freeze, (source.checkpoint / "llm").string(),
                                          "llm"));
  }

  Tensors tensors;
  RETURN_IF_ERROR(AddVisionTensors(*vision, tensors));
  RETURN_IF_ERROR(AddLlmTensors(*llm, new_image_row, tensors));
  RETURN_IF_ERROR(WriteShards(dir, tensors, options.max_shard_bytes));
  if (own_llm) {
    const int64_t image_token = words->size();
    if (new_image_row) m.vocab_size += 1;
    RETURN_IF_ERROR(WriteJson(dir / "config.json", LlavaConfig(v, m, image_token, TokenIds{})));
    RETURN_IF_ERROR(
        WriteJson(dir / "generation_config.json", {{"bos_token_id", data::Tokenizer::kBos},
                                                   {"eos_token_id", data::Tokenizer::kEos},
                                                   {"pad_token_id", data::Tokenizer::kPad}}));
    RETURN_IF_ERROR(WriteJson(dir / "tokenizer.json", TokenizerJson(*words, image_token)));
    RETURN_IF_ERROR(WriteJson(dir / "tokenizer_config.json",
                              {{"tokenizer_class", "PreTrainedTokenizerFast"},
                               {"bos_token", words->Word(data::Tokenizer::kBos)},
                               {"eos_token", words->Word(data::Tokenizer::kEos)},
                               {"pad_token", words->Word(data::Tokenizer::kPad)},
                               {"unk_token", words->Word(data::Tokenizer::kUnk)},
                               {"model_max_length", m.max_seq_len},
                               {"chat_template", tokenizer::kTandemChatTemplate}}));
  } else {
    // The pretrained LLM's ids, and its tokenizer files as they are.
    ASSIGN_OR_RETURN(const PretrainedConfig pretrained, ReadPretrainedConfig(job.llm.pretrained));
    TokenIds ids;
    ids.bos = pretrained.bos_token_id >= 0 ? Json(pretrained.bos_token_id) : Json(nullptr);
    const auto& eos = pretrained.eos_token_ids;
    ids.eos = eos.empty() ? Json(nullptr) : eos.size() == 1 ? Json(eos[0]) : Json(eos);
    ids.pad = pretrained.pad_token_id >= 0 ? Json(pretrained.pad_token_id) : Json(nullptr);
    RETURN_IF_ERROR(WriteJson(dir / "config.json", LlavaConfig(v, m, m.image_token_id, ids)));
    for (const char* file :
         {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
          "chat_template.jinja", "chat_template.json", "generation_config.json"}) {
      std::error_code ec;
      const fs::path from = fs::path(job.llm.pretrained) / file;
      if (!fs::exists(from, ec)) continue;
      fs::copy_file(from, dir / file, ec);
      if (ec) return absl::InternalError(absl::StrCat(from.string(), ": ", ec.message()));
    }
    RETURN_IF_ERROR(AddImageToken(dir, m.image_token_id));
  }
  if (!job.vision.pretrained.empty()) {  // the tower's own preprocessing
    ASSIGN_OR_RETURN(const std::string settings,
                     data::ModelImagePreprocessorJson(job.vision.pretrained));
    return WriteFileAtomically((dir / "preprocessor_config.json").string(), settings + "\n");
  }
  return WriteFileAtomically(
      (dir / "preprocessor_config.json").string(),
      data::OwnTowerPreprocessorJson(v.image_size, v.image_mean, v.image_std, v.grid_pinpoints) +
          "\n");
}

}  // namespace

bool IsRunDirectory(const std::string& directory) { return FindSource(directory).ok(); }

absl::Status ExportRunAsLlava(const ExportOptions& options) {
  RETURN_IF_ERROR(FindSource(options.run_dir).status());
  if (options.max_shard_bytes <= 0)
    return absl::InvalidArgumentError("the shard size must be positive");
  fs::path out = fs::path(options.out_dir).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "dir/" names "dir"
  std::error_code ec;
  if (fs::exists(out, ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat(options.out_dir, ": exists; name a new directory"));
  }
  const fs::path temp = out.parent_path() /
                        absl::StrCat(".", out.filename().string(), ".tmp-", std::random_device{}());
  fs::create_directories(temp, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(temp.string(), ": ", ec.message()));
  absl::Status status;
  try {
    status = Export(options, temp);
  } catch (const c10::Error& e) {
    status = absl::InternalError(absl::StrCat("export: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    status = absl::InternalError(absl::StrCat("export: ", e.what()));
  }
  if (status.ok()) {
    fs::rename(temp, out, ec);
    if (ec) status = absl::InternalError(absl::StrCat(options.out_dir, ": ", ec.message()));
  }
  if (!status.ok()) fs::remove_all(temp, ec);
  return status;
}

}  // namespace tandem::hf
