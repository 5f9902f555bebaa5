// The BPE model of a tokenizer.json ("model": {"type": "BPE", ...}) as the tokenizers library
// applies it to one pre-tokenized piece: the piece's characters become symbols (a character not in
// the vocabulary becomes its <0xNN> byte tokens with byte_fallback, else the unknown token, fused
// when fuse_unk), then the adjacent pair with the lowest merge rank is merged, leftmost first,
// until no pair has a merge. With ignore_merges a piece that is itself in the vocabulary is one
// token. Thread-safe once built.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::tokenizer {

// A model's "vocab": token -> id, and back. Ids are dense in the files this reads.
class Vocabulary {
 public:
  // InvalidArgument naming the token whose id is not an integer >= 0.
  static absl::StatusOr<Vocabulary> FromJson(const nlohmann::json& vocab);
  std::optional<int64_t> TokenToId(const std::string& token) const;
  const std::string* IdToToken(int64_t id) const;
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  std::unordered_map<std::string, int64_t> ids_;
  std::vector<std::string> tokens_;  // by id
};

class BpeModel {
 public:
  // From the "model" object of tokenizer.json; merges as "a b" strings or ["a", "b"] pairs.
  // InvalidArgument naming the key for an unsupported setting (dropout, a continuing-subword
  // prefix, an end-of-word suffix) or a merge of tokens not in the vocabulary.
  static absl::StatusOr<BpeModel> FromJson(const nlohmann::json& model);

  // Appends the ids of `piece`. Unknown characters without byte fallback or an unknown token are
  // InvalidArgument naming the character.
  absl::Status Tokenize(std::string_view piece, std::vector<int64_t>& ids) const;

  const Vocabulary& vocabulary() const { return vocab_; }

 private:
  struct Merge {
    int64_t rank;
    int64_t merged;
  };
  Vocabulary vocab_;
  std::map<std::pair<int64_t, int64_t>, Merge> merges_;
  std::optional<int64_t> unk_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int64_t byte_ids_[256];
  bool have_byte_ids_ = false;
};

// The WordLevel model of a tokenizer.json ("model": {"type": "WordLevel", "vocab", "unk_token"}):
// each pre-tokenized piece is one token, or the unknown token. Thread-safe once built.
class WordLevelModel {
 public:
  static absl::StatusOr<WordLevelModel> FromJson(const nlohmann::json& model);
  absl::Status Tokenize(std::string_view piece, std::vector<int64_t>& ids) const;
  const Vocabulary& vocabulary() const { return vocab_; }

 private:
  Vocabulary vocab_;
  std::optional<int64_t> unk_;
};

}  // namespace tandem::tokenizer
