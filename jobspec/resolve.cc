// JobSpec message -> JobConfig: presets expanded, explicit fields applied, defaults filled in,
// engine Structs turned into JSON text. Nothing here rejects anything: the checks on the message
// (ValidateJobSpec) and on the values (ValidateJobConfig) are validate.cc's, and run around it.
#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "jobspec/errors.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_proto.h"
#include "jobspec/presets.h"
#include "nlohmann/json.hpp"

namespace tandem::jobspec {
namespace {

nlohmann::json ToJson(const google::protobuf::Value& value);

nlohmann::json ToJson(const google::protobuf::Struct& object) {
  nlohmann::json out = nlohmann::json::object();  // sorted keys, whatever the map's order
  for (const auto& [key, value] : object.fields()) out[key] = ToJson(value);
  return out;
}

nlohmann::json ToJson(const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kNumberValue: {
      // Struct numbers are doubles; integers (batch sizes, steps, stages) read better as integers,
      // and every double up to 2^53 in magnitude converts exactly.
      double x = value.number_value();
      constexpr double kExact = 9007199254740992.0;  // 2^53
      if (std::isfinite(x) && std::trunc(x) == x && std::fabs(x) <= kExact) {
        return static_cast<int64_t>(x);
      }
      return x;
    }
    case google::protobuf::Value::kStringValue:
      return value.string_value();
    case google::protobuf::Value::kBoolValue:
      return value.bool_value();
    case google::protobuf::Value::kStructValue:
      return ToJson(value.struct_value());
    case google::protobuf::Value::kListValue: {
      nlohmann::json out = nlohmann::json::array();
      for (const google::protobuf::Value& element : value.list_value().values()) {
        out.push_back(ToJson(element));
      }
      return out;
    }
    case google::protobuf::Value::kNullValue:
    case google::protobuf::Value::KIND_NOT_SET:
      break;
  }
  return nullptr;
}

// REQUIRES: the preset, if any, is known (ValidateJobSpec).
models::VisionConfig ResolveVisionModel(const tandem::v1::VisionModelSpec& spec) {
  models::VisionConfig model;
  if (!spec.preset().empty()) model = *VisionPreset(spec.preset());
  if (spec.has_image_size()) model.image_size = spec.image_size();
  if (spec.has_channels()) model.channels = spec.channels();
  if (spec.has_patch_size()) model.patch_size = spec.patch_size();
  if (spec.has_hidden()) model.hidden = spec.hidden();
  if (spec.has_layers()) model.layers = spec.layers();
  if (spec.has_heads()) model.heads = spec.heads();
  if (spec.has_mlp_hidden()) model.mlp_hidden = spec.mlp_hidden();
  if (spec.has_positions()) model.positions = spec.positions();
  if (spec.has_norm_eps()) model.norm_eps = spec.norm_eps();
  for (const google::protobuf::Value& entry : spec.grid_pinpoints().values()) {
    model.grid_pinpoints.push_back(
        {static_cast<int64_t>(entry.list_value().values(0).number_value()),
         static_cast<int64_t>(entry.list_value().values(1).number_value())});
  }
  return model;
}

// REQUIRES: the preset, if any, is known (ValidateJobSpec).
models::LlmConfig ResolveLlmModel(const tandem::v1::LlmModelSpec& spec) {
  models::LlmConfig model;
  if (!spec.preset().empty()) model = *LlmPreset(spec.preset());
  if (spec.has_hidden()) model.hidden = spec.hidden();
  if (spec.has_layers()) model.layers = spec.layers();
  if (spec.has_heads()) model.heads = spec.heads();
  if (spec.has_kv_heads()) model.kv_heads = spec.kv_heads();
  if (spec.has_mlp_hidden()) model.mlp_hidden = spec.mlp_hidden();
  if (spec.has_max_seq_len()) model.max_seq_len = spec.max_seq_len();
  if (spec.has_rope_theta()) model.rope_theta = spec.rope_theta();
  if (spec.has_norm_eps()) model.norm_eps = spec.norm_eps();
  if (spec.has_tie_embeddings()) model.tie_embeddings = spec.tie_embeddings();
  return model;
}

// The data set a DataSpec or a MixtureSourceSpec names (their oneofs hold the same messages):
// its kind and that kind's config.
template <typename Spec>
void ResolveSource(const Spec& spec, data::DataConfig& data) {
  if (spec.has_shapes()) {
    data.kind = data::DataConfig::Kind::kShapes;
    if (spec.shapes().has_seed()) data.shapes.seed = spec.shapes().seed();
    if (spec.shapes().has_train_samples())
      data.shapes.train_samples = spec.shapes().train_samples();
    if (spec.shapes().has_eval_samples()) data.shapes.eval_samples = spec.shapes().eval_samples();
    data.shapes.conversations = spec.shapes().conversations();
  } else if (spec.has_conversations()) {
    data.kind = data::DataConfig::Kind::kConversations;
    data.conversations.train_path = spec.conversations().train();
    data.conversations.eval_path = spec.conversations().eval();
  } else if (spec.has_shards()) {
    data.kind = data::DataConfig::Kind::kShards;
    data.shards.train_pattern = spec.shards().train();
    data.shards.eval_pattern = spec.shards().eval();
    if (spec.shards().has_shuffle_buffer())
      data.shards.shuffle_buffer = spec.shards().shuffle_buffer();
  } else if (spec.has_jsonl()) {
    data.kind = data::DataConfig::Kind::kJsonl;
    data.jsonl.train_path = spec.jsonl().train();
    data.jsonl.eval_path = spec.jsonl().eval();
  }
}

// REQUIRES: a source is set (ValidateJobSpec).
data::DataConfig ResolveData(const tandem::v1::DataSpec& spec) {
  data::DataConfig data;
  ResolveSource(spec, data);
  if (spec.has_mixture()) {
    data.kind = data::DataConfig::Kind::kMixture;
    for (const tandem::v1::MixtureSourceSpec& source : spec.mixture().sources()) {
      data::MixtureSource& mixed = data.mixture.emplace_back();
      mixed.name = source.name();
      mixed.weight = source.weight();
      data::DataConfig own;
      ResolveSource(source, own);
      mixed.kind = own.kind;
      mixed.shapes = own.shapes;
      mixed.jsonl = own.jsonl;
      mixed.conversations = own.conversations;
      mixed.shards = own.shards;
    }
  }
  if (spec.has_max_text_tokens()) data.max_text_tokens = spec.max_text_tokens();
  if (spec.has_allow_images_outside()) data.allow_images_outside = spec.allow_images_outside();
  if (spec.has_max_images_per_sample()) data.max_images_per_sample = spec.max_images_per_sample();
  if (spec.has_video_frames()) data.video_frames = spec.video_frames();
  if (spec.has_pack_tokens()) data.pack_tokens = spec.pack_tokens();
  if (spec.has_workers()) data.workers = spec.workers();
  if (spec.on_bad_sample() == "skip") data.on_bad_sample = data::BadSamplePolicy::kSkip;
  return data;
}

ScheduleConfig ResolveSchedule(const tandem::v1::ScheduleSpec& spec) {
  ScheduleConfig schedule;
  if (spec.has_global_batch()) schedule.global_batch = spec.global_batch();
  if (spec.has_micro_batches()) schedule.micro_batches = spec.micro_batches();
  if (spec.has_steps()) schedule.steps = spec.steps();
  if (spec.has_eval_every()) schedule.eval_every = spec.eval_every();
  if (spec.has_eval_samples()) schedule.eval_samples = spec.eval_samples();
  if (spec.has_checkpoint_every()) schedule.checkpoint_every = spec.checkpoint_every();
  if (spec.has_seed()) schedule.seed = spec.seed();
  if (spec.has_gradient_clipping()) schedule.gradient_clipping = spec.gradient_clipping();
  if (spec.has_balance()) schedule.balance = spec.balance();
  return schedule;
}

// REQUIRES: ValidateJobSpec(spec) is OK.
JobConfig Resolve(const tandem::v1::JobSpec& spec) {
  JobConfig config;
  config.name = spec.name();
  config.data = ResolveData(spec.data());

  const tandem::v1::VisionGroupSpec& vision = spec.vision();
  if (vision.has_pool()) config.vision.pool = vision.pool();
  if (vision.has_actors()) config.vision.actors = vision.actors();
  config.vision.model = ResolveVisionModel(vision.model());
  if (vision.has_engine()) config.vision.engine_json = ToJson(vision.engine()).dump();
  config.vision.freeze.assign(vision.freeze().begin(), vision.freeze().end());
  config.vision.pretrained = spec.pretrained().empty() ? vision.pretrained() : spec.pretrained();
  config.vision.new_projector = vision.new_projector();
  if (vision.parallel().has_sequence())
    config.vision.sequence_parallel = vision.parallel().sequence();

  const tandem::v1::LlmGroupSpec& llm = spec.llm();
  if (llm.has_pool()) config.llm.pool = llm.pool();
  if (llm.has_actors()) config.llm.actors = llm.actors();
  config.llm.model = ResolveLlmModel(llm.model());
  if (llm.has_engine()) config.llm.engine_json = ToJson(llm.engine()).dump();
  config.llm.freeze.assign(llm.freeze().begin(), llm.freeze().end());
  config.llm.pretrained = spec.pretrained().empty() ? llm.pretrained() : spec.pretrained();
  config.llm.chat_template = llm.chat_template();
  if (llm.parallel().has_tensor()) config.llm.tensor_parallel = llm.parallel().tensor();
  if (llm.parallel().embeddings() == "broadcast")
    config.llm.embeddings = EmbeddingRoute::kBroadcast;

  // The projector maps patches into the LLM's embedding space.
  config.vision.model.output_dim = config.llm.model.hidden;
  // LLaVA-NeXT's tiles end each row of features with the LLM's newline embedding (a pretrained
  // LLM's is set where its config.json is read: hf::ResolvePretrainedModels).
  config.llm.model.image_newline = config.vision.model.any_res();
  config.schedule = ResolveSchedule(spec.schedule());
  if (spec.failure().has_max_restarts()) config.max_restarts = spec.failure().max_restarts();
  config.snapshot_every = spec.failure().snapshot_every();
  config.async_checkpoints = spec.checkpoint().async();
  config.resume_from = spec.resume_from();
  return config;
}

}  // namespace

absl::StatusOr<ResolvedJobSpec> ResolveJobSpec(tandem::v1::JobSpec spec,
                                               std::string_view source_name) {
  RETURN_IF_ERROR(internal::WithSource(ValidateJobSpec(spec), source_name));
  ResolvedJobSpec resolved;
  resolved.config = Resolve(spec);
  RETURN_IF_ERROR(internal::WithSource(ValidateJobConfig(resolved.config), source_name));
  resolved.json = JobSpecToJson(spec);
  resolved.spec = std::make_shared<const tandem::v1::JobSpec>(std::move(spec));
  return resolved;
}

}  // namespace tandem::jobspec
