// Assembles samples into the dense arrays a training or evaluation step consumes.
//
// Thread-safety: a free function over const inputs; safe to call concurrently.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
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

// MakeBatch without the images (image_size 0, images empty): reads only Dataset::Text, so an LLM rank
// never decodes an image. Same caption errors.
absl::StatusOr<Batch> MakeTextBatch(const Dataset& dataset, const std::vector<int64_t>& indices,
                                    const Tokenizer& tokenizer, int64_t text_len);

}  // namespace tandem::data
