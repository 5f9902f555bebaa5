// Which dataset a job trains on, as plain C++ values: the input of OpenDatasets (data/dataset.h).
// A job spec resolves into it (jobspec::JobConfig::data); tests fill it directly.
//
// Plain C++: neither LibTorch nor protobuf, so the job spec's torch-free code can hold it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::data {

// Procedural coloured shapes with captions ("a small red circle at the top left"); data/shapes.h.
struct ShapesConfig {
  uint64_t seed = 0;  // same seed, same images and captions
  int64_t train_samples = 4096;
  int64_t eval_samples = 256;  // held out: disjoint from the training samples
  bool conversations = false;  // questions and answers about each image instead of its caption

  bool operator==(const ShapesConfig&) const = default;
};

// One {"image": "path", "text": "caption"} object per line; image paths relative to the jsonl file.
struct JsonlConfig {
  std::string train_path;  // absolute once read from a spec file (jobspec::ReadJobSpecFile)
  std::string eval_path;   // optional ("" = no held-out set unless eval_fraction > 0)

  bool operator==(const JsonlConfig&) const = default;
};

// Conversation files (data/conversation.h): a JSON list or JSONL of LLaVA's {"image" (a file or a
// list), "conversations"} or {"video": [frames], "conversations"}, or ShareGPT's {"images",
// "messages"}.
struct ConversationsConfig {
  std::string train_path;  // absolute once read from a spec file (jobspec::ReadJobSpecFile)
  std::string eval_path;   // optional

  bool operator==(const ConversationsConfig&) const = default;
};

// Tar shards in WebDataset's layout (data/shard_dataset.h): a path or brace range of paths each.
struct ShardsConfig {
  std::string train_pattern;  // absolute once read from a spec file (jobspec::ReadJobSpecFile)
  std::string eval_pattern;   // optional
  // Samples shuffled together (data/sampler.h: SampleOrder::window).
  int64_t shuffle_buffer = 10000;

  bool operator==(const ShardsConfig&) const = default;
};

// data.on_bad_sample.
enum class BadSamplePolicy { kFail, kSkip };
inline const char* BadSamplePolicyName(BadSamplePolicy policy) {
  return policy == BadSamplePolicy::kSkip ? "skip" : "fail";
}

enum class DataKind { kShapes, kJsonl, kConversations, kShards, kMixture };

// One source of a mixture (data/mixture_dataset.h): its kind (not kMixture) and that kind's config.
struct MixtureSource {
  std::string name;
  double weight = 1;  // relative to the other sources'
  DataKind kind = DataKind::kShapes;
  ShapesConfig shapes;
  JsonlConfig jsonl;
  ConversationsConfig conversations;
  ShardsConfig shards;

  bool operator==(const MixtureSource&) const = default;
};

struct DataConfig {
  using Kind = DataKind;
  Kind kind = Kind::kShapes;
  ShapesConfig shapes;
  JsonlConfig jsonl;
  ConversationsConfig conversations;
  ShardsConfig shards;
  // kMixture: the sources; the other fields here apply to all of them.
  std::vector<MixtureSource> mixture;
  // Text tokens of a sample with its special tokens, image tokens not counted; longer samples are
  // an error.
  int64_t max_text_tokens = 16;
  // Image paths of jsonl and conversation files may lead outside the file's directory.
  bool allow_images_outside = false;
  // Most images (a video's sampled frames included) one sample may hold; the LLM's rows are padded
  // to this many images' positions plus max_text_tokens.
  int64_t max_images_per_sample = 1;
  // Frames sampled from each video's frame list (data/conversation.h: VideoFrameIndices).
  int64_t video_frames = 8;
  // Positions of a packed LLM row (step/batch_plan.h); 0: one sample a row.
  int64_t pack_tokens = 0;
  // Threads a vision rank reads its images with (data/worker_pool.h).
  int64_t workers = 1;
  // A training sample that cannot be read: an error, or left out of its batch (step/stage.h:
  // NOTE [Bad samples]).
  BadSamplePolicy on_bad_sample = BadSamplePolicy::kFail;

  bool operator==(const DataConfig&) const = default;
};

// A mixture's source as a data set of its own: `mixture`'s fields that apply to every source, with
// the source's kind and config.
inline DataConfig SourceConfig(const DataConfig& mixture, const MixtureSource& source) {
  DataConfig own = mixture;
  own.mixture.clear();
  own.kind = source.kind;
  own.shapes = source.shapes;
  own.jsonl = source.jsonl;
  own.conversations = source.conversations;
  own.shards = source.shards;
  return own;
}

}  // namespace tandem::data
