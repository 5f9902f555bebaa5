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

class WorkerPool;

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

// Tile `tile` of image `image` of sample `sample` (Dataset::GetTiles; an image read whole is its
// tile 0).
struct ImageRef {
  int64_t sample = 0;
  int64_t image = 0;
  int64_t tile = 0;
  bool operator==(const ImageRef&) const = default;
};
// The tiles `refs` in order (size = refs.size(), which may be 0: image_size is then 0): what a
// vision rank reads. An image's consecutive tiles are read once; with a `pool`, the images are read
// (decoded, resized, normalised) by its threads at once, the batch the same either way. The image
// errors of MakeBatch; GetTiles'; OutOfRange for a tile the image does not have; with several
// errors, the first ref's. With `failures`, an image that cannot be read does not fail the call:
// its refs' entries of *failures (one for each ref, OK for the others) hold its error, and the
// batch comes back empty when any image failed (the caller reads again without their samples).
absl::StatusOr<Batch> MakeImagesBatch(const Dataset& dataset, const std::vector<ImageRef>& refs,
                                      WorkerPool* pool = nullptr,
                                      std::vector<absl::Status>* failures = nullptr);

// What the LLM trains on for a micro-batch: each sample's Messages encoded by `codec`, right-padded
// with its pad id to length = max_images * codec.max_image_positions() + max_text_tokens (fixed, so
// every micro-batch of a job has one shape). labels[t] is the target of position t - 1, kIgnore on
// padding, prompts and images.
struct TokenBatch {
  int64_t size = 0;
  int64_t length = 0;
  std::vector<int64_t> tokens;   // [size, length]
  std::vector<int64_t> labels;   // [size, length]
  std::vector<int64_t> lengths;  // [size]: each sample's positions before its padding
  int64_t targets = 0;           // labels that are targets (not kIgnore, position 0 excluded)
};
// The positions of a TokenBatch's rows: max_images images' most positions and max_text_tokens.
int64_t TokenRowLength(const TextCodec& codec, int64_t max_text_tokens, int64_t max_images);
// InvalidArgument for no indices or max_text_tokens < 2; InvalidArgument naming the sample
// (Dataset::Describe) and both counts when it needs more than max_text_tokens text tokens or holds
// more than max_images images, and, in the codec's Words layout (an image prefix), when it does not
// hold exactly one image; the codec's errors.
absl::StatusOr<TokenBatch> MakeTokenBatch(const Dataset& dataset,
                                          const std::vector<int64_t>& indices,
                                          const TextCodec& codec, int64_t max_text_tokens,
                                          int64_t max_images = 1);

// Samples of a TokenBatch packed into rows of `length` positions (sequence packing): row i holds
// the samples rows[i] (rows of `batch`) one after another, then padding. positions restart at 0
// with each sample, segments number the samples of a row (-1 on padding, models::Packing), and
// each sample's first label is kIgnore, so that no sample predicts the next one's first token.
struct PackedBatch {
  int64_t rows = 0;
  int64_t length = 0;
  std::vector<int64_t> tokens;     // [rows, length]
  std::vector<int64_t> labels;     // [rows, length]
  std::vector<int64_t> positions;  // [rows, length]
  std::vector<int64_t> segments;   // [rows, length]
  int64_t padding = 0;             // positions holding no sample
};
// InvalidArgument when a row's samples need more than `length` positions.
absl::StatusOr<PackedBatch> PackTokenBatch(const TokenBatch& batch,
                                           const std::vector<std::vector<int64_t>>& rows,
                                           int64_t length, int64_t pad_id);

// What the LLM is evaluated on: each sample's prompt (TextCodec::EncodePrompt) and the answer it
// should generate. Same errors as MakeTokenBatch.
struct PromptBatch {
  std::vector<std::vector<int64_t>> prompts;
  std::vector<std::vector<int64_t>> answers;
};
absl::StatusOr<PromptBatch> MakePromptBatch(const Dataset& dataset,
                                            const std::vector<int64_t>& indices,
                                            const TextCodec& codec, int64_t max_text_tokens,
                                            int64_t max_images = 1);

// Whether `codec` can read sample `index`: its image count within max_images, and exactly one
// image in the Words layout, where the image is a prefix of the row. InvalidArgument naming the
// sample and the rule otherwise.
absl::Status CheckImageCount(const Dataset& dataset, int64_t index, const TextCodec& codec,
                             int64_t max_images);

// The sizes of sample `index`'s images (Dataset::ImageSize) when the codec's images take positions
// by size (TextCodec::any_res), else none: what TextCodec::Encode reads. ImageSize's errors.
absl::StatusOr<std::vector<Resolution>> SampleImageSizes(const Dataset& dataset, int64_t index,
                                                         const TextCodec& codec);

}  // namespace tandem::data
