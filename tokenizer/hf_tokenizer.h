// A Hugging Face tokenizer read from a model directory: tokenizer.json (a BPE model, byte-level as
// in Llama 3 and Qwen2 or SentencePiece-style with byte fallback as in Llama 2; or a WordLevel
// model, as Tandem exports its own word-level tokenizer), with the special
// tokens of tokenizer_config.json and special_tokens_map.json. Encode and Decode give what the
// tokenizers library gives for the same files (tests/tokenizer/ compares them on a corpus).
//
//   ASSIGN_OR_RETURN(auto tokenizer, tokenizer::HfTokenizer::Load(dir));
//   ASSIGN_OR_RETURN(std::vector<int64_t> ids, tokenizer.Encode("<image>\nWhat is it?"));
//   std::string text = tokenizer.Decode(ids, /*skip_special_tokens=*/true);
//
// Encoding: the text is split around the added tokens (leftmost, longest first; they become their
// ids directly), each other stretch is normalised, pre-tokenized and run through the model, and the
// post-processor's template adds its special tokens (a BOS, say) when add_special_tokens.
// tokenizer_config.json's add_bos_token / add_eos_token rebuild that template for the Llama
// tokenizer classes, as transformers' LlamaTokenizerFast does.
//
// Errors: Load is NotFound for a directory without tokenizer.json and InvalidArgument naming the
// file and JSON path of anything it does not implement (a WordPiece or Unigram model, say); Encode
// is InvalidArgument for text that is not valid UTF-8. Thread-safe once loaded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pipeline.h"

namespace tandem::tokenizer {

class HfTokenizer {
 public:
  static absl::StatusOr<HfTokenizer> Load(const std::string& directory);

  absl::StatusOr<std::vector<int64_t>> Encode(std::string_view text,
                                              bool add_special_tokens = true) const;
  // Ids outside the vocabulary are skipped, as the tokenizers library does.
  std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

  std::optional<int64_t> TokenToId(const std::string& token) const;
  // Model tokens and added tokens; the size is one past the largest id.
  int64_t vocab_size() const;
  bool IsSpecial(int64_t id) const;
  // Adds `content` as a special added token with the next id (vocab_size()), as transformers'
  // add_special_tokens does, and returns its id; a token already there keeps its id.
  int64_t AddSpecialToken(const std::string& content);

  // The special tokens tokenizer_config.json (or special_tokens_map.json) names, as text and id
  // (empty and nullopt when it names none).
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }
  const std::string& pad_token() const { return pad_; }
  std::optional<int64_t> bos_id() const { return TokenToId(bos_); }
  std::optional<int64_t> eos_id() const { return TokenToId(eos_); }
  std::optional<int64_t> pad_id() const { return TokenToId(pad_); }
  const std::string& unk_token() const { return unk_; }
  // The chat template, from the first of these that has one: chat_template.jinja,
  // chat_template.json's "chat_template" (a processor's, as transformers 4.4x saves it),
  // processor_config.json's "chat_template" (transformers 5's processor), tokenizer_config.json's
  // "chat_template" (a string, or the "default" of a list of named ones); "" if none.
  const std::string& chat_template() const { return chat_template_; }
  // The file it came from, for errors ("" if none).
  const std::string& chat_template_file() const { return chat_template_file_; }
  // Whether it is a processor's, which reads each message's content as a list of image and text
  // parts (chat_template.json, processor_config.json).
  bool chat_template_structured() const { return chat_template_structured_; }

 private:
  static absl::StatusOr<HfTokenizer> LoadOrThrow(const std::string& directory);

  struct Added {
    std::string content;
    int64_t id;
    bool special;
    bool lstrip, rstrip;
  };

  // The model: BPE or WordLevel, whichever tokenizer.json names.
  struct Model {
    std::optional<BpeModel> bpe;
    std::optional<WordLevelModel> word_level;
    absl::Status Tokenize(std::string_view piece, std::vector<int64_t>& ids) const {
      return bpe ? bpe->Tokenize(piece, ids) : word_level->Tokenize(piece, ids);
    }
    const Vocabulary& vocabulary() const {
      return bpe ? bpe->vocabulary() : word_level->vocabulary();
    }
  };
  std::optional<Model> model_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  Decoder decoder_;
  std::vector<Added> added_;              // longest content first
  std::vector<int64_t> prefix_, suffix_;  // the post-processor's template around the sequence
  std::string bos_, eos_, pad_, unk_, chat_template_, chat_template_file_;
  bool chat_template_structured_ = false;
};

}  // namespace tandem::tokenizer
