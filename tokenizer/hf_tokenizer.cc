#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "common/strict_json.h"
#include "tokenizer/utf8.h"

namespace tandem::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

absl::StatusOr<std::optional<json>> ReadJsonFile(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<json>();
  ASSIGN_OR_RETURN(const std::string text, ReadUserFile(path.string()));
  auto parsed = ParseJsonStrict(text);
  if (!parsed.ok())
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", parsed.status().message()));
  return std::optional<json>(*std::move(parsed));
}

// A special token written as "text" or as an AddedToken object {"content": "text", ...}.
std::string TokenText(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string())
    return j["content"].get<std::string>();
  return "";
}

bool IsWhitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

absl::StatusOr<HfTokenizer> HfTokenizer::Load(const std::string& directory) {
  // A value of the wrong JSON type anywhere in the files is an error naming the directory.
  try {
    return LoadOrThrow(directory);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(directory, ": a tokenizer file has a value of the wrong type: ", e.what()));
  }
}

absl::StatusOr<HfTokenizer> HfTokenizer::LoadOrThrow(const std::string& directory) {
  const fs::path dir(directory);
  const std::string file = (dir / "tokenizer.json").string();
  ASSIGN_OR_RETURN(const auto root, ReadJsonFile(dir / "tokenizer.json"));
  if (!root)
    return absl::NotFoundError(
        absl::StrCat(file, ": not found (the tokenizer's files are needed)"));
  if (!root->is_object())
    return absl::InvalidArgumentError(absl::StrCat(file, ": must hold a JSON object"));
  const auto error = [&](const absl::Status& status) {
    return absl::Status(status.code(), absl::StrCat(file, ": ", status.message()));
  };
  HfTokenizer t;
  const json& model = root->contains("model") ? (*root)["model"] : json();
  const std::string type = model.is_object() ? model.value("type", std::string("BPE")) : "?";
  t.model_.emplace();
  if (type == "BPE") {
    auto bpe = BpeModel::FromJson(model);
    if (!bpe.ok()) return error(bpe.status());
    t.model_->bpe = *std::move(bpe);
  } else if (type == "WordLevel") {
    auto word_level = WordLevelModel::FromJson(model);
    if (!word_level.ok()) return error(word_level.status());
    t.model_->word_level = *std::move(word_level);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": model.type \"", type, "\" is not supported (BPE, WordLevel)"));
  }
  auto normalizer = Normalizer::FromJson(root->value("normalizer", json()), "normalizer");
  if (!normalizer.ok()) return error(normalizer.status());
  t.normalizer_ = *std::move(normalizer);
  auto pre_tokenizer =
      PreTokenizer::FromJson(root->value("pre_tokenizer", json()), "pre_tokenizer");
  if (!pre_tokenizer.ok()) return error(pre_tokenizer.status());
  t.pre_tokenizer_ = *std::move(pre_tokenizer);
  auto decoder = Decoder::FromJson(root->value("decoder", json()), "decoder");
  if (!decoder.ok()) return error(decoder.status());
  t.decoder_ = *std::move(decoder);

  for (const auto& added : root->value("added_tokens", json::array())) {
    if (added.value("single_word", false)) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": added token \"",
                                                     added.value("content", std::string()),
                                                     "\" has single_word, which is not supported"));
    }
    if (!added.contains("id") || !added["id"].is_number_integer() ||
        added["id"].get<int64_t>() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": added token \"", added.value("content", std::string()), "\" needs an id >= 0"));
    }
    t.added_.push_back({added.value("content", std::string()), added["id"].get<int64_t>(),
                        added.value("special", false), added.value("lstrip", false),
                        added.value("rstrip", false)});
  }
  std::stable_sort(t.added_.begin(), t.added_.end(), [](const Added& a, const Added& b) {
    return a.content.size() > b.content.size();
  });

  // The post-processor's single-sequence template: the special tokens before and after $A.
  const auto template_of = [&](const json& processor, auto&& self) -> absl::Status {
    const std::string type = processor.value("type", std::string());
    if (type == "Sequence") {
      for (const auto& child : processor.value("processors", json::array()))
        RETURN_IF_ERROR(self(child, self));
    } else if (type == "TemplateProcessing") {
      bool after = false;
      for (const auto& item : processor.value("single", json::array())) {
        if (item.contains("Sequence")) {
          after = true;
        } else if (item.contains("SpecialToken")) {
          const std::string id = item["SpecialToken"].value("id", std::string());
          const auto specials = processor.find("special_tokens");
          if (specials == processor.end() || !specials->is_object() || !specials->contains(id) ||
              !(*specials)[id].contains("ids")) {
            return absl::InvalidArgumentError(
                absl::StrCat(file, ": post_processor names special token \"", id,
                             "\", which its special_tokens do not hold"));
          }
          for (const auto& v : (*specials)[id]["ids"])
            (after ? t.suffix_ : t.prefix_).push_back(v.get<int64_t>());
        }
      }
    } else if (type != "ByteLevel" && !type.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": post_processor type \"", type, "\" is not supported"));
    }
    return absl::OkStatus();
  };
  if (root->contains("post_processor") && !(*root)["post_processor"].is_null()) {
    RETURN_IF_ERROR(template_of((*root)["post_processor"], template_of));
  }

  ASSIGN_OR_RETURN(const auto config, ReadJsonFile(dir / "tokenizer_config.json"));
  ASSIGN_OR_RETURN(const auto map, ReadJsonFile(dir / "special_tokens_map.json"));
  for (const auto* source : {&map, &config}) {  // tokenizer_config.json wins
    if (!*source) continue;
    const json& j = **source;
    if (j.contains("bos_token")) t.bos_ = TokenText(j["bos_token"]);
    if (j.contains("eos_token")) t.eos_ = TokenText(j["eos_token"]);
    if (j.contains("pad_token")) t.pad_ = TokenText(j["pad_token"]);
    if (j.contains("unk_token")) t.unk_ = TokenText(j["unk_token"]);
  }
  if (config) {
    const std::string type = config->value("tokenizer_class", std::string());
    if ((type == "LlamaTokenizer" || type == "LlamaTokenizerFast") &&
        (config->contains("add_bos_token") || config->contains("add_eos_token"))) {
      t.prefix_.clear();
      t.suffix_.clear();
      if (config->value("add_bos_token", true) && t.bos_id()) t.prefix_.push_back(*t.bos_id());
      if (config->value("add_eos_token", false) && t.eos_id()) t.suffix_.push_back(*t.eos_id());
    }
  }
  // Later sources win: tokenizer_config.json, processor_config.json, chat_template.json,
  // chat_template.jinja.
  const auto chat_template_of = [&](const std::optional<json>& file, const char* name,
                                    bool structured) {
    if (!file || !file->is_object() || !file->contains("chat_template")) return;
    const json& chat = (*file)["chat_template"];
    std::string text;
    if (chat.is_string()) {
      text = chat.get<std::string>();
    } else if (chat.is_array()) {  // named templates: the "default" one
      for (const auto& named : chat) {
        if (named.is_object() && named.value("name", std::string()) == "default" &&
            named.contains("template") && named["template"].is_string()) {
          text = named["template"].get<std::string>();
        }
      }
    }
    if (text.empty()) return;
    t.chat_template_ = std::move(text);
    t.chat_template_file_ = name;
    t.chat_template_structured_ = structured;
  };
  chat_template_of(config, "tokenizer_config.json", false);
  ASSIGN_OR_RETURN(const auto processor, ReadJsonFile(dir / "processor_config.json"));
  chat_template_of(processor, "processor_config.json", true);
  ASSIGN_OR_RETURN(const auto chat_json, ReadJsonFile(dir / "chat_template.json"));
  chat_template_of(chat_json, "chat_template.json", true);
  std::error_code ec;
  if (fs::exists(dir / "chat_template.jinja", ec)) {
    ASSIGN_OR_RETURN(t.chat_template_, ReadUserFile((dir / "chat_template.jinja").string()));
    t.chat_template_file_ = "chat_template.jinja";
    t.chat_template_structured_ = false;
  }
  return t;
}

absl::StatusOr<std::vector<int64_t>> HfTokenizer::Encode(std::string_view text,
                                                         bool add_special_tokens) const {
  if (Utf8Lossy(text) != text)
    return absl::InvalidArgumentError("tokenizer: the text is not valid UTF-8");
  std::vector<int64_t> ids;
  if (add_special_tokens) ids = prefix_;
  const auto encode_stretch = [&](std::string_view stretch, bool first) -> absl::Status {
    if (stretch.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(const std::string normalized, normalizer_.Apply(std::string(stretch)));
    ASSIGN_OR_RETURN(const auto pieces, pre_tokenizer_.Split(normalized, first));
    for (const std::string& piece : pieces) RETURN_IF_ERROR(model_->Tokenize(piece, ids));
    return absl::OkStatus();
  };
  size_t start = 0;  // the stretch not yet encoded begins here
  size_t at = 0;
  bool first = true;
  while (at < text.size()) {
    const Added* found = nullptr;
    for (const Added& added : added_) {
      if (!added.content.empty() && text.compare(at, added.content.size(), added.content) == 0) {
        found = &added;
        break;
      }
    }
    if (found == nullptr) {
      ++at;
      continue;
    }
    size_t stretch_end = at;
    if (found->lstrip) {
      while (stretch_end > start && IsWhitespace(text[stretch_end - 1])) --stretch_end;
    }
    RETURN_IF_ERROR(encode_stretch(text.substr(start, stretch_end - start), first));
    first = false;
    ids.push_back(found->id);
    at += found->content.size();
    if (found->rstrip) {
      while (at < text.size() && IsWhitespace(text[at])) ++at;
    }
    start = at;
  }
  RETURN_IF_ERROR(encode_stretch(text.substr(start), first));
  if (add_special_tokens) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::string HfTokenizer::Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  for (int64_t id : ids) {
    const Added* added = nullptr;
    for (const Added& a : added_) {
      if (a.id == id) added = &a;
    }
    if (added != nullptr) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
    } else if (const std::string* token = model_->vocabulary().IdToToken(id)) {
      tokens.push_back(*token);
    }
  }
  return decoder_.Decode(std::move(tokens));
}

std::optional<int64_t> HfTokenizer::TokenToId(const std::string& token) const {
  if (token.empty()) return std::nullopt;
  for (const Added& a : added_) {
    if (a.content == token) return a.id;
  }
  return model_->vocabulary().TokenToId(token);
}

int64_t HfTokenizer::vocab_size() const {
  int64_t size = model_->vocabulary().size();
  for (const Added& a : added_) size = std::max(size, a.id + 1);
  return size;
}

int64_t HfTokenizer::AddSpecialToken(const std::string& content) {
  if (auto id = TokenToId(content)) return *id;
  const int64_t id = vocab_size();
  added_.push_back({content, id, /*special=*/true, /*lstrip=*/false, /*rstrip=*/false});
  std::stable_sort(added_.begin(), added_.end(), [](const Added& a, const Added& b) {
    return a.content.size() > b.content.size();
  });
  return id;
}

bool HfTokenizer::IsSpecial(int64_t id) const {
  for (const Added& a : added_) {
    if (a.id == id) return a.special;
  }
  return false;
}

}  // namespace tandem::tokenizer
