#include "tokenizer/utf8.h"

#include <cstdint>

#include "tokenizer/jinja/value.h"

namespace tandem::tokenizer {
namespace {

// The length of the valid UTF-8 sequence at the start of `s`, or 0 (with `bad` set to the length
// of the maximal invalid prefix, at least 1) when it is not valid. Follows the Unicode "maximal
// subpart" rule that from_utf8_lossy applies.
size_t ValidSequence(std::string_view s, size_t& bad) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t first = b(0);
  bad = 1;
  if (first < 0x80) return 1;
  size_t length = 0;
  uint8_t low = 0x80, high = 0xBF;
  if (first >= 0xC2 && first <= 0xDF) {
    length = 2;
  } else if (first >= 0xE0 && first <= 0xEF) {
    length = 3;
    if (first == 0xE0) low = 0xA0;
    if (first == 0xED) high = 0x9F;
  } else if (first >= 0xF0 && first <= 0xF4) {
    length = 4;
    if (first == 0xF0) low = 0x90;
    if (first == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  for (size_t i = 1; i < length; ++i) {
    if (i >= s.size()) return 0;
    const uint8_t c = b(i);
    const uint8_t lo = i == 1 ? low : 0x80, hi = i == 1 ? high : 0xBF;
    if (c < lo || c > hi) return 0;
    bad = i + 1;
  }
  return length;
}

}  // namespace

std::vector<std::string> Utf8Characters(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t bad = 1;
    size_t n = ValidSequence(text.substr(i), bad);
    if (n == 0) n = 1;
    out.emplace_back(text.substr(i, n));
    i += n;
  }
  return out;
}

std::string Utf8Encode(char32_t cp) { return jinja::Encode(cp); }

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    size_t bad = 1;
    const size_t n = ValidSequence(bytes.substr(i), bad);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

}  // namespace tandem::tokenizer
