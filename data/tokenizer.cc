#include "data/tokenizer.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tandem::data {
namespace {

constexpr char kFormat[] = "tandem-word-tokenizer";
constexpr int kVersion = 1;
const std::vector<std::string>& SpecialTokens() {
  static const std::vector<std::string> tokens = {"<pad>", "<bos>", "<eos>", "<unk>"};
  return tokens;
}

// Byte tests of our own rather than <cctype>, whose answers depend on the C locale.
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsPunctuation(char c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
         (c >= '{' && c <= '~');
}
char ToLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

std::vector<std::string> SplitWords(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  auto flush = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  for (char c : text) {
    if (IsSpace(c)) {
      flush();
    } else if (IsPunctuation(c)) {
      flush();
      words.emplace_back(1, c);
    } else {
      word.push_back(ToLower(c));
    }
  }
  flush();
  return words;
}

Tokenizer::Tokenizer(std::vector<std::string> words) : words_(std::move(words)) {
  for (size_t id = 0; id < words_.size(); ++id) ids_.emplace(words_[id], static_cast<int32_t>(id));
}

void CountWords(std::string_view text, WordCounts& counts) {
  for (std::string& word : SplitWords(text)) ++counts[std::move(word)];
}

Tokenizer Tokenizer::Build(const std::vector<std::string>& texts, int64_t min_count) {
  WordCounts counts;
  for (const std::string& text : texts) CountWords(text, counts);
  return FromCounts(counts, min_count);
}

Tokenizer Tokenizer::FromCounts(const std::map<std::string, int64_t>& counts, int64_t min_count) {
  std::vector<std::pair<std::string, int64_t>> ranked;
  for (auto& [word, count] : counts) {
    if (count >= min_count) ranked.emplace_back(word, count);
  }
  // `counts` is already in byte order, so a stable sort by count keeps ties alphabetical.
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> words = SpecialTokens();
  for (auto& [word, count] : ranked) words.push_back(std::move(word));
  return Tokenizer(std::move(words));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  for (const std::string& word : SplitWords(text)) {
    const auto it = ids_.find(word);
    ids.push_back(it == ids_.end() ? kUnk : it->second);
  }
  return ids;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id == kEos) break;
    if (id == kPad || id == kBos) continue;
    absl::StrAppend(&text, text.empty() ? "" : " ", Word(id));
  }
  return text;
}

const std::string& Tokenizer::Word(int32_t id) const {
  if (id < 0 || id >= size()) return words_[kUnk];
  return words_[id];
}

absl::Status Tokenizer::Save(const std::string& path) const {
  const nlohmann::json document = {{"format", kFormat}, {"version", kVersion}, {"words", words_}};
  return WriteFileAtomically(path, document.dump(1) + "\n");
}

absl::StatusOr<Tokenizer> Tokenizer::Load(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string contents, ReadUserFile(path));
  auto invalid = [&path](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer file ", path, ": ", what));
  };
  const nlohmann::json document =
      nlohmann::json::parse(contents, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return invalid("not valid JSON");
  if (!document.is_object()) return invalid("expected a JSON object");
  for (const auto& [key, value] : document.items()) {
    if (key != "format" && key != "version" && key != "words") {
      return invalid(absl::StrCat("unknown key \"", key, "\""));
    }
  }
  const auto format = document.find("format");
  if (format == document.end() || !format->is_string() || *format != kFormat) {
    return invalid(absl::StrCat("\"format\" must be \"", kFormat, "\""));
  }
  const auto version = document.find("version");
  if (version == document.end() || !version->is_number_integer() || *version != kVersion) {
    return invalid(
        absl::StrCat("unsupported \"version\" (this build reads version ", kVersion, ")"));
  }
  const auto list = document.find("words");
  if (list == document.end() || !list->is_array()) return invalid("\"words\" must be an array");

  std::vector<std::string> words;
  std::set<std::string> seen;
  for (size_t id = 0; id < list->size(); ++id) {
    const nlohmann::json& word = (*list)[id];
    if (!word.is_string() || word.get_ref<const std::string&>().empty()) {
      return invalid(absl::StrCat("word ", id, " is not a non-empty string"));
    }
    const std::string& text = word.get_ref<const std::string&>();
    if (id < SpecialTokens().size() && text != SpecialTokens()[id]) {
      return invalid(absl::StrCat("word ", id, " must be ", SpecialTokens()[id], ", not ", text));
    }
    if (!seen.insert(text).second)
      return invalid(absl::StrCat("word \"", text, "\" appears twice"));
    words.push_back(text);
  }
  if (words.size() < SpecialTokens().size()) return invalid("fewer words than special tokens");
  return Tokenizer(std::move(words));
}

}  // namespace tandem::data
