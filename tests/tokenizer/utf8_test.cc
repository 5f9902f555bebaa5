#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace tandem::tokenizer {
namespace {

TEST(Utf8, CharactersKeepMultibyteSequencesWhole) {
  EXPECT_EQ(Utf8Characters("aé🎉"), (std::vector<std::string>{"a", "é", "🎉"}));
  EXPECT_EQ(Utf8Characters("\xFF"
                           "a"),
            (std::vector<std::string>{"\xFF", "a"}));
}

TEST(Utf8, LossyReplacesEachMaximalInvalidSequenceOnce) {
  EXPECT_EQ(Utf8Lossy("ok"), "ok");
  // A truncated 4-byte sequence is one maximal subpart: one U+FFFD, as from_utf8_lossy.
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x8E"
                      "a"),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(Utf8Lossy("\xC3\x28"), "\xEF\xBF\xBD(");
  EXPECT_EQ(Utf8Lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace
}  // namespace tandem::tokenizer
