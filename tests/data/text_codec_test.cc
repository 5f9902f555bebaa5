// data/text_codec.h: the two layouts a job's text takes. The word layout must give exactly the
// caption sequence the models train on from scratch (<bos> caption <eos>, the caption and <eos>
// labelled); the Hugging Face layout must equal EncodeConversation (compared with transformers in
// conversation_test.cc), and a prompt must be the conversation up to the last answer with the
// template's generation prompt, the answer its labelled ids less the end of turn.
#include "data/text_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "data/batch.h"
#include "data/shapes.h"

namespace tandem::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
constexpr int64_t kI = EncodedConversation::kIgnore;
const std::string kFixtures = TANDEM_HF_FIXTURES;

TextCodec WordCodec() {
  return TextCodec::Words(Tokenizer::Build({"a red circle", "what colour is it ?"}));
}

TEST(TextCodecWords, CaptionIsBosCaptionEos) {
  const TextCodec codec = WordCodec();
  const Tokenizer& words = *codec.words();
  auto encoded = codec.Encode({{"user", "<image>"}, {"assistant", "A red circle"}}, "sample 0");
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  const std::vector<int32_t> caption = words.Encode("a red circle");
  EXPECT_THAT(encoded->ids,
              ElementsAre(Tokenizer::kBos, caption[0], caption[1], caption[2], Tokenizer::kEos));
  EXPECT_THAT(encoded->labels,
              ElementsAre(kI, caption[0], caption[1], caption[2], Tokenizer::kEos));
  EXPECT_EQ(codec.image_tokens(), 0);
  EXPECT_EQ(codec.image_token_id(), -1);
  EXPECT_THAT(codec.stop_ids(), ElementsAre(Tokenizer::kEos));
}

TEST(TextCodecWords, ConversationLabelsOnlyTheAnswers) {
  const TextCodec codec = WordCodec();
  const Tokenizer& words = *codec.words();
  const std::vector<tokenizer::ChatMessage> messages = {{"user", "<image>\nWhat colour is it?"},
                                                        {"assistant", "red"},
                                                        {"user", "What is it?"},
                                                        {"assistant", "a circle"}};
  auto encoded = codec.Encode(messages, "sample 1");
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  const int64_t what = words.Encode("what")[0], colour = words.Encode("colour")[0],
                is = words.Encode("is")[0], it = words.Encode("it")[0], q = words.Encode("?")[0],
                red = words.Encode("red")[0], a = words.Encode("a")[0],
                circle = words.Encode("circle")[0];
  EXPECT_THAT(encoded->ids,
              ElementsAre(what, colour, is, it, q, Tokenizer::kBos, red, Tokenizer::kEos, what, is,
                          it, q, Tokenizer::kBos, a, circle, Tokenizer::kEos));
  EXPECT_THAT(encoded->labels, ElementsAre(kI, kI, kI, kI, kI, kI, red, Tokenizer::kEos, kI, kI, kI,
                                           kI, kI, a, circle, Tokenizer::kEos));

  auto prompt = codec.EncodePrompt(messages, "sample 1");
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_THAT(prompt->ids, ElementsAre(what, colour, is, it, q, Tokenizer::kBos, red,
                                       Tokenizer::kEos, what, is, it, q, Tokenizer::kBos));
  EXPECT_THAT(prompt->answer, ElementsAre(a, circle));
  EXPECT_EQ(codec.Decode({a, circle, Tokenizer::kEos, red}), "a circle");
}

TEST(TextCodecWords, PromptNeedsAnAnswerLastAndSomethingBefore) {
  const TextCodec codec = WordCodec();
  auto status = codec.EncodePrompt({{"user", "<image>"}}, "train.json: [4]").status();
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("train.json: [4]: the last message is not the assistant's"));
  status = codec.EncodePrompt({{"assistant", "red"}}, "train.json: [5]").status();
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("train.json: [5]: nothing comes before the answer"));
}

// Conversations from scratch: the Words layout's words and labels, with each image's positions at
// its mark (the image id after the words); a caption is the Words sequence with the image where
// the prefix was; text-only and two-image samples read as LLaVA reads them.
TEST(TextCodecWordsAtMarks, ImagesTakeTheirPositionsAtTheirMarks) {
  const Tokenizer words = Tokenizer::Build({"a red circle", "what colour is it ?"});
  const TextCodec codec = TextCodec::WordsAtMarks(words, /*image_tokens=*/3);
  const int64_t im = words.size();
  EXPECT_EQ(codec.image_token_id(), im);
  EXPECT_EQ(codec.vocab_size(), words.size() + 1);
  EXPECT_EQ(codec.image_tokens(), 3);
  const int64_t a = words.Encode("a")[0], red = words.Encode("red")[0],
                circle = words.Encode("circle")[0], what = words.Encode("what")[0],
                colour = words.Encode("colour")[0], q = words.Encode("?")[0];
  constexpr int64_t kBos = Tokenizer::kBos, kEos = Tokenizer::kEos;
  auto caption = codec.Encode({{"user", "<image>"}, {"assistant", "A red circle"}}, "s0");
  ASSERT_TRUE(caption.ok()) << caption.status();
  EXPECT_THAT(caption->ids, ElementsAre(im, im, im, kBos, a, red, circle, kEos));
  EXPECT_THAT(caption->labels, ElementsAre(kI, kI, kI, kI, a, red, circle, kEos));

  const std::vector<tokenizer::ChatMessage> two = {{"user", "What<image>colour <image>?"},
                                                   {"assistant", "red"}};
  auto both = codec.Encode(two, "s1");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_THAT(both->ids, ElementsAre(what, im, im, im, colour, im, im, im, q, kBos, red, kEos));
  auto prompt = codec.EncodePrompt(two, "s1");
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_THAT(prompt->ids, ElementsAre(what, im, im, im, colour, im, im, im, q, kBos));
  EXPECT_THAT(prompt->answer, ElementsAre(red));

  auto text = codec.Encode({{"user", "What colour?"}, {"assistant", "red"}}, "s2");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(text->ids, ElementsAre(what, colour, q, kBos, red, kEos));
  EXPECT_EQ(codec.Decode({red, im, circle}), "red <unk> circle");
}

// Under any-res each mark takes its own image's layout, and the marks must match the images.
TEST(TextCodecWordsAtMarks, AnyResImagesTakeTheirLayoutsPositions) {
  const Tokenizer words = Tokenizer::Build({"what colour ?"});
  const AnyResGeometry geometry{{{32, 32}, {32, 64}, {64, 32}}, /*tile=*/32, /*side=*/4};
  const TextCodec codec = TextCodec::WordsAtMarks(words, /*image_tokens=*/16, geometry);
  const std::vector<Resolution> sizes = {{32, 64}, {40, 40}};
  const std::vector<int64_t> positions = codec.ImagePositions(sizes);
  // 16 base features, then 4 rows of 8 features and a newline; a square image's 4 x (4 + 1).
  EXPECT_THAT(positions, ElementsAre(16 + 4 * 9, 16 + 4 * 5));
  EXPECT_EQ(codec.max_image_positions(), 16 + 8 * 5);  // a tall image's 8 rows of 4
  auto encoded =
      codec.Encode({{"user", "<image><image>what colour?"}, {"assistant", "red"}}, "s3", sizes);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  EXPECT_EQ(std::count(encoded->ids.begin(), encoded->ids.end(), words.size()),
            positions[0] + positions[1]);
  EXPECT_EQ(encoded->ids[positions[0] + positions[1]], words.Encode("what")[0]);
  auto fewer = codec.Encode({{"user", "<image>what?"}, {"assistant", "red"}}, "s4", sizes);
  EXPECT_THAT(std::string(fewer.status().message()),
              HasSubstr("s4: has 1 \"<image>\" marks for 2 images"));
  auto more = codec.Encode({{"user", "<image><image><image>"}, {"assistant", "red"}}, "s5", sizes);
  EXPECT_THAT(std::string(more.status().message()),
              HasSubstr("s5: has more \"<image>\" marks than its 2 images"));
}

class TextCodecHf : public ::testing::TestWithParam<std::string> {};

TEST_P(TextCodecHf, EqualsEncodeConversationAndPromptsWithTheGenerationPrompt) {
  auto tokenizer = tokenizer::HfTokenizer::Load(kFixtures + "/" + GetParam());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto format = tokenizer::ChatTemplate::OfTokenizer(*tokenizer);
  ASSERT_TRUE(format.ok()) << format.status();
  auto codec = TextCodec::Hf(*tokenizer, *format, /*image_tokens=*/3);
  ASSERT_TRUE(codec.ok()) << codec.status();
  auto conversations = ReadConversations(kFixtures + "/reference/conversations.json");
  ASSERT_TRUE(conversations.ok()) << conversations.status();
  for (const Conversation& c : *conversations) {
    auto encoded = codec->Encode(c.messages, c.source);
    auto expected = EncodeConversation(c, *tokenizer, *format, 3);
    ASSERT_TRUE(encoded.ok() && expected.ok());
    EXPECT_EQ(encoded->ids, expected->ids) << c.source;
    EXPECT_EQ(encoded->labels, expected->labels) << c.source;

    auto prompt = codec->EncodePrompt(c.messages, c.source);
    ASSERT_TRUE(prompt.ok()) << prompt.status();
    const std::vector<tokenizer::ChatMessage> asked(c.messages.begin(), c.messages.end() - 1);
    auto asked_ids =
        EncodeMessages(asked, c.source, *tokenizer, *format, 3, /*add_generation_prompt=*/true);
    ASSERT_TRUE(asked_ids.ok());
    EXPECT_EQ(prompt->ids, asked_ids->ids) << c.source;
    // The whole conversation is the prompt, the answer and the end of turn (ChatML adds a newline).
    std::vector<int64_t> joined = prompt->ids;
    joined.insert(joined.end(), prompt->answer.begin(), prompt->answer.end());
    ASSERT_LT(joined.size(), encoded->ids.size());
    EXPECT_TRUE(std::equal(joined.begin(), joined.end(), encoded->ids.begin())) << c.source;
    EXPECT_EQ(encoded->ids[joined.size()], codec->stop_ids()[0]) << c.source;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TextCodecHf, ::testing::Values("clip_llama", "siglip_qwen2"));

TEST(TextCodecHfErrors, FormatEndOfTurnMustBeAToken) {
  auto tokenizer = tokenizer::HfTokenizer::Load(kFixtures + "/clip_llama");
  ASSERT_TRUE(tokenizer.ok());
  auto chatml = tokenizer::ChatTemplate::Named("chatml", tokenizer::SpecialTokensOf(*tokenizer));
  ASSERT_TRUE(chatml.ok()) << chatml.status();
  auto status = TextCodec::Hf(*tokenizer, *chatml, 3).status();
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("no \"<|im_end|>\" token, which ends a turn in chatml's chat template"));
}

// Every word of the shapes conversations is in the vocabulary of the shapes captions' dataset.
TEST(TextCodecShapes, CaptionVocabularyCoversTheConversations) {
  const ShapesDataset captions(7, 32, Split::kTrain, 432);
  const ShapesDataset conversations(7, 32, Split::kEval, 50, ShapesText::kConversations);
  const TextCodec codec = TextCodec::Words(Tokenizer::Build(captions.VocabularyTexts()));
  for (int64_t i = 0; i < conversations.size(); ++i) {
    auto encoded = codec.Encode(conversations.Messages(i), conversations.Describe(i));
    ASSERT_TRUE(encoded.ok());
    for (int64_t id : encoded->ids) ASSERT_NE(id, Tokenizer::kUnk) << conversations.Describe(i);
  }
}

// A job of 3e8 shapes samples once held every caption to build its word tokenizer (22 GB, and
// 1.3e11 hashes): the vocabulary comes from the first 65,536 samples, the tokenizer of any larger
// set is that one's, and a smaller set still uses all of its own.
TEST(TextCodecShapes, AHugeDatasetBuildsItsVocabularyFromItsFirstSamples) {
  const ShapesDataset huge(7, 32, Split::kTrain, 300'000'000);
  const std::vector<std::string> texts = huge.VocabularyTexts();
  EXPECT_EQ(texts.size(),
            static_cast<size_t>(ShapesDataset::kVocabularySamples) + 5);  // + the questions
  const ShapesDataset first(7, 32, Split::kTrain, ShapesDataset::kVocabularySamples);
  EXPECT_EQ(Tokenizer::Build(texts).words(), Tokenizer::Build(first.VocabularyTexts()).words());
  const ShapesDataset small(7, 32, Split::kTrain, 10);
  EXPECT_EQ(small.VocabularyTexts().size(), 10u + 5);
}

TEST(MakeTokenBatch, PadsToTheBudgetAndCountsTargets) {
  const ShapesDataset dataset(7, 32, Split::kTrain, 4);
  const TextCodec codec = TextCodec::Words(Tokenizer::Build(dataset.VocabularyTexts()));
  auto batch = MakeTokenBatch(dataset, {1, 0}, codec, 12);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->length, 12);
  int64_t targets = 0;
  for (int row = 0; row < 2; ++row) {
    const std::vector<int32_t> caption = codec.words()->Encode(dataset.Text(1 - row));
    const int64_t* tokens = batch->tokens.data() + row * 12;
    const int64_t* labels = batch->labels.data() + row * 12;
    EXPECT_EQ(tokens[0], Tokenizer::kBos);
    EXPECT_EQ(labels[0], kI);
    for (size_t t = 0; t < caption.size(); ++t) EXPECT_EQ(labels[t + 1], caption[t]);
    EXPECT_EQ(labels[caption.size() + 1], Tokenizer::kEos);
    for (int64_t t = static_cast<int64_t>(caption.size()) + 2; t < 12; ++t) {
      EXPECT_EQ(tokens[t], Tokenizer::kPad);
      EXPECT_EQ(labels[t], kI);
    }
    targets += static_cast<int64_t>(caption.size()) + 1;
  }
  EXPECT_EQ(batch->targets, targets);

  auto status = MakeTokenBatch(dataset, {0}, codec, 5).status();
  EXPECT_THAT(std::string(status.message()), HasSubstr("shapes train #0 (seed 7): needs "));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("text tokens, more than data.max_text_tokens = 5"));
}

}  // namespace
}  // namespace tandem::data
