// JobConfigToJson: the resolved spec, in the form ParseJobSpecJson reads back.
#include <filesystem>
#include <string>

#include "jobspec/job_spec.h"
#include "nlohmann/json.hpp"

namespace tandem::jobspec {
namespace {

using Json = nlohmann::ordered_json;  // keeps the order of job.proto

Json Engine(const std::string& engine_json) {
  Json engine = Json::parse(engine_json, nullptr, /*allow_exceptions=*/false);
  if (engine.is_discarded()) return engine_json;  // the parser will reject it, naming the group
  return engine;
}

Json Data(const data::DataConfig& data, const std::string& spec_dir) {
  Json out = Json::object();
  switch (data.kind) {
    case data::DataConfig::Kind::kShapes:
      out["shapes"] = {{"seed", data.shapes.seed},
                       {"train_samples", data.shapes.train_samples},
                       {"eval_samples", data.shapes.eval_samples},
                       {"conversations", data.shapes.conversations}};
      break;
    case data::DataConfig::Kind::kConversations:
      out["conversations"] = {{"train", SpecPath(data.conversations.train_path, spec_dir)},
                              {"eval", SpecPath(data.conversations.eval_path, spec_dir)}};
      break;
    case data::DataConfig::Kind::kJsonl:
      out["jsonl"] = {{"train", SpecPath(data.jsonl.train_path, spec_dir)},
                      {"eval", SpecPath(data.jsonl.eval_path, spec_dir)}};
      break;
  }
  out["max_text_tokens"] = data.max_text_tokens;
  out["allow_images_outside"] = data.allow_images_outside;
  return out;
}

Json VisionModel(const models::VisionConfig& m) {
  return {{"preset", m.preset},         {"image_size", m.image_size}, {"channels", m.channels},
          {"patch_size", m.patch_size}, {"hidden", m.hidden},         {"layers", m.layers},
          {"heads", m.heads},           {"mlp_hidden", m.mlp_hidden}, {"positions", m.positions},
          {"norm_eps", m.norm_eps}};
}

Json LlmModel(const models::LlmConfig& m) {
  return {{"preset", m.preset},           {"hidden", m.hidden},
          {"layers", m.layers},           {"heads", m.heads},
          {"kv_heads", m.kv_heads},       {"mlp_hidden", m.mlp_hidden},
          {"max_seq_len", m.max_seq_len}, {"rope_theta", m.rope_theta},
          {"norm_eps", m.norm_eps},       {"tie_embeddings", m.tie_embeddings}};
}

Json Schedule(const ScheduleConfig& s) {
  return {{"global_batch", s.global_batch},
          {"micro_batches", s.micro_batches},
          {"steps", s.steps},
          {"eval_every", s.eval_every},
          {"eval_samples", s.eval_samples},
          {"checkpoint_every", s.checkpoint_every},
          {"seed", s.seed},
          {"gradient_clipping", s.gradient_clipping}};
}

}  // namespace

std::string SpecPath(const std::string& path, const std::string& spec_dir) {
  if (path.empty() || spec_dir.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(spec_dir) / path).lexically_normal().string();
}

std::string JobConfigToJson(const JobConfig& config) {
  Json out = Json::object();
  out["name"] = config.name;
  out["data"] = Data(config.data, config.spec_dir);
  out["vision"] = {{"pool", config.vision.pool},
                   {"actors", config.vision.actors},
                   {"engine", Engine(config.vision.engine_json)},
                   {"freeze", config.vision.freeze},
                   {"parallel", {{"sequence", config.vision.sequence_parallel}}}};
  // A pretrained tower's shape is its config.json's, read again wherever the job runs.
  if (config.vision.pretrained.empty()) {
    out["vision"]["model"] = VisionModel(config.vision.model);
  } else {
    out["vision"]["pretrained"] = SpecPath(config.vision.pretrained, config.spec_dir);
    out["vision"]["new_projector"] = config.vision.new_projector;
  }
  out["llm"] = {{"pool", config.llm.pool},
                {"actors", config.llm.actors},
                {"engine", Engine(config.llm.engine_json)},
                {"freeze", config.llm.freeze},
                {"parallel",
                 {{"tensor", config.llm.tensor_parallel}, {"embeddings", EmbeddingRouteName(config.llm.embeddings)}}}};
  if (config.llm.pretrained.empty()) {
    out["llm"]["model"] = LlmModel(config.llm.model);
  } else {
    out["llm"]["pretrained"] = SpecPath(config.llm.pretrained, config.spec_dir);
    out["llm"]["chat_template"] = config.llm.chat_template;
  }
  out["schedule"] = Schedule(config.schedule);
  out["failure"] = {{"max_restarts", config.max_restarts}};
  out["resume_from"] = SpecPath(config.resume_from, config.spec_dir);
  // Paths come from users; a byte that is not UTF-8 is replaced rather than thrown over.
  return out.dump(2, ' ', false, Json::error_handler_t::replace);
}

}  // namespace tandem::jobspec
