#include "tokenizer/pipeline.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <map>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "tokenizer/utf8.h"

namespace tandem::tokenizer {
namespace {

using nlohmann::json;

absl::Status Unsupported(const std::string& path, const json& j) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": type \"", j.value("type", std::string("?")), "\" is not supported"));
}

// The steps of a stage: a Sequence's children in order, or the stage itself.
std::vector<std::pair<const json*, std::string>> Flatten(const json& j, const std::string& path,
                                                         const char* list) {
  std::vector<std::pair<const json*, std::string>> out;
  if (j.is_null()) return out;
  if (j.value("type", std::string()) == "Sequence" && j.contains(list)) {
    int i = 0;
    for (const auto& child : j[list]) {
      for (auto& item : Flatten(child, absl::StrCat(path, ".", list, "[", i, "]"), list))
        out.push_back(item);
      ++i;
    }
    return out;
  }
  out.emplace_back(&j, path);
  return out;
}

// A Replace's or Split's pattern: {"String": s} or {"Regex": r}.
bool PatternString(const json& j, std::string& out) {
  if (!j.contains("pattern") || !j["pattern"].contains("String")) return false;
  out = j["pattern"]["String"].get<std::string>();
  return true;
}

const char kGpt2Regex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

const std::vector<std::string>& ByteToCharacter() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = Utf8Encode(printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++));
    }
    return t;
  }();
  return table;
}

int CharacterToByte(const std::string& character) {
  static const std::map<std::string, int> reverse = [] {
    std::map<std::string, int> r;
    for (int b = 0; b < 256; ++b) r[ByteToCharacter()[b]] = b;
    return r;
  }();
  const auto it = reverse.find(character);
  return it == reverse.end() ? -1 : it->second;
}

// ---- Normalizer ----

absl::StatusOr<Normalizer> Normalizer::FromJson(const json& j, const std::string& path) {
  Normalizer n;
  for (const auto& [step, at] : Flatten(j, path, "normalizers")) {
    const std::string type = step->value("type", std::string());
    if (type == "NFC" || type == "NFKC" || type == "Lowercase") {
      n.steps_.push_back({type, "", ""});
    } else if (type == "Prepend") {
      n.steps_.push_back({type, step->value("prepend", std::string()), ""});
    } else if (type == "Replace") {
      std::string pattern;
      if (!PatternString(*step, pattern)) {
        return absl::InvalidArgumentError(absl::StrCat(at, ": only a String pattern is supported"));
      }
      n.steps_.push_back({type, pattern, step->value("content", std::string())});
    } else {
      return Unsupported(at, *step);
    }
  }
  return n;
}

absl::StatusOr<std::string> Normalizer::Apply(std::string text) const {
  for (const Step& step : steps_) {
    if (step.type == "Prepend") {
      if (!text.empty()) text = step.a + text;
    } else if (step.type == "Replace") {
      text = absl::StrReplaceAll(text, {{step.a, step.b}});
    } else if (step.type == "Lowercase") {
      icu::UnicodeString unicode = icu::UnicodeString::fromUTF8(text);
      unicode.toLower(icu::Locale::getRoot());
      text.clear();
      unicode.toUTF8String(text);
    } else {
      UErrorCode status = U_ZERO_ERROR;
      const icu::Normalizer2* normalizer = step.type == "NFC"
                                               ? icu::Normalizer2::getNFCInstance(status)
                                               : icu::Normalizer2::getNFKCInstance(status);
      if (U_FAILURE(status)) return absl::InternalError(absl::StrCat("ICU: ", u_errorName(status)));
      const icu::UnicodeString normalized =
          normalizer->normalize(icu::UnicodeString::fromUTF8(text), status);
      if (U_FAILURE(status)) return absl::InternalError(absl::StrCat("ICU: ", u_errorName(status)));
      text.clear();
      normalized.toUTF8String(text);
    }
  }
  return text;
}

// ---- PreTokenizer ----

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }

  // [begin, end) of every match, left to right.
  std::vector<std::pair<size_t, size_t>> Matches(const std::string& text) const {
    std::vector<std::pair<size_t, size_t>> out;
    pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
    size_t offset = 0;
    while (offset <= text.size()) {
      const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                                 offset, PCRE2_NO_UTF_CHECK, data, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* v = pcre2_get_ovector_pointer(data);
      if (v[1] == v[0]) {  // an empty match: step over one character
        offset = v[1] + 1;
        while (offset < text.size() && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80)
          ++offset;
        continue;
      }
      out.emplace_back(v[0], v[1]);
      offset = v[1];
    }
    pcre2_match_data_free(data);
    return out;
  }
};

namespace {

absl::StatusOr<std::shared_ptr<PreTokenizer::Regex>> Compile(const std::string& pattern,
                                                             const std::string& at) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat(at, ": regex does not compile at offset ",
                                                   offset, ": ",
                                                   reinterpret_cast<const char*>(message)));
  }
  auto regex = std::make_shared<PreTokenizer::Regex>();
  regex->code = code;
  return regex;
}

// Splits each piece around the matches of `regex`, keeping them (Isolated) or not (Removed).
std::vector<std::string> SplitPieces(const std::vector<std::string>& pieces,
                                     const PreTokenizer::Regex& regex, bool keep_matches) {
  std::vector<std::string> out;
  for (const std::string& piece : pieces) {
    size_t last = 0;
    for (const auto& [begin, end] : regex.Matches(piece)) {
      if (begin > last) out.push_back(piece.substr(last, begin - last));
      if (keep_matches) out.push_back(piece.substr(begin, end - begin));
      last = end;
    }
    if (last < piece.size()) out.push_back(piece.substr(last));
  }
  return out;
}

}  // namespace

absl::StatusOr<PreTokenizer> PreTokenizer::FromJson(const json& j, const std::string& path) {
  PreTokenizer p;
  for (const auto& [step, at] : Flatten(j, path, "pretokenizers")) {
    const std::string type = step->value("type", std::string());
    Step s;
    s.type = type;
    if (type == "Split") {
      s.behavior = step->value("behavior", std::string("Isolated"));
      if (step->value("invert", false) || (s.behavior != "Isolated" && s.behavior != "Removed")) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ": behavior \"", s.behavior, "\"", step->value("invert", false) ? " inverted" : "",
            " is not supported (Isolated, Removed)"));
      }
      std::string pattern;
      if (step->contains("pattern") && (*step)["pattern"].contains("Regex")) {
        pattern = (*step)["pattern"]["Regex"].get<std::string>();
      } else if (PatternString(*step, pattern)) {
        std::string quoted;
        for (char c : pattern) {
          if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) quoted += '\\';
          quoted += c;
        }
        pattern = quoted;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ": pattern must be a String or a Regex"));
      }
      auto regex = Compile(pattern, at);
      if (!regex.ok()) return regex.status();
      s.regex = *regex;
    } else if (type == "ByteLevel") {
      s.add_prefix_space = step->value("add_prefix_space", false);
      if (step->value("use_regex", true)) {
        auto regex = Compile(kGpt2Regex, at);
        if (!regex.ok()) return regex.status();
        s.regex = *regex;
      }
    } else if (type == "WhitespaceSplit") {
      auto regex = Compile(R"(\s+)", at);
      if (!regex.ok()) return regex.status();
      s.regex = *regex;
      s.behavior = "Removed";
      s.type = "Split";
    } else if (type == "Metaspace") {
      s.replacement = step->value("replacement", std::string("\u2581"));
      s.prepend_scheme =
          step->value("prepend_scheme",
                      std::string(step->value("add_prefix_space", true) ? "always" : "never"));
      s.split = step->value("split", true);
    } else {
      return Unsupported(at, *step);
    }
    p.steps_.push_back(std::move(s));
  }
  return p;
}

absl::StatusOr<std::vector<std::string>> PreTokenizer::Split(const std::string& text,
                                                             bool first) const {
  std::vector<std::string> pieces{text};
  for (const Step& step : steps_) {
    if (step.type == "Split") {
      pieces = SplitPieces(pieces, *step.regex, step.behavior == "Isolated");
    } else if (step.type == "ByteLevel") {
      if (step.add_prefix_space && !pieces.empty() && !pieces.front().empty() &&
          pieces.front()[0] != ' ') {
        pieces.front() = " " + pieces.front();
      }
      if (step.regex) pieces = SplitPieces(pieces, *step.regex, true);
      for (std::string& piece : pieces) {
        std::string mapped;
        for (unsigned char byte : piece) mapped += ByteToCharacter()[byte];
        piece = std::move(mapped);
      }
    } else {  // Metaspace
      std::vector<std::string> out;
      for (size_t i = 0; i < pieces.size(); ++i) {
        std::string piece = absl::StrReplaceAll(pieces[i], {{" ", step.replacement}});
        const bool prepend =
            step.prepend_scheme == "always" || (step.prepend_scheme == "first" && first && i == 0);
        if (prepend && piece.rfind(step.replacement, 0) != 0) piece = step.replacement + piece;
        if (!step.split) {
          out.push_back(piece);
          continue;
        }
        size_t start = 0;  // each replacement begins a new piece
        for (size_t at = piece.find(step.replacement, 1); at != std::string::npos;
             at = piece.find(step.replacement, at + 1)) {
          out.push_back(piece.substr(start, at - start));
          start = at;
        }
        out.push_back(piece.substr(start));
      }
      pieces = std::move(out);
    }
  }
  std::erase_if(pieces, [](const std::string& p) { return p.empty(); });
  return pieces;
}

// ---- Decoder ----

absl::StatusOr<Decoder> Decoder::FromJson(const json& j, const std::string& path) {
  Decoder d;
  for (const auto& [step, at] : Flatten(j, path, "decoders")) {
    Step s;
    s.type = step->value("type", std::string());
    if (s.type == "Replace") {
      if (!PatternString(*step, s.a))
        return absl::InvalidArgumentError(absl::StrCat(at, ": only a String pattern is supported"));
      s.b = step->value("content", std::string());
    } else if (s.type == "Strip") {
      s.a = step->value("content", std::string(" "));
      s.start = step->value("start", 0);
      s.stop = step->value("stop", 0);
    } else if (s.type == "Metaspace") {
      s.a = step->value("replacement", std::string("\u2581"));
      s.prepend_scheme =
          step->value("prepend_scheme",
                      std::string(step->value("add_prefix_space", true) ? "always" : "never"));
    } else if (s.type != "ByteLevel" && s.type != "ByteFallback" && s.type != "Fuse") {
      return Unsupported(at, *step);
    }
    d.steps_.push_back(std::move(s));
  }
  return d;
}

std::string Decoder::Decode(std::vector<std::string> tokens) const {
  for (const Step& step : steps_) {
    if (step.type == "ByteLevel") {
      std::string bytes;
      for (const std::string& token : tokens) {
        for (const std::string& character : Utf8Characters(token)) {
          const int byte = CharacterToByte(character);
          if (byte >= 0) {
            bytes += static_cast<char>(byte);
          } else {
            bytes += character;
          }
        }
      }
      tokens = {Utf8Lossy(bytes)};
    } else if (step.type == "Replace") {
      for (std::string& token : tokens) token = absl::StrReplaceAll(token, {{step.a, step.b}});
    } else if (step.type == "ByteFallback") {
      std::vector<std::string> out;
      std::string pending;
      int pending_count = 0;
      const auto flush = [&] {
        if (pending_count == 0) return;
        if (Utf8Lossy(pending) == pending) {
          out.push_back(pending);
        } else {
          for (int i = 0; i < pending_count; ++i) out.push_back("\xEF\xBF\xBD");
        }
        pending.clear();
        pending_count = 0;
      };
      for (const std::string& token : tokens) {
        unsigned value = 0;
        if (token.size() == 6 && token.rfind("<0x", 0) == 0 && token[5] == '>' &&
            std::sscanf(token.c_str() + 3, "%2X", &value) == 1) {
          pending += static_cast<char>(value);
          ++pending_count;
        } else {
          flush();
          out.push_back(token);
        }
      }
      flush();
      tokens = std::move(out);
    } else if (step.type == "Fuse") {
      std::string all;
      for (const std::string& token : tokens) all += token;
      tokens = {all};
    } else if (step.type == "Strip") {
      for (std::string& token : tokens) {
        for (int i = 0; i < step.start && token.rfind(step.a, 0) == 0; ++i)
          token.erase(0, step.a.size());
        for (int i = 0; i < step.stop && token.size() >= step.a.size() &&
                        token.compare(token.size() - step.a.size(), step.a.size(), step.a) == 0;
             ++i) {
          token.erase(token.size() - step.a.size());
        }
      }
    } else if (step.type == "Metaspace") {
      for (size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = absl::StrReplaceAll(tokens[i], {{step.a, " "}});
        if (i == 0 && step.prepend_scheme != "never" && tokens[i].rfind(' ', 0) == 0)
          tokens[i].erase(0, 1);
      }
    }
  }
  // Without a decoder the tokenizers library joins the tokens with spaces.
  if (steps_.empty()) return absl::StrJoin(tokens, " ");
  std::string text;
  for (const std::string& token : tokens) text += token;
  return text;
}

}  // namespace tandem::tokenizer
