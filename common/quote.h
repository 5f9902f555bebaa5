// A value from outside (a spec's string, a token, a key) as an error message quotes it: in double
// quotes, control characters, quotes and backslashes escaped so that it stays one line and cannot
// move a terminal's cursor, and cut after kQuotedBytes bytes with its length said, so that a
// megabyte of input does not become a megabyte of message. UTF-8 is kept whole.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem {

inline constexpr size_t kQuotedBytes = 64;

// "\"abc\"", "\"a\\nb\"", "\"<64 bytes>...\" (1048576 bytes)".
std::string QuoteForMessage(std::string_view value);

}  // namespace tandem
