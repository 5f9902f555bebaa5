// Assembles samples into the dense arrays a training or evaluation step consumes.
//
// Thread-safety: a free function over const inputs; safe to call concurrently.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/text_codec.h"
#include "data/tokenizer.h"

namespace tandem::data {

struct Batch {
  int64_t size = 0;             // samples
  int64_t image_size = 0;       // H = W
  std::vector<float> images;    // [size, 3, H, W], values in [0, 1] (no mean/std normalisation)
  int64_t text_len = 0;         // T
  std::vector<int64_t> tokens;  // [size, T]: <bos> w1 .. wn <eos> <pad> ... <pad>
  std::vector<int64_t> text_lengths;  // [size]: n + 2, the tokens before the padding
};

// Reads dataset.Get(i) for each index, in order, and encodes its caption with `tokenizer`.
// Errors: InvalidArgument for no indices or text_len < 2; InvalidArgument naming the sample
// (Dataset::Describe) and both lengths when its caption needs more than text_len tokens with
// <bos> and <eos>, or when its image is not 3 x S x S with the first sample's S; any error of Get.
absl::StatusOr<Batch> MakeBatch(const Dataset& dataset, const std::vector<int64_t>& indices,
                                const Tokenizer& tokenizer, int64_t text_len);

// The images of `indices` alone (tokens empty, text_len 0): what the vision group reads. The image
// errors of MakeBatch.
absl::StatusOr<Batch> MakeImageBatch(const Dataset& dataset, const std::vector<int64_t>& indices);

// What the LLM trains on for a micro-batch: each sample's Messages encoded by `codec`, right-padded
// with its pad id to length = codec.image_tokens() + max_text_tokens (fixed, so every micro-batch
// of a job has one shape). labels[t] is the target of position t - 1, kIgnore on padding, prompts
// and images.
struct TokenBatch {
  int64_t size = 0;
  int64_t length = 0;
  std::vector<int64_t> tokens;  // [size, length]
  std::vector<int64_t> labels;  // [size, length]
  int64_t targets = 0;          // labels that are targets (not kIgnore, position 0 excluded)
};
// InvalidArgument for no indices or max_text_tokens < 2; InvalidArgument naming the sample
// (Dataset::Describe) and both counts when it needs more than max_text_tokens text tokens; the
// codec's errors.
absl::StatusOr<TokenBatch> MakeTokenBatch(const Dataset& dataset,
                                          const std::vector<int64_t>& indices,
                                          const TextCodec& codec, int64_t max_text_tokens);

// What the LLM is evaluated on: each sample's prompt (TextCodec::EncodePrompt) and the answer it
// should generate. Same errors as MakeTokenBatch.
struct PromptBatch {
  std::vector<std::vector<int64_t>> prompts;
  std::vector<std::vector<int64_t>> answers;
};
absl::StatusOr<PromptBatch> MakePromptBatch(const Dataset& dataset,
                                            const std::vector<int64_t>& indices,
                                            const TextCodec& codec, int64_t max_text_tokens);

}  // namespace tandem::data
