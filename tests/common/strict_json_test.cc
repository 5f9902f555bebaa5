#include "common/strict_json.h"

#include <gtest/gtest.h>

#include <string>

namespace tandem {
namespace {

std::string ErrorOf(std::string_view text) {
  auto parsed = ParseJsonStrict(text);
  EXPECT_FALSE(parsed.ok()) << text;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

TEST(StrictJsonTest, ParsesValidDocuments) {
  auto parsed = ParseJsonStrict(R"({"a": [1, {"b": true}], "c": "x"})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)["a"][1]["b"], true);
  EXPECT_EQ((*parsed)["c"], "x");
}

// Found by fuzz/engine_config_fuzzer.cc: nlohmann throws out_of_range, not parse_error, for these.
TEST(StrictJsonTest, NumbersBeyondADoubleAreAnErrorWithTheirPosition) {
  EXPECT_EQ(ErrorOf("7e77777>77"),
            "line 1, column 1: invalid JSON: number overflow parsing '7e77777'");
  EXPECT_EQ(ErrorOf("{\"lr\": 1,\n \"eps\": -1e400}"),
            "line 2, column 9: invalid JSON: number overflow parsing '-1e400'");
  EXPECT_EQ(
      ErrorOf(std::string("[") + std::string(400, '9') + "]"),
      "line 1, column 2: invalid JSON: number overflow parsing '" + std::string(400, '9') + "'");
}

TEST(StrictJsonTest, DuplicateKeysNameTheirPath) {
  EXPECT_EQ(ErrorOf(R"({"a": 1, "a": 2})"), "a: duplicate key");
  EXPECT_EQ(ErrorOf(R"({"x": {"y": {"z": 1, "z": 1}}})"), "x.y.z: duplicate key");
  EXPECT_EQ(ErrorOf(R"({"list": [{"k": 1}, {"k": 1, "k": 2}]})"), "list[1].k: duplicate key");
  EXPECT_EQ(ErrorOf(R"({"list": [[1, 2], {"k": 1, "k": 2}]})"), "list[1].k: duplicate key");
}

TEST(StrictJsonTest, SyntaxErrorsNameLineAndColumn) {
  const std::string message = ErrorOf("{\n  \"a\": 1,\n  \"b\" 2\n}");
  EXPECT_EQ(message.rfind("line 3, column 7: invalid JSON: ", 0), 0u) << message;
  EXPECT_EQ(ErrorOf("{\"a\": 1,}").rfind("line 1, column 9: invalid JSON: ", 0), 0u);
}

}  // namespace
}  // namespace tandem
