// Conversation data about images, and a conversation as the token ids and labels an LLM trains on.
//
// A file is a JSON list (or JSONL, one object a line) of samples in one of two forms:
//   LLaVA     {"image": "a.png", "conversations": [{"from": "human", "value": "<image>\nWhat is
//   it?"},
//                                                  {"from": "gpt", "value": "Red."}, ...]}
//             "image" is one file, a list of files (LLaVA-OneVision, LLaVA-Interleave) or absent
//             (text only); "video" is instead a list of frame files. "from" is "human", "gpt" or
//             "system" (also "user" and "assistant").
//   ShareGPT  {"images": ["a.png", ...], "messages": [{"role": "user", "content": "<image>..."},
//                                                   {"role": "assistant", "content": "..."}]}
// Image paths are relative to the file. Each image has one "<image>" mark, in a user turn, and the
// marks take the images in order. A video has one "<video>" mark (or one "<image>", as
// LLaVA-Video's files write) for its frames: the frames sampled (VideoFrameIndices) are images of
// the sample, and the mark becomes one "<image>" per frame.
//
// EncodeConversation renders it with the model's chat template (tokenizer/chat_template.h) and
// tokenizes it piece by piece without adding special tokens again (the template writes them, as
// apply_chat_template tokenizes). Labels are the ids of the template's trained pieces (each
// assistant turn and its end of turn, or its {% generation %} blocks) and kIgnore everywhere else,
// so the loss is on the answers only; each "<image>" becomes `image_tokens` copies of its id, never
// a target.
//
// Errors: ReadConversations names the file and the entry ("train.json: [3]: conversations[1].from
// \"bot\" is not human, gpt or system", "train.jsonl:12: has 2 images and 1 <image> mark"); a
// video with fewer frames than asked names both counts. EncodeConversation names a tokenizer
// without the "<image>" token. Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"

namespace tandem::data {

struct Conversation {
  // Resolved against the file's directory, in the order of the marks; empty for text only. A
  // video's sampled frames.
  std::vector<std::string> images;
  bool video = false;                            // images are a video's frames
  std::vector<tokenizer::ChatMessage> messages;  // roles "system", "user", "assistant"
  std::string source;  // "train.json: [3]" or "train.jsonl:12", for errors
};

// The frames a video of `frames` frames gives when `wanted` are asked for: numpy.linspace(0,
// frames - 1, wanted) rounded down, as LLaVA-Video samples. REQUIRES: frames >= wanted >= 1.
std::vector<int64_t> VideoFrameIndices(int64_t frames, int64_t wanted);

// `video_frames`: frames taken from each video (data.video_frames).
absl::StatusOr<std::vector<Conversation>> ReadConversations(const std::string& path,
                                                            int64_t video_frames = 8);

// One sample, the JSON object of one entry of such a file; `source` names it in errors and image
// paths are resolved against `base` ("" leaves them as written).
absl::StatusOr<Conversation> ParseConversation(std::string_view json_text,
                                               const std::string& source, const std::string& base,
                                               int64_t video_frames = 8);
// As ParseConversation, of an entry already parsed (a shard's KEY.json).
absl::StatusOr<Conversation> ParseConversationJson(const nlohmann::json& entry,
                                                   const std::string& source,
                                                   const std::string& base,
                                                   int64_t video_frames = 8);

struct EncodedConversation {
  static constexpr int64_t kIgnore = -100;  // as PyTorch's cross_entropy ignore_index default
  std::vector<int64_t> ids;
  std::vector<int64_t> labels;  // the target of position t is labels[t + 1], as for ids
};

absl::StatusOr<EncodedConversation> EncodeConversation(const Conversation& conversation,
                                                       const tokenizer::HfTokenizer& tokenizer,
                                                       const tokenizer::ChatTemplate& chat,
                                                       int64_t image_tokens);
// EncodeConversation of bare messages, optionally with the template's generation prompt after them.
// With `image_positions` (one a mark), the k-th "<image>" becomes image_positions[k] copies instead
// of image_tokens (LLaVA-NeXT's images take positions by their size); InvalidArgument naming the
// source when the marks and the list differ in number.
absl::StatusOr<EncodedConversation> EncodeMessages(
    const std::vector<tokenizer::ChatMessage>& messages, const std::string& source,
    const tokenizer::HfTokenizer& tokenizer, const tokenizer::ChatTemplate& chat,
    int64_t image_tokens, bool add_generation_prompt,
    const std::vector<int64_t>& image_positions = {});

}  // namespace tandem::data
