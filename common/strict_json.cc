#include "common/strict_json.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

using json = nlohmann::json;

// This Abseil's string_view is its own type, so std::string_view goes through this into StrCat.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Records the path of the first key that appears twice in one object (nlohmann keeps the last).
// Each open container keeps only its step from its parent (".key" or "[3]"); the path is joined
// from the stack when a duplicate is found, so a deep document costs linear time, not quadratic.
class DuplicateKeyFinder {
 public:
  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        frames_.push_back(
            Frame{event == json::parse_event_t::object_start, ChildStep(), {}, 0, ""});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!frames_.empty()) frames_.pop_back();
        // A finished container is a value of its parent.
        if (!frames_.empty() && !frames_.back().is_object) ++frames_.back().count;
        break;
      case json::parse_event_t::key:
        if (!frames_.empty()) {
          Frame& frame = frames_.back();
          frame.last_key = parsed.get<std::string>();
          if (!frame.keys.insert(frame.last_key).second && first_duplicate_.empty()) {
            first_duplicate_ = Path(frame.last_key);
          }
        }
        break;
      case json::parse_event_t::value:
        if (!frames_.empty() && !frames_.back().is_object) ++frames_.back().count;
        break;
    }
    return true;
  }

  const std::string& first_duplicate() const { return first_duplicate_; }

 private:
  struct Frame {
    bool is_object;
    std::string step;  // from its parent: ".key" or "[3]"; "" for the document
    std::set<std::string> keys;
    size_t count;  // arrays: elements seen so far
    std::string last_key;
  };

  // The step from the innermost frame to a container that starts now inside it.
  std::string ChildStep() const {
    if (frames_.empty()) return "";
    const Frame& parent = frames_.back();
    if (parent.is_object) return absl::StrCat(".", parent.last_key);
    return absl::StrCat("[", parent.count, "]");
  }

  // The dotted path of `key` in the innermost frame.
  std::string Path(const std::string& key) const {
    std::string path;
    for (const Frame& frame : frames_) path += frame.step;
    absl::StrAppend(&path, ".", key);
    return path.starts_with('.') ? path.substr(1) : path;
  }

  std::vector<Frame> frames_;
  std::string first_duplicate_;
};

// nlohmann reports the byte after the one it stopped at; users want a line and a column (1-based).
std::string Position(std::string_view text, size_t byte) {
  size_t offset = std::min(byte == 0 ? 0 : byte - 1, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return absl::StrCat("line ", line, ", column ", offset - line_start + 1);
}

// The reason of a nlohmann parse_error without its "[json.exception.parse_error.101] parse error at
// line 1, column 2: " preamble.
std::string_view ParseErrorReason(std::string_view what) {
  size_t at = what.find("parse error");
  if (at == std::string_view::npos) return what;
  size_t colon = what.find(": ", at);
  return colon == std::string_view::npos ? what : what.substr(colon + 2);
}

// A nlohmann exception's message without its "[json.exception.out_of_range.406] " tag.
std::string_view ExceptionReason(std::string_view what) {
  const size_t tag_end = what.find("] ");
  return what.starts_with("[json.exception.") && tag_end != std::string_view::npos
             ? what.substr(tag_end + 2)
             : what;
}

// Where the literal an out_of_range message quotes ("number overflow parsing '1e999'") first
// stands in `text`, as Position says it; "(unknown position)" when it cannot be found.
std::string NumberPosition(std::string_view text, std::string_view what) {
  const size_t open = what.find('\'');
  const size_t close = open == std::string_view::npos ? open : what.find('\'', open + 1);
  if (close == std::string_view::npos) return "(unknown position)";
  const size_t at = text.find(what.substr(open + 1, close - open - 1));
  return at == std::string_view::npos ? "(unknown position)" : Position(text, at + 1);
}

// The offset of the first '[' or '{' that opens a container deeper than kMaxJsonDepth, outside
// strings; npos when there is none. Syntax is nlohmann's to judge: this only counts.
size_t FirstTooDeep(std::string_view text) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

}  // namespace

absl::StatusOr<json> ParseJsonStrict(std::string_view text) {
  if (const size_t deep = FirstTooDeep(text); deep != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(Position(text, deep + 1),
                                                   ": invalid JSON: nested more than ",
                                                   kMaxJsonDepth, " levels deep"));
  }
  DuplicateKeyFinder duplicates;
  json document;
  try {
    document = json::parse(text.begin(), text.end(), std::ref(duplicates));
  } catch (const json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(Position(text, e.byte), ": invalid JSON: ", Sv(ParseErrorReason(e.what()))));
  } catch (const json::out_of_range& e) {
    // A number beyond a double ("1e999"): nlohmann names the literal but not where it is.
    return absl::InvalidArgumentError(absl::StrCat(
        NumberPosition(text, e.what()), ": invalid JSON: ", Sv(ExceptionReason(e.what()))));
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON: ", Sv(ExceptionReason(e.what()))));
  }
  if (!duplicates.first_duplicate().empty())
    return absl::InvalidArgumentError(
        absl::StrCat(duplicates.first_duplicate(), ": duplicate key"));
  return document;
}

bool JsonInteger::InRange(int64_t min, uint64_t max) const {
  if (kind != Kind::kInteger) return false;
  if (negative) return as_signed >= min;
  return (min <= 0 || as_unsigned >= static_cast<uint64_t>(min)) && as_unsigned <= max;
}

std::optional<int64_t> JsonInteger::ToInt64() const {
  if (!InRange(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    return std::nullopt;
  }
  return negative ? as_signed : static_cast<int64_t>(as_unsigned);
}

JsonInteger ReadJsonInteger(const json& value, JsonIntegerStrings strings) {
  JsonInteger out;
  out.kind = JsonInteger::Kind::kInteger;
  if (value.is_number_unsigned()) {
    out.as_unsigned = value.get<uint64_t>();
    return out;
  }
  if (value.is_number_integer()) {
    const int64_t x = value.get<int64_t>();
    out.negative = x < 0;
    if (out.negative) {
      out.as_signed = x;
    } else {
      out.as_unsigned = static_cast<uint64_t>(x);
    }
    return out;
  }
  JsonInteger not_an_integer;
  if (value.is_number_float()) {
    const double x = value.get<double>();
    if (!std::isfinite(x) || std::trunc(x) != x) return not_an_integer;
    // 2^63 and 2^64 are exact doubles; the bounds below keep the casts defined.
    if (x < -9223372036854775808.0 || x >= 18446744073709551616.0) {
      out.kind = JsonInteger::Kind::kOutOfRange;
      return out;
    }
    if (x < 0) {
      out.negative = true;
      out.as_signed = static_cast<int64_t>(x);
    } else {
      out.as_unsigned = static_cast<uint64_t>(x);
    }
    return out;
  }
  if (value.is_string() && strings == JsonIntegerStrings::kAccept) {
    const std::string& s = value.get_ref<const std::string&>();
    if (!s.empty() && s[0] == '-') {
      if (!absl::SimpleAtoi(s, &out.as_signed)) return not_an_integer;
      out.negative = out.as_signed < 0;  // "-0" is not negative, and as_unsigned holds its 0
      return out;
    }
    if (s.empty() || s[0] < '0' || s[0] > '9' || !absl::SimpleAtoi(s, &out.as_unsigned)) {
      return not_an_integer;
    }
    return out;
  }
  return not_an_integer;
}

std::string DescribeJsonValue(const json& value) {
  constexpr size_t kMaxShown = 60;
  switch (value.type()) {
    case json::value_t::string: {
      std::string shown = value.dump();
      if (shown.size() > kMaxShown) shown = absl::StrCat(shown.substr(0, kMaxShown), "...\"");
      return absl::StrCat("string ", shown);
    }
    case json::value_t::boolean:
      return absl::StrCat("boolean ", value.dump());
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return absl::StrCat("number ", value.dump());
    case json::value_t::null:
      return "null";
    case json::value_t::array:
      return "array";
    default:
      return "object";
  }
}

}  // namespace tandem
