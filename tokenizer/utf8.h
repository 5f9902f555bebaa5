// UTF-8 helpers for the tokenizer: code points of a string, and bytes to text the way Rust's
// String::from_utf8_lossy does it (each maximal invalid sequence becomes one U+FFFD), which is
// what the tokenizers library does when decoded bytes are not valid UTF-8.
// Stateless and thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::tokenizer {

// The text split into its characters (code points), each as its UTF-8 bytes; an invalid byte is
// one "character" of its own.
std::vector<std::string> Utf8Characters(std::string_view text);

// The UTF-8 encoding of code point `cp`.
std::string Utf8Encode(char32_t cp);

// `bytes` as valid UTF-8, invalid sequences replaced by U+FFFD as from_utf8_lossy does.
std::string Utf8Lossy(std::string_view bytes);

}  // namespace tandem::tokenizer
