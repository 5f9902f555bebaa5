// Every rule of a job spec, in two passes that stop at the first violation: ValidateJobSpec on the
// message (what is given together with what), then ValidateJobConfig on the resolved values, in
// the order of the spec (name, data, vision, llm, schedule, engines).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strict_json.h"
#include "engine_config/config.h"
#include "jobspec/errors.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_proto.h"
#include "jobspec/presets.h"
#include "nlohmann/json.hpp"

namespace tandem::jobspec {
namespace {

using internal::JoinPath;
using internal::PathError;
using internal::Quoted;
using internal::Sv;

absl::Status AtLeast(std::string_view path, int64_t value, int64_t min) {
  if (value < min) return PathError(path, "must be >= ", min, ", got ", value);
  return absl::OkStatus();
}

// Upper bounds far beyond any real job, so that no number in a spec can make the coordinator
// reserve memory, overflow or loop without end (proto/tandem/v1/job.proto states them).
constexpr int64_t kMaxSteps = 1'000'000'000;
constexpr int64_t kMaxSamples = 1'000'000'000;
constexpr int64_t kMaxGlobalBatch = 1 << 20;
constexpr int64_t kMaxTextTokens = 1 << 20;
constexpr int64_t kMaxImagesPerSample = 1024;
constexpr int64_t kMaxActors = 4096;
constexpr int64_t kMaxRestarts = 1000;

absl::Status Between(std::string_view path, int64_t value, int64_t min, int64_t max) {
  RETURN_IF_ERROR(AtLeast(path, value, min));
  if (value > max) return PathError(path, "must be <= ", max, ", got ", value);
  return absl::OkStatus();
}

absl::Status Positive(std::string_view path, double value) {
  if (!std::isfinite(value) || value <= 0) return PathError(path, "must be > 0, got ", value);
  return absl::OkStatus();
}

bool IsNameChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

absl::Status CheckName(const std::string& name) {
  if (name.empty()) return PathError("name", "is required (it names the run directory)");
  if (name.size() > kMaxNameLength) {
    return PathError("name", "must be at most ", kMaxNameLength, " characters, got ", name.size());
  }
  if (!std::all_of(name.begin(), name.end(), IsNameChar) || name == "." || name == "..") {
    return PathError(
        "name",
        "must be a file name of the characters A-Z a-z 0-9 . _ - (not \".\" or \"..\"), got ",
        Quoted(name));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPoolName(std::string_view pool) {
  if (pool.empty()) return absl::InvalidArgumentError("must not be empty");
  if (pool.size() > kMaxPoolNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("must be at most ", kMaxPoolNameLength, " characters, got ", pool.size()));
  }
  if (!std::all_of(pool.begin(), pool.end(), IsNameChar)) {
    return absl::InvalidArgumentError(
        absl::StrCat("must be of the characters A-Z a-z 0-9 . _ -, got ", Quoted(pool)));
  }
  return absl::OkStatus();
}

namespace {

// One data set's own fields; `at` prefixes their key paths ("data", "data.mixture.sources[1]").
absl::Status CheckSource(const data::DataConfig& data, const std::string& at) {
  const auto key = [&](const char* rest) { return absl::StrCat(at, ".", rest); };
  switch (data.kind) {
    case data::DataConfig::Kind::kShapes:
      RETURN_IF_ERROR(
          Between(key("shapes.train_samples"), data.shapes.train_samples, 1, kMaxSamples));
      RETURN_IF_ERROR(
          Between(key("shapes.eval_samples"), data.shapes.eval_samples, 1, kMaxSamples));
      break;
    case data::DataConfig::Kind::kJsonl:
      if (data.jsonl.train_path.empty()) return PathError(key("jsonl.train"), "is required");
      break;
    case data::DataConfig::Kind::kConversations:
      if (data.conversations.train_path.empty())
        return PathError(key("conversations.train"), "is required");
      break;
    case data::DataConfig::Kind::kShards:
      if (data.shards.train_pattern.empty()) return PathError(key("shards.train"), "is required");
      RETURN_IF_ERROR(
          Between(key("shards.shuffle_buffer"), data.shards.shuffle_buffer, 1, kMaxSamples));
      break;
    case data::DataConfig::Kind::kMixture:
      break;
  }
  return absl::OkStatus();
}

absl::Status CheckMixture(const data::DataConfig& data) {
  const std::vector<data::MixtureSource>& sources = data.mixture;
  if (sources.empty()) return PathError("data.mixture.sources", "needs at least one source");
  std::set<std::string> names;
  for (size_t i = 0; i < sources.size(); ++i) {
    const data::MixtureSource& source = sources[i];
    const std::string at = absl::StrCat("data.mixture.sources[", i, "]");
    if (source.name.empty() || source.name.size() > 64 ||
        !std::all_of(source.name.begin(), source.name.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '-' || c == '_'; })) {
      return PathError(at + ".name", "must be 1 to 64 letters, digits, '-' or '_', got ",
                       Quoted(source.name));
    }
    if (!names.insert(source.name).second)
      return PathError(at + ".name", Quoted(source.name), " names an earlier source too");
    if (!std::isfinite(source.weight) || source.weight <= 0)
      return PathError(at + ".weight", "must be > 0, got ", source.weight);
    if (source.kind == data::DataConfig::Kind::kMixture)
      return PathError(at, "needs shapes, jsonl, conversations or shards");
    RETURN_IF_ERROR(CheckSource(data::SourceConfig(data, source), at));
  }
  return absl::OkStatus();
}

absl::Status CheckData(const data::DataConfig& data) {
  RETURN_IF_ERROR(CheckSource(data, "data"));
  if (data.kind == data::DataConfig::Kind::kMixture) RETURN_IF_ERROR(CheckMixture(data));
  if (data.max_text_tokens < 2) {
    return PathError("data.max_text_tokens", "must be >= 2 (<bos> and <eos> count), got ",
                     data.max_text_tokens);
  }
  if (data.max_text_tokens > kMaxTextTokens) {
    return PathError("data.max_text_tokens", "must be <= ", kMaxTextTokens, ", got ",
                     data.max_text_tokens);
  }
  RETURN_IF_ERROR(
      Between("data.max_images_per_sample", data.max_images_per_sample, 1, kMaxImagesPerSample));
  RETURN_IF_ERROR(Between("data.video_frames", data.video_frames, 1, kMaxImagesPerSample));
  if (data.pack_tokens != 0)
    RETURN_IF_ERROR(Between("data.pack_tokens", data.pack_tokens, 2, kMaxTextTokens));
  RETURN_IF_ERROR(Between("data.workers", data.workers, 1, 256));
  return absl::OkStatus();
}

absl::Status CheckGroup(std::string_view group, const std::string& pool, int32_t actors) {
  if (absl::Status bad = CheckPoolName(pool); !bad.ok())
    return PathError(JoinPath(group, "pool"), bad.message());
  return Between(JoinPath(group, "actors"), actors, 1, kMaxActors);
}

// `a` must be a multiple of `b` (b >= 1 already checked): "<path_a>: must be a multiple of <name_b>
// (b), got a".
absl::Status MultipleOf(std::string_view path_a, int64_t a, std::string_view name_b, int64_t b) {
  if (a % b != 0)
    return PathError(path_a, "must be a multiple of ", Sv(name_b), " (", b, "), got ", a);
  return absl::OkStatus();
}

absl::Status CheckVisionModel(const models::VisionConfig& m, const models::LlmConfig& llm) {
  RETURN_IF_ERROR(Between("vision.model.image_size", m.image_size, 1, models::kMaxImageSize));
  if (m.channels != 3) {
    return PathError("vision.model.channels", "must be 3 (the datasets produce RGB images), got ",
                     m.channels);
  }
  RETURN_IF_ERROR(Between("vision.model.patch_size", m.patch_size, 1, models::kMaxImageSize));
  RETURN_IF_ERROR(Between("vision.model.hidden", m.hidden, 1, models::kMaxWidth));
  RETURN_IF_ERROR(Between("vision.model.layers", m.layers, 1, models::kMaxLayers));
  RETURN_IF_ERROR(Between("vision.model.heads", m.heads, 1, models::kMaxHeads));
  RETURN_IF_ERROR(Between("vision.model.mlp_hidden", m.mlp_hidden, 1, models::kMaxMlpWidth));
  RETURN_IF_ERROR(MultipleOf("vision.model.image_size", m.image_size, "patch_size", m.patch_size));
  RETURN_IF_ERROR(MultipleOf("vision.model.hidden", m.hidden, "heads", m.heads));
  if (m.positions != "learned" && m.positions != "sincos") {
    return PathError("vision.model.positions", "must be \"learned\" or \"sincos\", got ",
                     Quoted(m.positions));
  }
  RETURN_IF_ERROR(Positive("vision.model.norm_eps", m.norm_eps));
  if (m.output_dim != llm.hidden) {
    return PathError("vision.model.output_dim", "must equal llm.model.hidden (", llm.hidden,
                     "), got ", m.output_dim);
  }
  return absl::OkStatus();
}

// Each side of each pinpoint a multiple of the tile (the shape of each entry is ValidateJobSpec's).
absl::Status CheckGridPinpoints(const models::VisionConfig& m) {
  for (size_t i = 0; i < m.grid_pinpoints.size(); ++i) {
    const data::Resolution& p = m.grid_pinpoints[i];
    if (p.height % m.image_size != 0 || p.width % m.image_size != 0) {
      return PathError(absl::StrCat("vision.model.grid_pinpoints[", i, "]"), p.height, " x ",
                       p.width, " is not a multiple of vision.model.image_size (", m.image_size,
                       ") both ways");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLlmModel(const models::LlmConfig& m) {
  RETURN_IF_ERROR(Between("llm.model.hidden", m.hidden, 1, models::kMaxWidth));
  RETURN_IF_ERROR(Between("llm.model.layers", m.layers, 1, models::kMaxLayers));
  RETURN_IF_ERROR(Between("llm.model.heads", m.heads, 1, models::kMaxHeads));
  RETURN_IF_ERROR(Between("llm.model.kv_heads", m.kv_heads, 1, models::kMaxHeads));
  RETURN_IF_ERROR(Between("llm.model.mlp_hidden", m.mlp_hidden, 1, models::kMaxMlpWidth));
  RETURN_IF_ERROR(Between("llm.model.max_seq_len", m.max_seq_len, 1, models::kMaxSequence));
  RETURN_IF_ERROR(Between("llm.model.head_dim", m.head_dim, 0, models::kMaxWidth));
  RETURN_IF_ERROR(MultipleOf("llm.model.hidden", m.hidden, "heads", m.heads));
  RETURN_IF_ERROR(MultipleOf("llm.model.heads", m.heads, "kv_heads", m.kv_heads));
  if ((m.hidden / m.heads) % 2 != 0) {
    return PathError("llm.model.hidden",
                     "the head size hidden / heads must be even for rotary positions, got ",
                     m.hidden, " / ", m.heads, " = ", m.hidden / m.heads);
  }
  RETURN_IF_ERROR(Positive("llm.model.rope_theta", m.rope_theta));
  RETURN_IF_ERROR(Positive("llm.model.norm_eps", m.norm_eps));
  return Between("llm.model.vocab_size", m.vocab_size, 0, models::kMaxVocabulary);
}

// How messages name a group's data-parallel ranks: "llm.actors", or "llm.actors /
// llm.parallel.tensor".
std::string ReplicasName(std::string_view group, int32_t degree, std::string_view dimension) {
  if (degree == 1) return JoinPath(group, "actors");
  return absl::StrCat(JoinPath(group, "actors"), " / ",
                      JoinPath(JoinPath(group, "parallel"), dimension));
}

// `degree` ranks of `group` split each model along `dimension`: it divides the group's actors.
absl::Status CheckDegree(std::string_view group, std::string_view dimension, int32_t degree,
                         int32_t actors) {
  const std::string path = JoinPath(JoinPath(group, "parallel"), dimension);
  RETURN_IF_ERROR(Between(path, degree, 1, kMaxActors));
  if (actors % degree != 0) {
    return PathError(path, "must divide ", JoinPath(group, "actors"), " (", actors,
                     ") into replicas of ", degree, " ranks, got ", degree);
  }
  return absl::OkStatus();
}

// Sequence parallelism splits the vision heads and every image's positions.
absl::Status CheckSequenceParallel(const VisionGroupConfig& v) {
  RETURN_IF_ERROR(CheckDegree("vision", "sequence", v.sequence_parallel, v.actors));
  const int32_t s = v.sequence_parallel;
  if (s == 1 || !v.pretrained.empty())
    return absl::OkStatus();  // a tower's shape is checked on load
  if (v.model.heads % s != 0) {
    return PathError("vision.parallel.sequence", "must divide vision.model.heads (", v.model.heads,
                     "), got ", s);
  }
  if (v.model.num_positions() % s != 0) {
    return PathError("vision.parallel.sequence", "must divide the ", v.model.num_positions(),
                     " positions of an image ((image_size / patch_size)^2), got ", s);
  }
  return absl::OkStatus();
}

// Tensor parallelism splits the heads, the MLP and the vocabulary (NOTE [Tensor-parallel LLM]).
absl::Status CheckTensorParallel(const LlmGroupConfig& l) {
  RETURN_IF_ERROR(CheckDegree("llm", "tensor", l.tensor_parallel, l.actors));
  const int32_t t = l.tensor_parallel;
  if (t == 1 || !l.pretrained.empty())
    return absl::OkStatus();  // a pretrained shape is checked on load
  const models::LlmConfig& m = l.model;
  if (m.heads % t != 0)
    return PathError("llm.parallel.tensor", "must divide llm.model.heads (", m.heads, "), got ", t);
  if (m.kv_heads % t != 0 && t % m.kv_heads != 0) {
    return PathError("llm.parallel.tensor", "must divide llm.model.kv_heads (", m.kv_heads,
                     ") or be a multiple of it (each KV head then serves ", "several ranks), got ",
                     t);
  }
  if (m.mlp_hidden % t != 0) {
    return PathError("llm.parallel.tensor", "must divide llm.model.mlp_hidden (", m.mlp_hidden,
                     "), got ", t);
  }
  return absl::OkStatus();
}

absl::Status CheckSchedule(const JobConfig& c) {
  const ScheduleConfig& s = c.schedule;
  RETURN_IF_ERROR(Between("schedule.global_batch", s.global_batch, 1, kMaxGlobalBatch));
  RETURN_IF_ERROR(Between("schedule.micro_batches", s.micro_batches, 1, kMaxGlobalBatch));
  RETURN_IF_ERROR(Between("schedule.steps", s.steps, 1, kMaxSteps));
  RETURN_IF_ERROR(AtLeast("schedule.eval_every", s.eval_every, 0));
  RETURN_IF_ERROR(Between("schedule.eval_samples", s.eval_samples, 0, kMaxSamples));
  RETURN_IF_ERROR(AtLeast("schedule.checkpoint_every", s.checkpoint_every, 0));
  if (!std::isfinite(s.gradient_clipping) || s.gradient_clipping < 0) {
    return PathError("schedule.gradient_clipping", "must be a finite number >= 0, got ",
                     s.gradient_clipping);
  }
  RETURN_IF_ERROR(MultipleOf("schedule.global_batch", s.global_batch, "schedule.micro_batches",
                             s.micro_batches));
  // docs/design.md §2: each micro-batch is split into contiguous blocks over the data-parallel
  // ranks of each group (the ranks of one tensor- or sequence-parallel set share their block).
  const int64_t micro = s.global_batch / s.micro_batches;
  const bool vision_larger = c.vision.replicas() >= c.llm.replicas();
  const int64_t ranks = vision_larger ? c.vision.replicas() : c.llm.replicas();
  if (micro < ranks) {
    return PathError("schedule.global_batch",
                     "a micro-batch (global_batch / micro_batches = ", s.global_batch, " / ",
                     s.micro_batches, " = ", micro,
                     " samples) must hold at least one sample for every data-parallel rank (",
                     vision_larger ? ReplicasName("vision", c.vision.sequence_parallel, "sequence")
                                   : ReplicasName("llm", c.llm.tensor_parallel, "tensor"),
                     " = ", ranks, ")");
  }
  if (c.data.kind == data::DataConfig::Kind::kShapes &&
      s.eval_samples > c.data.shapes.eval_samples) {
    return PathError("schedule.eval_samples", "must be <= data.shapes.eval_samples (",
                     c.data.shapes.eval_samples, "), got ", s.eval_samples);
  }
  return absl::OkStatus();
}

// The group's engine config must parse with the engine's strict parser and agree with the schedule.
// `actors` are the group's data-parallel ranks, named `ranks_name` in messages.
absl::Status CheckEngine(std::string_view group, const std::string& engine_json, int32_t actors,
                         std::string_view ranks_name, const ScheduleConfig& s) {
  const std::string path = JoinPath(group, "engine");
  absl::StatusOr<nlohmann::json> document = ParseJsonStrict(engine_json);
  if (!document.ok()) return PathError(path, document.status().message());
  if (!document->is_object())
    return PathError(path, "must be an object, got ", DescribeJsonValue(*document));
  ASSIGN_OR_RETURN(engine_config::Config config,
                   engine_config::ParseConfigJson(*document, absl::StrCat(path, ".")));

  if (s.gradient_clipping > 0 && config.gradient_clipping > 0) {
    return PathError(JoinPath(path, "gradient_clipping"),
                     "must be 0 or left out when schedule.gradient_clipping (", s.gradient_clipping,
                     ") clips by the norm of both groups together, got ", config.gradient_clipping);
  }
  const int64_t micro = s.global_batch / s.micro_batches;
  if (config.train_batch_size && *config.train_batch_size != s.global_batch) {
    return PathError(JoinPath(path, "train_batch_size"), "must equal schedule.global_batch (",
                     s.global_batch, ") or be left out, got ", *config.train_batch_size);
  }
  if (config.gradient_accumulation_steps_given &&
      config.gradient_accumulation_steps != s.micro_batches) {
    return PathError(JoinPath(path, "gradient_accumulation_steps"),
                     "must equal schedule.micro_batches (", s.micro_batches,
                     ") or be left out, got ", config.gradient_accumulation_steps);
  }
  if (config.train_micro_batch_size_per_gpu) {
    const std::string key = JoinPath(path, "train_micro_batch_size_per_gpu");
    const int64_t given = *config.train_micro_batch_size_per_gpu;
    if (micro % actors != 0) {
      return PathError(key, "must be left out: a micro-batch of ", micro,
                       " samples (global_batch / micro_batches) does not split evenly over ",
                       Sv(ranks_name), " = ", actors, ", so ranks get different sizes; got ",
                       given);
    }
    if (given != micro / actors) {
      return PathError(key, "must equal schedule.global_batch / schedule.micro_batches / ",
                       Sv(ranks_name), " = ", s.global_batch, " / ", s.micro_batches, " / ", actors,
                       " = ", micro / actors, " or be left out, got ", given);
    }
  }
  // engine_config::Config cannot tell an explicit "mean" from the default, so look at the JSON
  // itself.
  auto tandem = document->find("tandem");
  if (tandem != document->end() && tandem->is_object()) {
    auto reduction = tandem->find("gradient_reduction");
    if (reduction != tandem->end() && *reduction != "sum") {
      return PathError(
          JoinPath(path, "tandem.gradient_reduction"), "must be \"sum\" or left out, got ",
          reduction->dump(),
          ": the trainer normalises the loss over the global batch's tokens, so gradients are "
          "summed across ranks and micro-batches, never averaged");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFreeze(std::string_view group, const std::vector<std::string>& freeze) {
  for (size_t i = 0; i < freeze.size(); ++i) {
    if (freeze[i].empty()) {
      return PathError(absl::StrCat(JoinPath(group, "freeze"), "[", i, "]"),
                       "must be a non-empty name pattern");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobConfig(const JobConfig& config) {
  RETURN_IF_ERROR(CheckName(config.name));
  RETURN_IF_ERROR(CheckData(config.data));
  RETURN_IF_ERROR(CheckGroup("vision", config.vision.pool, config.vision.actors));
  // A pretrained tower's shape is known where its config.json is read (hf::ResolvePretrainedModels
  // checks it and the sequence budget there).
  const bool pretrained = !config.vision.pretrained.empty() || !config.llm.pretrained.empty();
  if (config.vision.pretrained.empty()) {
    RETURN_IF_ERROR(CheckVisionModel(config.vision.model, config.llm.model));
    RETURN_IF_ERROR(CheckGridPinpoints(config.vision.model));
    if (config.vision.model.any_res() && !ImagesAtTheirOwnSize(config.data)) {
      return PathError("vision.model.grid_pinpoints",
                       "reads each image at its own size: it needs conversation files "
                       "(data.conversations) or shards (data.shards)");
    }
  }
  RETURN_IF_ERROR(CheckGroup("llm", config.llm.pool, config.llm.actors));
  if (config.llm.pretrained.empty()) RETURN_IF_ERROR(CheckLlmModel(config.llm.model));
  // The LLM's row holds the images' features and the text tokens.
  const int64_t features = ImagePositions(config.vision.model);
  const int64_t needed = LlmRowPositions(config);
  if (!pretrained && config.llm.model.max_seq_len < needed) {
    const int64_t images = config.data.max_images_per_sample;
    return PathError("llm.model.max_seq_len", "must be >= the image features (",
                     images == 1
                         ? absl::StrCat(features)
                         : absl::StrCat("data.max_images_per_sample ", images, " x ", features),
                     ") + data.max_text_tokens (", config.data.max_text_tokens, ") = ", needed,
                     ", got ", config.llm.model.max_seq_len);
  }
  if (config.data.pack_tokens > 0 && config.llm.pretrained.empty() &&
      !ConversationData(config.data)) {
    return PathError("data.pack_tokens",
                     "needs conversations (data.conversations or data.shapes.conversations) or a "
                     "pretrained LLM (llm.pretrained): an LLM trained from scratch reads a "
                     "caption's image as a prefix of its row, so caption rows cannot be packed");
  }
  if (!pretrained && config.data.pack_tokens > config.llm.model.max_seq_len) {
    return PathError("data.pack_tokens", "must be <= llm.model.max_seq_len (",
                     config.llm.model.max_seq_len, "), got ", config.data.pack_tokens);
  }
  RETURN_IF_ERROR(CheckSequenceParallel(config.vision));
  RETURN_IF_ERROR(CheckTensorParallel(config.llm));
  RETURN_IF_ERROR(CheckSchedule(config));
  RETURN_IF_ERROR(CheckFreeze("vision", config.vision.freeze));
  RETURN_IF_ERROR(CheckFreeze("llm", config.llm.freeze));
  if (FreezesWholeGroup(config.vision.freeze) && FreezesWholeGroup(config.llm.freeze)) {
    return PathError("llm.freeze",
                     "freezes the whole LLM while vision.freeze freezes the whole "
                     "encoder: nothing would train");
  }
  RETURN_IF_ERROR(Between("failure.max_restarts", config.max_restarts, 0, kMaxRestarts));
  RETURN_IF_ERROR(AtLeast("failure.snapshot_every", config.snapshot_every, 0));
  RETURN_IF_ERROR(CheckEngine("vision", config.vision.engine_json, config.vision.replicas(),
                              ReplicasName("vision", config.vision.sequence_parallel, "sequence"),
                              config.schedule));
  return CheckEngine("llm", config.llm.engine_json, config.llm.replicas(),
                     ReplicasName("llm", config.llm.tensor_parallel, "tensor"), config.schedule);
}

absl::Status ValidateJobSpec(const tandem::v1::JobSpec& spec) {
  if (spec.data().source_case() == tandem::v1::DataSpec::SOURCE_NOT_SET) {
    return PathError("data",
                     "a data source is required: give \"shapes\", \"jsonl\", \"conversations\", "
                     "\"shards\" or \"mixture\"");
  }
  if (spec.data().has_on_bad_sample()) {
    const std::string& policy = spec.data().on_bad_sample();
    if (policy != "fail" && policy != "skip") {
      return PathError("data.on_bad_sample", "must be \"fail\" or \"skip\", got ", Quoted(policy));
    }
  }
  for (int i = 0; i < spec.data().mixture().sources_size(); ++i) {
    if (spec.data().mixture().sources(i).source_case() ==
        tandem::v1::MixtureSourceSpec::SOURCE_NOT_SET) {
      return PathError(absl::StrCat("data.mixture.sources[", i, "]"),
                       "needs shapes, jsonl, conversations or shards");
    }
  }
  const tandem::v1::VisionGroupSpec& vision = spec.vision();
  if (const std::string& preset = vision.model().preset();
      !preset.empty() && !VisionPreset(preset)) {
    return PathError("vision.model.preset", "unknown preset ", Quoted(preset),
                     "; known: ", VisionPresetNames());
  }
  const tandem::v1::LlmGroupSpec& llm = spec.llm();
  if (!spec.pretrained().empty() && (!vision.pretrained().empty() || !llm.pretrained().empty())) {
    return PathError(vision.pretrained().empty() ? "llm.pretrained" : "vision.pretrained",
                     "must be left out with pretrained, which names both groups' checkpoint");
  }
  const bool vision_pretrained = !spec.pretrained().empty() || !vision.pretrained().empty();
  if (vision_pretrained && vision.has_model()) {
    return PathError("vision.model",
                     "must be left out with a pretrained vision tower: the shape comes from its "
                     "config.json");
  }
  if (vision.parallel().has_tensor()) {
    return PathError("vision.parallel.tensor",
                     "is the LLM group's (llm.parallel.tensor); the vision group splits "
                     "by sequence (vision.parallel.sequence)");
  }
  if (vision.parallel().has_embeddings()) {
    return PathError("vision.parallel.embeddings",
                     "is the LLM group's (llm.parallel.embeddings): how the "
                     "embeddings reach its tensor-parallel ranks");
  }
  const auto& pinpoints = vision.model().grid_pinpoints().values();
  for (int i = 0; i < pinpoints.size(); ++i) {
    const google::protobuf::Value& entry = pinpoints[i];
    bool ok = entry.has_list_value() && entry.list_value().values_size() == 2;
    for (int k = 0; ok && k < 2; ++k) {
      const google::protobuf::Value& side = entry.list_value().values(k);
      ok = side.has_number_value() && std::trunc(side.number_value()) == side.number_value() &&
           side.number_value() >= 1 && side.number_value() <= data::kMaxAnyResSide;
    }
    if (!ok) {
      return PathError(absl::StrCat("vision.model.grid_pinpoints[", i, "]"),
                       "must be [height, width], whole pixels from 1 to ", data::kMaxAnyResSide);
    }
  }
  if (vision.new_projector() && !vision_pretrained) {
    return PathError("vision.new_projector",
                     "needs a pretrained vision tower (vision.pretrained or pretrained)");
  }
  if (const std::string& preset = llm.model().preset(); !preset.empty() && !LlmPreset(preset)) {
    return PathError("llm.model.preset", "unknown preset ", Quoted(preset),
                     "; known: ", LlmPresetNames());
  }
  const bool llm_pretrained = !spec.pretrained().empty() || !llm.pretrained().empty();
  if (llm_pretrained && llm.has_model()) {
    return PathError(
        "llm.model",
        "must be left out with a pretrained LLM: the shape comes from its config.json");
  }
  if (llm.parallel().has_sequence()) {
    return PathError("llm.parallel.sequence",
                     "is the vision group's (vision.parallel.sequence); the LLM group "
                     "splits by tensor (llm.parallel.tensor)");
  }
  if (llm.parallel().has_embeddings()) {
    const std::string& route = llm.parallel().embeddings();
    if (route != "broadcast" && route != "each_rank") {
      return PathError("llm.parallel.embeddings", "must be \"each_rank\" or \"broadcast\", got ",
                       Quoted(route));
    }
  }
  if (!llm.chat_template().empty() && !llm_pretrained) {
    return PathError("llm.chat_template",
                     "needs a pretrained LLM (llm.pretrained or pretrained): Tandem's own "
                     "LLM reads the \"tandem\" format");
  }
  return absl::OkStatus();
}

}  // namespace tandem::jobspec
