#include "tokenizer/bpe_model.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/strict_json.h"
#include "tokenizer/utf8.h"

namespace tandem::tokenizer {

absl::StatusOr<Vocabulary> Vocabulary::FromJson(const nlohmann::json& vocab) {
  if (!vocab.is_object()) return absl::InvalidArgumentError("model.vocab must be an object");
  Vocabulary v;
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab.items()) {
    const auto value = ReadJsonInteger(id).ToInt64();
    // Ids are dense: none beyond a few times the vocabulary's size (a typo'd id would allocate).
    const int64_t limit = 4 * static_cast<int64_t>(vocab.size()) + 1024;
    if (!value || *value < 0 || *value >= limit) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.vocab.", token, " must be an id in [0, ", limit, ")"));
    }
    v.ids_[token] = *value;
    max_id = std::max(max_id, *value);
  }
  v.tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [token, id] : v.ids_) v.tokens_[static_cast<size_t>(id)] = token;
  return v;
}

std::optional<int64_t> Vocabulary::TokenToId(const std::string& token) const {
  const auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* Vocabulary::IdToToken(int64_t id) const {
  if (id < 0 || id >= size() || tokens_[static_cast<size_t>(id)].empty()) return nullptr;
  return &tokens_[static_cast<size_t>(id)];
}

absl::StatusOr<BpeModel> BpeModel::FromJson(const nlohmann::json& model) {
  const auto error = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("model.", what));
  };
  BpeModel bpe;
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null()) {
      return error(absl::StrCat(key, " ", DescribeJsonValue(model[key]), " is not supported"));
    }
  }
  auto vocab = Vocabulary::FromJson(model.contains("vocab") ? model["vocab"] : nlohmann::json());
  if (!vocab.ok()) return vocab.status();
  bpe.vocab_ = *std::move(vocab);

  const auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) return error("merges must be an array");
  int64_t rank = 0;
  for (const auto& merge : *merges) {
    std::string a, b;
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos)
        return error(absl::StrCat("merges[", rank, "] \"", text, "\" is not \"a b\""));
      a = text.substr(0, space);
      b = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      a = merge[0].get<std::string>();
      b = merge[1].get<std::string>();
    } else {
      return error(absl::StrCat("merges[", rank, "] must be \"a b\" or [\"a\", \"b\"]"));
    }
    const auto ia = bpe.vocab_.TokenToId(a), ib = bpe.vocab_.TokenToId(b),
               im = bpe.vocab_.TokenToId(a + b);
    if (!ia || !ib || !im) {
      return error(absl::StrCat("merges[", rank, "] (\"", a, "\", \"", b,
                                "\") merges tokens outside the vocabulary"));
    }
    bpe.merges_.emplace(std::make_pair(*ia, *ib), Merge{rank, *im});
    ++rank;
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    bpe.unk_ = bpe.vocab_.TokenToId(model["unk_token"].get<std::string>());
    if (!bpe.unk_) return error("unk_token is not in the vocabulary");
  }
  bpe.byte_fallback_ = model.value("byte_fallback", false);
  bpe.fuse_unk_ = model.value("fuse_unk", false);
  bpe.ignore_merges_ = model.value("ignore_merges", false);
  bpe.have_byte_ids_ = true;
  for (int byte = 0; byte < 256; ++byte) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", byte);
    const auto id = bpe.vocab_.TokenToId(name);
    bpe.byte_ids_[byte] = id.value_or(-1);
    if (!id) bpe.have_byte_ids_ = false;
  }
  return bpe;
}

absl::Status BpeModel::Tokenize(std::string_view piece, std::vector<int64_t>& ids) const {
  if (piece.empty()) return absl::OkStatus();
  if (ignore_merges_) {
    if (const auto id = vocab_.TokenToId(std::string(piece))) {
      ids.push_back(*id);
      return absl::OkStatus();
    }
  }
  std::vector<int64_t> symbols;
  bool last_was_unk = false;
  for (const std::string& character : Utf8Characters(piece)) {
    if (const auto id = vocab_.TokenToId(character)) {
      symbols.push_back(*id);
      last_was_unk = false;
    } else if (byte_fallback_ && have_byte_ids_) {
      for (unsigned char byte : character) symbols.push_back(byte_ids_[byte]);
      last_was_unk = false;
    } else if (unk_) {
      if (!(fuse_unk_ && last_was_unk)) symbols.push_back(*unk_);
      last_was_unk = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "character \"", character, "\" is not in the vocabulary, which has no unknown token"));
    }
  }
  while (symbols.size() > 1) {
    size_t best = symbols.size();
    Merge best_merge{0, 0};
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = merges_.find({symbols[i], symbols[i + 1]});
      if (it != merges_.end() && (best == symbols.size() || it->second.rank < best_merge.rank)) {
        best = i;
        best_merge = it->second;
      }
    }
    if (best == symbols.size()) break;
    symbols[best] = best_merge.merged;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  ids.insert(ids.end(), symbols.begin(), symbols.end());
  return absl::OkStatus();
}

absl::StatusOr<WordLevelModel> WordLevelModel::FromJson(const nlohmann::json& model) {
  WordLevelModel m;
  auto vocab = Vocabulary::FromJson(model.contains("vocab") ? model["vocab"] : nlohmann::json());
  if (!vocab.ok()) return vocab.status();
  m.vocab_ = *std::move(vocab);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    m.unk_ = m.vocab_.TokenToId(model["unk_token"].get<std::string>());
    if (!m.unk_) return absl::InvalidArgumentError("model.unk_token is not in the vocabulary");
  }
  return m;
}

absl::Status WordLevelModel::Tokenize(std::string_view piece, std::vector<int64_t>& ids) const {
  if (piece.empty()) return absl::OkStatus();
  if (const auto id = vocab_.TokenToId(std::string(piece))) {
    ids.push_back(*id);
  } else if (unk_) {
    ids.push_back(*unk_);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "word \"", std::string(piece), "\" is not in the vocabulary, which has no unknown token"));
  }
  return absl::OkStatus();
}

}  // namespace tandem::tokenizer
