// Tests for data/tokenizer.cc: normalisation, id order, encode/decode, and the saved file.
#include "data/tokenizer.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/temp_dir.h"
#include "tests/data/test_files.h"

namespace tandem::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SplitWords, LowercasesSplitsPunctuationAndWhitespace) {
  EXPECT_THAT(SplitWords("A Cat, sat.\tON  the-mat!\n"),
              ElementsAre("a", "cat", ",", "sat", ".", "on", "the", "-", "mat", "!"));
  EXPECT_THAT(SplitWords("<eos> café"), ElementsAre("<", "eos", ">", "café"));
  EXPECT_THAT(SplitWords("  \t "), ElementsAre());
}

TEST(Tokenizer, SpecialTokensComeFirstThenWordsByCountThenAlphabetically) {
  const Tokenizer tokenizer = Tokenizer::Build({"b a", "a c", "A b", "d"});
  EXPECT_THAT(tokenizer.words(),
              ElementsAre("<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d"));
  EXPECT_EQ(tokenizer.size(), 8);
  EXPECT_EQ(Tokenizer::kPad, 0);
  EXPECT_EQ(Tokenizer::kBos, 1);
  EXPECT_EQ(Tokenizer::kEos, 2);
  EXPECT_EQ(Tokenizer::kUnk, 3);
  // The same captions in another order give the same ids.
  EXPECT_EQ(Tokenizer::Build({"d", "A b", "a c", "b a"}), tokenizer);
}

TEST(Tokenizer, MinCountDropsRareWords) {
  const Tokenizer tokenizer = Tokenizer::Build({"x y", "x z", "x y"}, 2);
  EXPECT_THAT(tokenizer.words(), ElementsAre("<pad>", "<bos>", "<eos>", "<unk>", "x", "y"));
  EXPECT_THAT(tokenizer.Encode("x z y"), ElementsAre(4, Tokenizer::kUnk, 5));
}

TEST(Tokenizer, EncodeDecodeRoundTripsNormalisedText) {
  const Tokenizer tokenizer =
      Tokenizer::Build({"a small red circle at the top left", "a large blue cross at the center"});
  const std::vector<int32_t> ids = tokenizer.Encode("A large red cross at the top left");
  EXPECT_EQ(ids.size(), 8u);
  EXPECT_EQ(tokenizer.Decode(ids), "a large red cross at the top left");
  EXPECT_THAT(
      tokenizer.Encode("a purple circle"),
      ElementsAre(tokenizer.Encode("a")[0], Tokenizer::kUnk, tokenizer.Encode("circle")[0]));
  EXPECT_EQ(tokenizer.Decode(tokenizer.Encode("a purple circle")), "a <unk> circle");
}

TEST(Tokenizer, DecodeStopsAtEosAndSkipsPadAndBos) {
  const Tokenizer tokenizer = Tokenizer::Build({"hello world"});
  const int32_t hello = tokenizer.Encode("hello")[0];
  const int32_t world = tokenizer.Encode("world")[0];
  EXPECT_EQ(
      tokenizer.Decode({Tokenizer::kBos, hello, Tokenizer::kPad, world, Tokenizer::kEos, hello}),
      "hello world");
  EXPECT_EQ(tokenizer.Decode({hello, 99, -1}), "hello <unk> <unk>");
  EXPECT_EQ(tokenizer.Word(99), "<unk>");
  EXPECT_EQ(tokenizer.Decode({}), "");
}

TEST(Tokenizer, SaveThenLoadGivesTheSameTokenizer) {
  const Tokenizer tokenizer = Tokenizer::Build({"one two two", "three, three three!"});
  testing::TempDir dir;
  const std::string path = dir / "tokenizer.json";
  ASSERT_TRUE(tokenizer.Save(path).ok());
  EXPECT_THAT(testing::ReadTestFile(path), HasSubstr("\"format\": \"tandem-word-tokenizer\""));
  absl::StatusOr<Tokenizer> loaded = Tokenizer::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, tokenizer);
  EXPECT_THAT(loaded->words(),
              ElementsAre("<pad>", "<bos>", "<eos>", "<unk>", "three", "two", "!", ",", "one"));
  EXPECT_EQ(loaded->Encode("two three"), tokenizer.Encode("two three"));
}

TEST(Tokenizer, LoadOfAMissingFileIsNotFound) {
  testing::TempDir dir;
  absl::StatusOr<Tokenizer> loaded = Tokenizer::Load(dir / "nope.json");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(loaded.status().message(), HasSubstr(dir / "nope.json"));
}

TEST(Tokenizer, LoadOfABadFileNamesTheFileAndTheProblem) {
  testing::TempDir dir;
  const std::string path = dir / "bad.json";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not valid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {R"({"format": "bpe", "version": 1, "words": []})",
       "\"format\" must be \"tandem-word-tokenizer\""},
      {R"({"format": "tandem-word-tokenizer", "version": 2, "words": []})",
       "unsupported \"version\""},
      {R"({"format": "tandem-word-tokenizer", "version": 1, "words": "a b"})",
       "\"words\" must be an array"},
      {R"({"format": "tandem-word-tokenizer", "version": 1, "words": ["<pad>", "<eos>", "<bos>", "<unk>"]})",
       "word 1 must be <bos>, not <eos>"},
      {R"({"format": "tandem-word-tokenizer", "version": 1, "words": ["<pad>", "<bos>", "<eos>", "<unk>", "a", "a"]})",
       "word \"a\" appears twice"},
      {R"({"format": "tandem-word-tokenizer", "version": 1, "words": ["<pad>", "<bos>", "<eos>", "<unk>", 5]})",
       "word 4 is not a non-empty string"},
      {R"({"format": "tandem-word-tokenizer", "version": 1, "words": ["<pad>"]})",
       "fewer words than special"},
      {R"({"format": "tandem-word-tokenizer", "version": 1, "words": [], "extra": 1})",
       "unknown key \"extra\""},
  };
  for (const auto& [contents, problem] : cases) {
    ASSERT_TRUE(testing::WriteTestFile(path, contents));
    absl::StatusOr<Tokenizer> loaded = Tokenizer::Load(path);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << contents;
    EXPECT_THAT(loaded.status().message(), HasSubstr("tokenizer file " + path + ": ")) << contents;
    EXPECT_THAT(loaded.status().message(), HasSubstr(problem)) << contents;
  }
}

}  // namespace
}  // namespace tandem::data
