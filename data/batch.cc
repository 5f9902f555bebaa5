#include "data/batch.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/worker_pool.h"

namespace tandem::data {

namespace {

// Fills row `row` of the batch's tokens and text_lengths from a caption.
absl::Status EncodeCaption(const Dataset& dataset, int64_t index, const std::string& text,
                           const Tokenizer& tokenizer, int64_t row, Batch* batch) {
  const std::vector<int32_t> ids = tokenizer.Encode(text);
  const int64_t length = static_cast<int64_t>(ids.size()) + 2;
  const int64_t text_len = batch->text_len;
  if (length > text_len) {
    return absl::InvalidArgumentError(
        absl::StrCat(dataset.Describe(index), ": caption needs ", length,
                     " tokens with <bos> and <eos>, more than the ", text_len, " allowed"));
  }
  int64_t* tokens = batch->tokens.data() + row * text_len;
  tokens[0] = Tokenizer::kBos;
  std::copy(ids.begin(), ids.end(), tokens + 1);
  tokens[length - 1] = Tokenizer::kEos;
  batch->text_lengths[row] = length;
  return absl::OkStatus();
}

absl::StatusOr<Batch> EmptyBatch(const std::vector<int64_t>& indices, int64_t text_len) {
  if (indices.empty()) return absl::InvalidArgumentError("MakeBatch: no indices");
  if (text_len < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("MakeBatch: text_len must hold <bos> and <eos>, got ", text_len));
  }
  Batch batch;
  batch.size = static_cast<int64_t>(indices.size());
  batch.text_len = text_len;
  batch.tokens.assign(batch.size * text_len, Tokenizer::kPad);
  batch.text_lengths.resize(batch.size);
  return batch;
}

// Appends the image of `example` (sample `index`) to the batch.
absl::Status AddImage(const Dataset& dataset, int64_t index, const Image& image, Batch* batch) {
  if (batch->images.empty()) {
    batch->image_size = image.height;
    batch->images.reserve(batch->size * 3 * image.height * image.height);
  }
  if (image.channels != 3 || image.height != batch->image_size ||
      image.width != batch->image_size ||
      image.pixels.size() != static_cast<size_t>(3 * image.height * image.width)) {
    return absl::InvalidArgumentError(absl::StrCat(
        dataset.Describe(index), ": image is ", image.channels, " x ", image.height, " x ",
        image.width, ", the batch needs 3 x ", batch->image_size, " x ", batch->image_size));
  }
  batch->images.insert(batch->images.end(), image.pixels.begin(), image.pixels.end());
  return absl::OkStatus();
}

// A sample's text tokens, its images' positions (`sizes`: SampleImageSizes) not counted, against
// the budget.
absl::Status CheckLength(const Dataset& dataset, int64_t index, int64_t ids, const TextCodec& codec,
                         const std::vector<Resolution>& sizes, int64_t max_text_tokens) {
  int64_t text = ids;
  if (codec.any_res().enabled()) {
    for (const int64_t positions : codec.ImagePositions(sizes)) text -= positions;
  } else {
    text -= dataset.ImageCount(index) * codec.image_tokens();
  }
  if (text > max_text_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat(dataset.Describe(index), ": needs ", text,
                     " text tokens, more than data.max_text_tokens = ", max_text_tokens));
  }
  return absl::OkStatus();
}

absl::Status CheckBatchArguments(const std::vector<int64_t>& indices, int64_t max_text_tokens) {
  if (indices.empty()) return absl::InvalidArgumentError("a text batch of no samples");
  if (max_text_tokens < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.max_text_tokens must be >= 2, got ", max_text_tokens));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Resolution>> SampleImageSizes(const Dataset& dataset, int64_t index,
                                                         const TextCodec& codec) {
  std::vector<Resolution> sizes;
  if (!codec.any_res().enabled()) return sizes;
  for (int64_t k = 0; k < dataset.ImageCount(index); ++k) {
    ASSIGN_OR_RETURN(sizes.emplace_back(), dataset.ImageSize(index, k));
  }
  return sizes;
}

absl::Status CheckImageCount(const Dataset& dataset, int64_t index, const TextCodec& codec,
                             int64_t max_images) {
  const int64_t images = dataset.ImageCount(index);
  if (codec.image_token_id() < 0 && images != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        dataset.Describe(index), ": has ", images, images == 1 ? " image" : " images",
        "; a caption reads exactly one image, as a prefix of its row (conversations place any "
        "number at their <image> marks)"));
  }
  if (images > max_images) {
    return absl::InvalidArgumentError(
        absl::StrCat(dataset.Describe(index), ": has ", images,
                     " images, more than data.max_images_per_sample = ", max_images));
  }
  return absl::OkStatus();
}

absl::StatusOr<Batch> MakeBatch(const Dataset& dataset, const std::vector<int64_t>& indices,
                                const Tokenizer& tokenizer, int64_t text_len) {
  ASSIGN_OR_RETURN(Batch batch, EmptyBatch(indices, text_len));
  for (int64_t row = 0; row < batch.size; ++row) {
    const int64_t index = indices[row];
    ASSIGN_OR_RETURN(const Example example, dataset.Get(index));
    RETURN_IF_ERROR(EncodeCaption(dataset, index, example.text, tokenizer, row, &batch));
    RETURN_IF_ERROR(AddImage(dataset, index, example.image, &batch));
  }
  return batch;
}

absl::StatusOr<Batch> MakeImagesBatch(const Dataset& dataset, const std::vector<ImageRef>& refs,
                                      WorkerPool* pool, std::vector<absl::Status>* failures) {
  // An image's tiles are read once for its consecutive refs: first[g] is group g's first ref.
  std::vector<size_t> first;
  for (size_t r = 0; r < refs.size(); ++r) {
    if (r == 0 || refs[r].sample != refs[r - 1].sample || refs[r].image != refs[r - 1].image)
      first.push_back(r);
  }
  const auto groups = static_cast<int64_t>(first.size());
  std::vector<absl::StatusOr<std::vector<Image>>> tiles(groups);
  const auto read = [&](int64_t g) {
    tiles[g] = dataset.GetTiles(refs[first[g]].sample, refs[first[g]].image);
  };
  if (pool != nullptr) {
    pool->ForEach(groups, read);
  } else {
    for (int64_t g = 0; g < groups; ++g) read(g);
  }
  if (failures != nullptr) {
    failures->assign(refs.size(), absl::OkStatus());
    bool failed = false;
    for (int64_t g = 0; g < groups; ++g) {
      if (tiles[g].ok()) continue;
      failed = true;
      const size_t end = g + 1 < groups ? first[g + 1] : refs.size();
      for (size_t r = first[g]; r < end; ++r) (*failures)[r] = tiles[g].status();
    }
    if (failed) return Batch{};
  }
  Batch batch;
  batch.size = static_cast<int64_t>(refs.size());
  for (int64_t g = 0; g < groups; ++g) {
    if (!tiles[g].ok()) return tiles[g].status();
    const size_t end = g + 1 < groups ? first[g + 1] : refs.size();
    for (size_t r = first[g]; r < end; ++r) {
      const ImageRef& ref = refs[r];
      if (ref.tile < 0 || ref.tile >= static_cast<int64_t>(tiles[g]->size())) {
        return absl::OutOfRangeError(absl::StrCat(dataset.Describe(ref.sample), ": image ",
                                                  ref.image, " has ", tiles[g]->size(),
                                                  " tiles, not ", ref.tile + 1));
      }
      RETURN_IF_ERROR(AddImage(dataset, ref.sample, (*tiles[g])[ref.tile], &batch));
    }
    tiles[g] = std::vector<Image>();  // its pixels are in the batch now
  }
  return batch;
}

int64_t TokenRowLength(const TextCodec& codec, int64_t max_text_tokens, int64_t max_images) {
  return max_images * codec.max_image_positions() + max_text_tokens;
}

absl::StatusOr<TokenBatch> MakeTokenBatch(const Dataset& dataset,
                                          const std::vector<int64_t>& indices,
                                          const TextCodec& codec, int64_t max_text_tokens,
                                          int64_t max_images) {
  RETURN_IF_ERROR(CheckBatchArguments(indices, max_text_tokens));
  TokenBatch batch;
  batch.size = static_cast<int64_t>(indices.size());
  batch.length = TokenRowLength(codec, max_text_tokens, max_images);
  batch.tokens.assign(batch.size * batch.length, codec.pad_id());
  batch.labels.assign(batch.size * batch.length, EncodedConversation::kIgnore);
  for (int64_t row = 0; row < batch.size; ++row) {
    const int64_t index = indices[row];
    RETURN_IF_ERROR(CheckImageCount(dataset, index, codec, max_images));
    ASSIGN_OR_RETURN(const std::vector<Resolution> sizes, SampleImageSizes(dataset, index, codec));
    ASSIGN_OR_RETURN(const EncodedConversation encoded,
                     codec.Encode(dataset.Messages(index), dataset.Describe(index), sizes));
    const int64_t n = static_cast<int64_t>(encoded.ids.size());
    RETURN_IF_ERROR(CheckLength(dataset, index, n, codec, sizes, max_text_tokens));
    batch.lengths.push_back(n);
    std::copy(encoded.ids.begin(), encoded.ids.end(), batch.tokens.begin() + row * batch.length);
    std::copy(encoded.labels.begin(), encoded.labels.end(),
              batch.labels.begin() + row * batch.length);
    for (int64_t t = 1; t < n; ++t)
      batch.targets += encoded.labels[t] != EncodedConversation::kIgnore ? 1 : 0;
  }
  return batch;
}

absl::StatusOr<PackedBatch> PackTokenBatch(const TokenBatch& batch,
                                           const std::vector<std::vector<int64_t>>& rows,
                                           int64_t length, int64_t pad_id) {
  PackedBatch packed;
  packed.rows = static_cast<int64_t>(rows.size());
  packed.length = length;
  const size_t total = static_cast<size_t>(packed.rows * length);
  packed.tokens.assign(total, pad_id);
  packed.labels.assign(total, EncodedConversation::kIgnore);
  packed.positions.assign(total, 0);
  packed.segments.assign(total, -1);
  for (int64_t r = 0; r < packed.rows; ++r) {
    int64_t at = r * length;
    const int64_t end = at + length;
    for (size_t segment = 0; segment < rows[r].size(); ++segment) {
      const int64_t sample = rows[r][segment];
      const int64_t n = batch.lengths[sample];
      if (at + n > end) {
        return absl::InvalidArgumentError(absl::StrCat("packed row ", r, " needs more than its ",
                                                       length, " positions at sample ", sample));
      }
      const int64_t from = sample * batch.length;
      std::copy_n(batch.tokens.begin() + from, n, packed.tokens.begin() + at);
      std::copy_n(batch.labels.begin() + from, n, packed.labels.begin() + at);
      if (n > 0) packed.labels[at] = EncodedConversation::kIgnore;
      for (int64_t t = 0; t < n; ++t) {
        packed.positions[at + t] = t;
        packed.segments[at + t] = static_cast<int64_t>(segment);
      }
      at += n;
    }
    packed.padding += end - at;
  }
  return packed;
}

absl::StatusOr<PromptBatch> MakePromptBatch(const Dataset& dataset,
                                            const std::vector<int64_t>& indices,
                                            const TextCodec& codec, int64_t max_text_tokens,
                                            int64_t max_images) {
  RETURN_IF_ERROR(CheckBatchArguments(indices, max_text_tokens));
  PromptBatch batch;
  for (const int64_t index : indices) {
    RETURN_IF_ERROR(CheckImageCount(dataset, index, codec, max_images));
    ASSIGN_OR_RETURN(const std::vector<Resolution> sizes, SampleImageSizes(dataset, index, codec));
    ASSIGN_OR_RETURN(TextCodec::Prompt prompt,
                     codec.EncodePrompt(dataset.Messages(index), dataset.Describe(index), sizes));
    RETURN_IF_ERROR(CheckLength(dataset, index,
                                static_cast<int64_t>(prompt.ids.size() + prompt.answer.size()) + 1,
                                codec, sizes, max_text_tokens));
    batch.prompts.push_back(std::move(prompt.ids));
    batch.answers.push_back(std::move(prompt.answer));
  }
  return batch;
}

}  // namespace tandem::data
