#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "tokenizer/jinja/value.h"

namespace tandem::jinja {
namespace {

absl::Status Error(int line, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", std::string(message)));
}

// Python's "\s+" over UTF-8: the byte length of the whitespace run starting at `at`.
size_t SpaceRun(std::string_view text, size_t at) {
  size_t i = at;
  for (size_t length = 0; i < text.size() && IsPythonSpace(DecodeAt(text, i, &length));
       i += length) {
  }
  return i - at;
}

// Python's str.rstrip().
std::string_view RStrip(std::string_view text) {
  const std::vector<size_t> offsets = CodePointOffsets(text);
  const std::vector<char32_t> cps = Decode(text);
  size_t end = cps.size();
  while (end > 0 && IsPythonSpace(cps[end - 1])) --end;
  return text.substr(0, offsets[end]);
}

bool AllSpace(std::string_view text) { return !text.empty() && SpaceRun(text, 0) == text.size(); }

int Newlines(std::string_view text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// The Python string literal's body (between its quotes) unescaped as jinja2 does it
// (encode("ascii", "backslashreplace").decode("unicode-escape")).
absl::StatusOr<std::string> Unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    const auto hex = [&](int digits) -> absl::StatusOr<char32_t> {
      char32_t cp = 0;
      for (int k = 1; k <= digits; ++k) {
        if (i + k >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[i + k]))) {
          return Error(line, "truncated escape in a string");
        }
        cp = cp * 16 +
             static_cast<char32_t>(std::strtol(std::string(1, body[i + k]).c_str(), nullptr, 16));
      }
      i += digits;
      if (cp > 0x10ffff) return Error(line, "an escape in a string is past U+10FFFF");
      return cp;
    };
    switch (c) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        auto cp = hex(c == 'x' ? 2 : c == 'u' ? 4 : 8);
        if (!cp.ok()) return cp.status();
        out += Encode(*cp);
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          char32_t cp = c - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + (body[++i] - '0');
          }
          out += Encode(cp);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

constexpr std::string_view kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                           "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                           ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      if (absl::Status s = Root(); !s.ok()) return s;
    }
    tokens_.push_back({Token::Type::kEnd, "", 0, 0, line_});
    return std::move(tokens_);
  }

 private:
  void Data(std::string_view text) {
    if (!text.empty()) tokens_.push_back({Token::Type::kData, std::string(text), 0, 0, line_});
    line_ += Newlines(text);
  }

  // Text up to the next tag, then the tag.
  absl::Status Root() {
    size_t at = pos_;
    size_t tag = std::string::npos;
    while ((at = src_.find('{', at)) != std::string::npos) {
      if (at + 1 < src_.size() &&
          (src_[at + 1] == '{' || src_[at + 1] == '%' || src_[at + 1] == '#')) {
        tag = at;
        break;
      }
      ++at;
    }
    if (tag == std::string::npos) {
      Data(std::string_view(src_).substr(pos_));
      pos_ = src_.size();
      return absl::OkStatus();
    }
    const char kind = src_[tag + 1];
    const char sign =
        tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
    std::string_view text = std::string_view(src_).substr(pos_, tag - pos_);
    if (sign == '-') {
      const std::string_view stripped = RStrip(text);
      line_ += Newlines(text.substr(stripped.size()));
      text = stripped;
    } else if (sign != '+' && kind != '{') {
      const size_t line_start =
          text.rfind('\n') == std::string_view::npos ? 0 : text.rfind('\n') + 1;
      if ((line_start > 0 || line_starting_) && AllSpace(text.substr(line_start)))
        text = text.substr(0, line_start);
    }
    Data(text);
    pos_ = tag + 2 + (sign ? 1 : 0);
    line_starting_ = false;
    if (kind == '#') return Comment();
    if (kind == '%' && IsRaw()) return Raw();
    tokens_.push_back(
        {kind == '{' ? Token::Type::kVariableBegin : Token::Type::kBlockBegin, "", 0, 0, line_});
    return Tag(kind == '{' ? "}}" : "%}");
  }

  // After "{#": up to "#}", "-#}" (eating the whitespace after) or "+#}"; trim_blocks eats one
  // newline.
  absl::Status Comment() {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return Error(line_, "missing end of comment tag");
    line_ += Newlines(std::string_view(src_).substr(pos_, end - pos_));
    const char sign = end > pos_ ? src_[end - 1] : 0;
    pos_ = end + 2;
    EndTag(sign);
    return absl::OkStatus();
  }

  // What follows a tag's closing delimiter: "-" eats all whitespace, "+" nothing, else one newline.
  void EndTag(char sign) {
    if (sign == '-') {
      const size_t run = SpaceRun(src_, pos_);
      line_ += Newlines(std::string_view(src_).substr(pos_, run));
      line_starting_ = run > 0 && src_[pos_ + run - 1] == '\n';
      pos_ += run;
    } else if (sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
      line_starting_ = true;
    }
  }

  bool IsRaw() {
    size_t i = pos_ + SpaceRun(src_, pos_);
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    i += SpaceRun(src_, i);
    return src_.compare(i, 2, "%}") == 0 || src_.compare(i, 3, "-%}") == 0;
  }

  absl::Status Raw() {
    size_t i = src_.find("raw", pos_) + 3;
    i += SpaceRun(src_, i);
    const char open_sign = src_[i] == '-' ? '-' : 0;
    pos_ = i + (open_sign ? 3 : 2);
    if (open_sign) pos_ += SpaceRun(src_, pos_);
    for (size_t at = src_.find("{%", pos_); at != std::string::npos; at = src_.find("{%", at + 2)) {
      size_t j = at + 2;
      const char sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : 0;
      if (sign) ++j;
      j += SpaceRun(src_, j);
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      j += SpaceRun(src_, j);
      char end_sign = 0;
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) end_sign = src_[j++];
      if (src_.compare(j, 2, "%}") != 0) continue;
      std::string_view text = std::string_view(src_).substr(pos_, at - pos_);
      if (sign == '-') text = RStrip(text);
      Data(text);
      line_ += Newlines(std::string_view(src_).substr(pos_ + text.size(), j - pos_ - text.size()));
      pos_ = j + 2;
      EndTag(end_sign);
      return absl::OkStatus();
    }
    return Error(line_, "missing end of raw directive");
  }

  // Inside "{{" or "{%": names, literals and operators up to the closing delimiter, which counts
  // only outside brackets.
  absl::Status Tag(std::string_view close) {
    std::vector<char> brackets;
    while (true) {
      pos_ += SpaceRun(src_, pos_);
      if (pos_ >= src_.size())
        return Error(line_, absl::StrCat("missing '", std::string(close), "'"));
      if (brackets.empty()) {
        char sign = 0;
        size_t at = pos_;
        if ((src_[at] == '-' || src_[at] == '+') && src_.compare(at + 1, close.size(), close) == 0)
          sign = src_[at++];
        if (src_.compare(at, close.size(), close) == 0 && !(sign == '+' && close == "}}")) {
          pos_ = at + close.size();
          tokens_.push_back({close == "}}" ? Token::Type::kVariableEnd : Token::Type::kBlockEnd, "",
                             0, 0, line_});
          if (close == "%}") {
            EndTag(sign);
          } else if (sign == '-') {
            EndTag('-');
          } else {
            line_starting_ = false;
          }
          return absl::OkStatus();
        }
      }
      const char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos_;
        while (end < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
          ++end;
        tokens_.push_back({Token::Type::kName, src_.substr(pos_, end - pos_), 0, 0, line_});
        pos_ = end;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        if (absl::Status s = Number(); !s.ok()) return s;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t end = pos_ + 1;
        while (end < src_.size() && src_[end] != c) end += src_[end] == '\\' ? 2 : 1;
        if (end >= src_.size()) return Error(line_, "unterminated string");
        auto value = Unescape(std::string_view(src_).substr(pos_ + 1, end - pos_ - 1), line_);
        if (!value.ok()) return value.status();
        tokens_.push_back({Token::Type::kString, *value, 0, 0, line_});
        line_ += Newlines(std::string_view(src_).substr(pos_, end - pos_));
        pos_ = end + 1;
        continue;
      }
      std::string_view op;
      for (std::string_view candidate : kOperators) {
        if (src_.compare(pos_, candidate.size(), candidate) == 0) {
          op = candidate;
          break;
        }
      }
      if (op.empty())
        return Error(line_, absl::StrCat("unexpected character '", std::string(1, c), "'"));
      if (op == "(" || op == "[" || op == "{")
        brackets.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      if (op == ")" || op == "]" || op == "}") {
        if (brackets.empty())
          return Error(line_, absl::StrCat("unexpected '", std::string(op), "'"));
        if (brackets.back() != op[0]) {
          return Error(line_, absl::StrCat("unexpected '", std::string(op), "', expected '",
                                           std::string(1, brackets.back()), "'"));
        }
        brackets.pop_back();
      }
      tokens_.push_back({Token::Type::kOperator, std::string(op), 0, 0, line_});
      pos_ += op.size();
    }
  }

  // An integer (decimal, 0b, 0o, 0x, with "_" separators) or a float ("1.5", "1e3", "2.5e-1").
  absl::Status Number() {
    size_t end = pos_;
    const auto digits = [&](auto is_digit) {
      const size_t start = end;
      while (end < src_.size() && (is_digit(src_[end]) || (src_[end] == '_' && end > start))) ++end;
      return end > start;
    };
    const auto decimal = [](char c) { return c >= '0' && c <= '9'; };
    std::string text;
    if (src_[pos_] == '0' && pos_ + 1 < src_.size() && src_[pos_ + 1] != 0 &&
        std::strchr("bBoOxX", src_[pos_ + 1]) != nullptr) {
      const char base = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[pos_ + 1])));
      end = pos_ + 2;
      const auto in_base = [base](char c) {
        return base == 'b'   ? (c == '0' || c == '1')
               : base == 'o' ? (c >= '0' && c <= '7')
                             : std::isxdigit(static_cast<unsigned char>(c)) != 0;
      };
      if (!digits(in_base)) return Error(line_, "a number with no digits after its base");
      for (size_t i = pos_ + 2; i < end; ++i) {
        if (src_[i] != '_') text += src_[i];
      }
      errno = 0;
      const unsigned long long value = std::strtoull(text.c_str(), nullptr,
                                                     base == 'b'   ? 2
                                                     : base == 'o' ? 8
                                                                   : 16);
      if (errno == ERANGE || value > static_cast<unsigned long long>(INT64_MAX)) {
        return Error(line_, "an integer literal past 64 bits");
      }
      tokens_.push_back({Token::Type::kInteger, "", static_cast<int64_t>(value), 0, line_});
      pos_ = end;
      return absl::OkStatus();
    }
    digits(decimal);
    bool real = false;
    if (end + 1 < src_.size() && src_[end] == '.' && decimal(src_[end + 1])) {
      ++end;
      digits(decimal);
      real = true;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t at = end + 1;
      if (at < src_.size() && (src_[at] == '+' || src_[at] == '-')) ++at;
      if (at < src_.size() && decimal(src_[at])) {
        end = at;
        digits(decimal);
        real = true;
      }
    }
    for (size_t i = pos_; i < end; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    pos_ = end;
    if (real) {
      tokens_.push_back({Token::Type::kFloat, "", 0, std::strtod(text.c_str(), nullptr), line_});
      return absl::OkStatus();
    }
    errno = 0;
    const long long value = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE) return Error(line_, "an integer literal past 64 bits");
    tokens_.push_back({Token::Type::kInteger, "", value, 0, line_});
    return absl::OkStatus();
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

// Newlines as "\n", and the one trailing newline dropped (keep_trailing_newline off).
std::string Normalize(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source) {
  return Lexer(Normalize(source)).Run();
}

}  // namespace tandem::jinja
