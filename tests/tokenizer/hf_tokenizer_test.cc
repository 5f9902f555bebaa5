#include "tokenizer/hf_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"
#include "tests/testing/json_file.h"

namespace tandem::tokenizer {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = TANDEM_HF_FIXTURES;

nlohmann::json Reference() {
  return testing::ReadJsonFile(kFixtures + "/reference/tokenizers.json");
}

// Llama 3 style (clip_llama), Qwen2 style with NFC (siglip_qwen2), Llama 2 style with byte
// fallback (llama2_tokenizer): every encoding and decoding of the corpus equals the library's.
class TokenizerReference : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerReference, EncodingsAndDecodingsEqualTheTokenizersLibrary) {
  const nlohmann::json reference = Reference();
  const auto& expected = reference["tokenizers"][GetParam()];
  auto tokenizer = HfTokenizer::Load(kFixtures + "/" + GetParam());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const auto& corpus = reference["corpus"];
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i].get<std::string>();
    auto ids = tokenizer->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, expected["encodings"][i].get<std::vector<int64_t>>())
        << "text " << i << ": \"" << text << "\"";
    const auto reference_ids = expected["encodings"][i].get<std::vector<int64_t>>();
    EXPECT_EQ(tokenizer->Decode(reference_ids), expected["decodings"][i].get<std::string>())
        << "text " << i;
    EXPECT_EQ(tokenizer->Decode(reference_ids, /*skip_special_tokens=*/true),
              expected["decodings_skip_special"][i].get<std::string>())
        << "text " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerReference,
                         ::testing::Values("clip_llama", "siglip_qwen2", "llama2_tokenizer"));

TEST(HfTokenizer, SpecialTokensComeFromTheConfig) {
  auto llama3 = HfTokenizer::Load(kFixtures + "/clip_llama");
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  EXPECT_EQ(llama3->bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(llama3->bos_id(), 403);
  EXPECT_EQ(llama3->eos_id(), 407);
  EXPECT_EQ(llama3->pad_id(), 409);
  EXPECT_EQ(llama3->TokenToId("<image>"), 408);
  EXPECT_TRUE(llama3->IsSpecial(408));
  EXPECT_EQ(llama3->vocab_size(), 410);
  EXPECT_NE(llama3->chat_template().find("<|start_header_id|>"), std::string::npos);
  auto no_specials = llama3->Encode("hi", /*add_special_tokens=*/false);
  ASSERT_TRUE(no_specials.ok());
  auto with_specials = llama3->Encode("hi");
  ASSERT_TRUE(with_specials.ok());
  EXPECT_EQ(with_specials->size(), no_specials->size() + 1);
  EXPECT_EQ(with_specials->front(), 403);
}

TEST(HfTokenizer, BadInputIsNamed) {
  auto tokenizer = HfTokenizer::Load(kFixtures + "/clip_llama");
  ASSERT_TRUE(tokenizer.ok());
  EXPECT_EQ(tokenizer->Encode("bad \xC3\x28 byte").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HfTokenizer::Load(kFixtures + "/absent").status().code(), absl::StatusCode::kNotFound);

  const fs::path dir = fs::path(::testing::TempDir()) / ("tokenizer_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "WordPiece", "vocab": {}}})";
  auto status = HfTokenizer::Load(dir.string()).status();
  EXPECT_NE(status.message().find(
                "tokenizer.json: model.type \"WordPiece\" is not supported (BPE, WordLevel)"),
            std::string::npos)
      << status;
  std::ofstream(dir / "tokenizer.json")
      << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits"}]}})";
  status = HfTokenizer::Load(dir.string()).status();
  EXPECT_NE(
      status.message().find("pre_tokenizer.pretokenizers[0]: type \"Digits\" is not supported"),
      std::string::npos)
      << status;
  std::ofstream(dir / "tokenizer.json")
      << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
      "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[CLS]"}}],
                         "special_tokens": {}}})";
  status = HfTokenizer::Load(dir.string()).status();
  EXPECT_NE(status.message().find("names special token \"[CLS]\""), std::string::npos) << status;
  std::ofstream(dir / "tokenizer.json")
      << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [],
      "byte_fallback": null}})";
  EXPECT_EQ(HfTokenizer::Load(dir.string()).status().code(), absl::StatusCode::kInvalidArgument);
  std::ofstream(dir / "tokenizer.json")
      << R"({"model": {"type": "BPE", "vocab": {"a": 9223372036854775807}, "merges": []}})";
  EXPECT_NE(HfTokenizer::Load(dir.string())
                .status()
                .message()
                .find("model.vocab.a must be an id in [0, "),
            std::string::npos);
  std::ofstream(dir / "tokenizer.json") << "[1, 2]";
  EXPECT_NE(HfTokenizer::Load(dir.string()).status().message().find("must hold a JSON object"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::tokenizer
