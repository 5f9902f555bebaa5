// How a sample's conversation becomes what the LLM trains on (token ids and their labels) and what
// it is evaluated on (a prompt and the answer it should generate), in one of two layouts
// (models::LlmConfig::image_token_id):
//
//   Words  Tandem's own LLM and its word tokenizer (data/tokenizer.h), for captions. The image is
//          a prefix of embedding rows ahead of the tokens; the text is the "tandem" chat format
//          without the image mark: (user words) <bos> (answer words) <eos> ... A caption is the
//          answer to a user turn holding only the image, so it reads <bos> caption <eos>.
//   WordsAtMarks  The same words and format for conversations, with each image's positions at its
//          "<image>" mark as LLaVA places them: `image_tokens` copies of the image id (or under
//          any-res its layout's positions), the id after the words (tokenizer.size(), as `tandem
//          export` numbers it). A caption reads <image>... <bos> caption <eos>, the Words sequence
//          with the image in place of the prefix; any number of images, none included, and packing
//          follow.
//   Hf     A Hugging Face tokenizer and chat template (tokenizer/chat_template.h): LLaVA's
//          layout, the rendered conversation with `image_tokens` copies of the "<image>" id, which
//          the image's embedding rows replace.
//
// Labels are the ids of the assistant turns and their end-of-turn token, kIgnoreLabel elsewhere
// (data/conversation.h). Stateless after construction; const methods are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/any_res.h"
#include "data/conversation.h"
#include "data/tokenizer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"

namespace tandem::data {

class TextCodec {
 public:
  static TextCodec Words(Tokenizer tokenizer);
  static TextCodec WordsAtMarks(Tokenizer tokenizer, int64_t image_tokens,
                                AnyResGeometry any_res = {});
  // InvalidArgument when the tokenizer lacks "<image>", a pad or eos token, or the template's
  // end-of-turn token.
  // With `any_res` enabled (LLaVA-NeXT), each image takes the positions of its layout instead of
  // image_tokens.
  static absl::StatusOr<TextCodec> Hf(tokenizer::HfTokenizer tokenizer,
                                      tokenizer::ChatTemplate chat, int64_t image_tokens,
                                      AnyResGeometry any_res = {});

  // The whole conversation. `source` names the sample in errors. Under any_res(), `image_sizes`
  // (one an image, as on file: Dataset::ImageSize) decide each image's positions; otherwise they
  // are not read.
  absl::StatusOr<EncodedConversation> Encode(const std::vector<tokenizer::ChatMessage>& messages,
                                             const std::string& source,
                                             const std::vector<Resolution>& image_sizes = {}) const;

  // The conversation up to its last assistant message, with the generation prompt, and that
  // message's ids without its end-of-turn token. InvalidArgument when the last message is not the
  // assistant's.
  struct Prompt {
    std::vector<int64_t> ids;
    std::vector<int64_t> answer;
  };
  absl::StatusOr<Prompt> EncodePrompt(const std::vector<tokenizer::ChatMessage>& messages,
                                      const std::string& source,
                                      const std::vector<Resolution>& image_sizes = {}) const;

  // Image token positions in an encoded sequence: 0 in the Words layout (the image is a prefix).
  // The vocabulary counts the image token of WordsAtMarks.
  // Under any_res() an image's own count varies with its size (ImagePositions).
  int64_t image_tokens() const { return image_tokens_; }
  // The most positions one image takes: image_tokens(), or under any_res() its largest layout.
  int64_t max_image_positions() const {
    return any_res_.enabled() ? any_res_.max_positions() : image_tokens_;
  }
  // LLaVA-NeXT's tiling; not enabled() for one tile an image.
  const AnyResGeometry& any_res() const { return any_res_; }
  // The positions each image of `image_sizes` takes.
  std::vector<int64_t> ImagePositions(const std::vector<Resolution>& image_sizes) const;
  // -1 in the Words layout (a prefix).
  int64_t image_token_id() const { return image_token_id_; }
  int64_t pad_id() const { return pad_id_; }
  // Generation stops at any of these (the template's end-of-turn token and the tokenizer's eos).
  const std::vector<int64_t>& stop_ids() const { return stop_ids_; }
  int64_t vocab_size() const;
  std::string Decode(const std::vector<int64_t>& ids) const;

  // The word tokenizer in the Words layouts, null otherwise.
  const Tokenizer* words() const { return words_ ? &*words_ : nullptr; }
  const tokenizer::HfTokenizer* hf() const { return hf_ ? &*hf_ : nullptr; }

 private:
  TextCodec() = default;

  std::optional<Tokenizer> words_;
  std::optional<tokenizer::HfTokenizer> hf_;
  std::optional<tokenizer::ChatTemplate> chat_;
  int64_t image_tokens_ = 0;
  AnyResGeometry any_res_;
  int64_t image_token_id_ = -1;
  int64_t pad_id_ = Tokenizer::kPad;
  std::vector<int64_t> stop_ids_{Tokenizer::kEos};
};

// The word tokenizer's vocabulary texts of a conversation: every message's content without the
// image mark.
std::string ConversationWords(const std::vector<tokenizer::ChatMessage>& messages);

}  // namespace tandem::data
