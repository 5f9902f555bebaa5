#include "common/quote.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem {

std::string QuoteForMessage(std::string_view value) {
  size_t end = std::min(value.size(), kQuotedBytes);
  // Back to the start of a UTF-8 sequence: a continuation byte is 10xxxxxx.
  while (end < value.size() && end > 0 && (static_cast<unsigned char>(value[end]) & 0xC0) == 0x80)
    --end;
  std::string out = "\"";
  for (const char c : value.substr(0, end)) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += absl::StrFormat("\\x%02x", byte);
    } else {
      out += c;
    }
  }
  out += '"';
  if (end < value.size()) absl::StrAppend(&out, "... (", value.size(), " bytes)");
  return out;
}

}  // namespace tandem
