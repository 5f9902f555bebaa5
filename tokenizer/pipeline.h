// The text stages around a tokenizer.json's model, as the tokenizers library runs them:
//   Normalizer    "normalizer": NFC, NFKC, Lowercase, Prepend, Replace, Sequence (or null)
//   PreTokenizer  "pre_tokenizer": Split (a regex with Unicode classes and lookahead, PCRE2),
//                 ByteLevel (GPT-2's byte-to-character table, optionally its own regex first),
//                 Metaspace, WhitespaceSplit, Sequence (or null)
//   Decoder       "decoder": ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence, or
//                 null, which joins the tokens with spaces
// Each FromJson is InvalidArgument naming the JSON path and type of a stage it does not implement.
// Thread-safe once built.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::tokenizer {

class Normalizer {
 public:
  static absl::StatusOr<Normalizer> FromJson(const nlohmann::json& json, const std::string& path);
  // InvalidArgument for text that is not valid UTF-8.
  absl::StatusOr<std::string> Apply(std::string text) const;

 private:
  struct Step {
    std::string type;  // "NFC", "NFKC", "Lowercase", "Prepend", "Replace"
    std::string a, b;  // Prepend: a; Replace: a -> b
  };
  std::vector<Step> steps_;
};

class PreTokenizer {
 public:
  struct Regex;  // a compiled PCRE2 pattern (pipeline.cc)

  static absl::StatusOr<PreTokenizer> FromJson(const nlohmann::json& json, const std::string& path);
  // The pieces the model tokenizes one by one. `first` says whether the text starts the input
  // (Metaspace's prepend_scheme "first").
  absl::StatusOr<std::vector<std::string>> Split(const std::string& text, bool first) const;

 private:
  struct Step {
    std::string type;  // "Split", "ByteLevel", "Metaspace"
    std::shared_ptr<Regex> regex;
    std::string behavior;  // Split: "Isolated" or "Removed"
    bool add_prefix_space = false;
    std::string replacement;     // Metaspace
    std::string prepend_scheme;  // Metaspace: "always", "first", "never"
    bool split = false;          // Metaspace
  };
  std::vector<Step> steps_;
};

class Decoder {
 public:
  static absl::StatusOr<Decoder> FromJson(const nlohmann::json& json, const std::string& path);
  std::string Decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    std::string type;
    std::string a, b;
    int start = 0, stop = 0;
    std::string prepend_scheme;
  };
  std::vector<Step> steps_;
};

// GPT-2's table of the 256 bytes to printable characters (ByteLevel), as UTF-8 strings, and back.
const std::vector<std::string>& ByteToCharacter();
// The byte of a ByteLevel character, or -1.
int CharacterToByte(const std::string& character);

}  // namespace tandem::tokenizer
