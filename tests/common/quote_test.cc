// common/quote.h: values quoted in error messages.
#include "common/quote.h"

#include <gtest/gtest.h>

#include <string>

namespace tandem {
namespace {

TEST(QuoteForMessage, QuotesAndEscapesWhatCouldBreakALineOrATerminal) {
  EXPECT_EQ(QuoteForMessage("plain"), "\"plain\"");
  EXPECT_EQ(QuoteForMessage(""), "\"\"");
  EXPECT_EQ(QuoteForMessage("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(QuoteForMessage("line\nnext\ttab"), "\"line\\nnext\\ttab\"");
  EXPECT_EQ(QuoteForMessage(std::string("\x1b[2J\x7f\0", 6)), "\"\\x1b[2J\\x7f\\x00\"");
  EXPECT_EQ(QuoteForMessage("caf\xc3\xa9"), "\"caf\xc3\xa9\"") << "UTF-8 is kept";
}

TEST(QuoteForMessage, CutsLongValuesAndSaysTheirLength) {
  EXPECT_EQ(QuoteForMessage(std::string(64, 'x')), "\"" + std::string(64, 'x') + "\"");
  EXPECT_EQ(QuoteForMessage(std::string(1 << 20, 'x')),
            "\"" + std::string(64, 'x') + "\"... (1048576 bytes)");
  // "é" (2 bytes) straddling byte 64 is left out whole rather than cut in half.
  const std::string straddling = std::string(63, 'x') + "\xc3\xa9" + "tail";
  EXPECT_EQ(QuoteForMessage(straddling), "\"" + std::string(63, 'x') + "\"... (69 bytes)");
}

}  // namespace
}  // namespace tandem
