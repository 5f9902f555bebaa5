// A word-level tokenizer built from the training captions.
//
// Ids: <pad> = 0, <bos> = 1, <eos> = 2, <unk> = 3, then the vocabulary sorted by descending count
// and, among equal counts, by byte order: deterministic for the same captions in any order.
//
// Normalisation (Encode and Build alike): ASCII letters are lowercased; each ASCII punctuation
// character (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~) becomes a token of its own; the rest is split on
// ASCII whitespace. Bytes >= 0x80 (UTF-8) are kept inside words unchanged. So "A cat, sat." encodes
// as "a" "cat" "," "sat" "." and decodes as "a cat , sat ." (Decode joins with single spaces). No
// special token can come out of Encode: "<eos>" in a caption is "<" "eos" ">".
//
// The saved form is a small JSON file, where words[id] is the token with that id:
//   {"format": "tandem-word-tokenizer", "version": 1,
//    "words": ["<pad>", "<bos>", "<eos>", "<unk>", "a", ...]}
//
// Thread-safety: immutable after Build/Load; const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::data {

class Tokenizer {
 public:
  static constexpr int32_t kPad = 0;
  static constexpr int32_t kBos = 1;
  static constexpr int32_t kEos = 2;
  static constexpr int32_t kUnk = 3;
  static constexpr int32_t kNumSpecial = 4;

  // Counts the normalised words of `texts` and keeps those seen at least min_count times.
  static Tokenizer Build(const std::vector<std::string>& texts, int64_t min_count = 1);
  // As Build, from the counts of its texts' words (CountWords), so that the texts need not be held
  // together (a sharded data set's, counted shard by shard or when packed).
  static Tokenizer FromCounts(const std::map<std::string, int64_t>& counts, int64_t min_count = 1);

  // Loads a file written by Save. Errors name the file: NotFound (or the read error) when it
  // cannot be read, InvalidArgument when it is not JSON, has another format or version, or its
  // words are not the four special tokens followed by distinct, non-empty words.
  static absl::StatusOr<Tokenizer> Load(const std::string& path);

  // Writes the JSON form atomically (common/atomic_file.h).
  absl::Status Save(const std::string& path) const;

  // Ids of the normalised words, unknown ones as kUnk; no <bos>/<eos>.
  std::vector<int32_t> Encode(std::string_view text) const;

  // The words of `ids` joined by single spaces, stopping at the first <eos> and skipping <pad> and
  // <bos>; <unk> (and any id outside [0, size())) reads "<unk>".
  std::string Decode(const std::vector<int32_t>& ids) const;

  // Special tokens included.
  int64_t size() const { return static_cast<int64_t>(words_.size()); }

  // The token with this id; "<unk>" for an id outside [0, size()).
  const std::string& Word(int32_t id) const;

  // words()[id] == Word(id).
  const std::vector<std::string>& words() const { return words_; }

  friend bool operator==(const Tokenizer& a, const Tokenizer& b) { return a.words_ == b.words_; }

 private:
  explicit Tokenizer(std::vector<std::string> words);

  std::vector<std::string> words_;
  std::unordered_map<std::string, int32_t> ids_;
};

// The normalised words of `text`, as described at the top of this file.
std::vector<std::string> SplitWords(std::string_view text);

// Normalised words and how often they occur: what Tokenizer::FromCounts reads.
using WordCounts = std::map<std::string, int64_t>;

// Adds one to the count of each normalised word of `text`.
void CountWords(std::string_view text, WordCounts& counts);

}  // namespace tandem::data
