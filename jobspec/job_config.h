// JobConfig: a training job as plain C++ values, resolved from a `tandem.v1.JobSpec`
// (jobspec/job_spec.h). Paths are as the spec holds them: absolute when it came from a file
// (jobspec::ReadJobSpecFile), else relative to the working directory.
//
// This header is the seam between the proto side (CLI, coordinator) and the LibTorch side (models,
// trainer, actors): it includes neither protobuf nor LibTorch, so both sides can include it. The
// model sizes (models/model_config.h) and the dataset (data/data_config.h) are their libraries' own
// plain structs, held here as members. Every model size is concrete: presets are already expanded
// and explicit fields applied over them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "data/data_config.h"
#include "models/model_config.h"

namespace tandem::jobspec {

struct VisionGroupConfig {
  std::string pool = "vision";  // actor pool the group is scheduled on
  int32_t actors = 1;           // data-parallel ranks
  models::VisionConfig model;
  std::string engine_json = "{}";   // the group's DeepSpeed-style engine config, as a JSON object
  std::vector<std::string> freeze;  // name patterns of parameters that do not train
  // A Hugging Face tower or LLaVA directory whose sizes replace `model`
  // (hf::ResolvePretrainedModels) and whose weights the vision stage loads; "" = from scratch.
  std::string pretrained;
  bool new_projector = false;  // a LLaVA directory's tower, with a new projector
  int32_t sequence_parallel =
      1;  // ranks each image's positions split over (vision.parallel.sequence)
  int32_t replicas() const { return actors / sequence_parallel; }  // data-parallel ranks

  bool operator==(const VisionGroupConfig&) const = default;
};

// How the image embeddings reach the ranks of a tensor-parallel LLM replica
// (llm.parallel.embeddings): every rank receives them from the vision ranks, or the first receives
// them and broadcasts them over the replica's communicator (NOTE [Parallel sets] in step/stage.h).
enum class EmbeddingRoute { kEachRank, kBroadcast };
inline const char* EmbeddingRouteName(EmbeddingRoute route) {
  return route == EmbeddingRoute::kBroadcast ? "broadcast" : "each_rank";
}

struct LlmGroupConfig {
  std::string pool = "llm";
  int32_t actors = 1;
  models::LlmConfig model;
  std::string engine_json = "{}";
  std::vector<std::string> freeze;
  // A Hugging Face Llama, Qwen2 or LLaVA directory whose sizes replace
  // `model` (hf::ResolvePretrainedModels), whose weights the LLM stage loads and whose tokenizer
  // the job uses; "" = from scratch with the word tokenizer.
  std::string pretrained;
  std::string
      chat_template;  // with `pretrained`: "chatml", "llama3", "tandem"; "" = the model's own
  int32_t tensor_parallel = 1;  // ranks each model splits over (llm.parallel.tensor)
  EmbeddingRoute embeddings = EmbeddingRoute::kEachRank;         // llm.parallel.embeddings
  int32_t replicas() const { return actors / tensor_parallel; }  // data-parallel ranks

  bool operator==(const LlmGroupConfig&) const = default;
};

// Whether a group's freeze list freezes the whole group: it holds "*" (or "**", ...).
inline bool FreezesWholeGroup(const std::vector<std::string>& freeze) {
  for (const std::string& pattern : freeze) {
    if (!pattern.empty() && pattern.find_first_not_of('*') == std::string::npos) return true;
  }
  return false;
}

struct ScheduleConfig {
  int64_t global_batch = 32;     // samples per optimizer step, over all ranks and micro-batches
  int64_t micro_batches = 1;     // gradient accumulation steps per optimizer step
  int64_t steps = 100;           // optimizer steps
  int64_t eval_every = 0;        // steps between evaluations; 0 = only at the end
  int64_t eval_samples = 0;      // held-out samples per evaluation; 0 = all
  int64_t checkpoint_every = 0;  // steps between checkpoints; 0 = only at the end
  uint64_t seed = 0;             // model initialisation and data order
  double gradient_clipping = 0;  // max L2 norm of both groups' gradient together; 0 = off
  bool balance = true;           // spread micro-batches by work (step/batch_plan.h)

  bool operator==(const ScheduleConfig&) const = default;
};

struct JobConfig {
  std::string name;
  data::DataConfig data;
  VisionGroupConfig vision;
  LlmGroupConfig llm;
  ScheduleConfig schedule;
  int64_t max_restarts = 3;        // failure.max_restarts
  int64_t snapshot_every = 0;      // failure.snapshot_every: steps between snapshots in memory
  std::string resume_from;         // a checkpoint directory; "" = from scratch
  bool async_checkpoints = false;  // checkpoint.async: written while the next step trains

  bool operator==(const JobConfig&) const = default;
};

// Whether the job's samples are conversations (conversation files, or shapes.conversations), whose
// images an LLM places at their "<image>" marks: a pretrained one always, one trained from scratch
// too (data::TextCodec::WordsAtMarks); captions are a prefix of the latter's rows.
// A mixture holds conversations when any of its sources does (its captions then read as
// conversations of one answer).
inline bool ConversationData(const data::DataConfig& data) {
  if (data.kind == data::DataConfig::Kind::kMixture) {
    for (const data::MixtureSource& source : data.mixture)
      if (ConversationData(data::SourceConfig(data, source))) return true;
    return false;
  }
  return data.kind == data::DataConfig::Kind::kConversations ||
         data.kind == data::DataConfig::Kind::kShards ||
         (data.kind == data::DataConfig::Kind::kShapes && data.shapes.conversations);
}

// Whether every image is read from a file at its own size (conversation files, shards), which
// LLaVA-NeXT's tiles need; procedural shapes and jsonl captions are not.
inline bool ImagesAtTheirOwnSize(const data::DataConfig& data) {
  if (data.kind == data::DataConfig::Kind::kMixture) {
    for (const data::MixtureSource& source : data.mixture)
      if (!ImagesAtTheirOwnSize(data::SourceConfig(data, source))) return false;
    return !data.mixture.empty();
  }
  return data.kind == data::DataConfig::Kind::kConversations ||
         data.kind == data::DataConfig::Kind::kShards;
}

// The most LLM positions one image takes: its features, or with LLaVA-NeXT's tiles the largest
// layout's (data/any_res.h).
inline int64_t ImagePositions(const models::VisionConfig& v) {
  return v.any_res() ? data::MaxAnyResPositions(v.grid_pinpoints, v.image_size, v.grid())
                     : v.num_features();
}

// The most tiles the vision group encodes for one image: 1, or the base and the largest grid.
inline int64_t MaxTilesPerImage(const models::VisionConfig& v) {
  int64_t most = 1;
  for (const data::Resolution& p : v.grid_pinpoints)
    most = std::max(most, 1 + (p.height / v.image_size) * (p.width / v.image_size));
  return most;
}

// The positions of one LLM row: data.max_images_per_sample images' positions and
// data.max_text_tokens text tokens. llm.model.max_seq_len must hold it.
inline int64_t LlmRowPositions(const JobConfig& job) {
  return job.data.max_images_per_sample * ImagePositions(job.vision.model) +
         job.data.max_text_tokens;
}

}  // namespace tandem::jobspec
