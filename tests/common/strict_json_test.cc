// Tests for common/strict_json.cc: syntax positions, duplicate keys with paths (arrays included),
// integers in their JSON forms, and how values are described in errors.
#include "common/strict_json.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace tandem {
namespace {

using nlohmann::json;

std::string ErrorOf(std::string_view text) {
  auto parsed = ParseJsonStrict(text);
  EXPECT_FALSE(parsed.ok()) << text;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

TEST(StrictJsonTest, NestingIsCappedWithThePositionOfTheFirstTooDeepBracket) {
  const std::string deepest_allowed =
      std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(ParseJsonStrict(deepest_allowed).ok());
  EXPECT_EQ(ErrorOf(std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']')),
            "line 1, column 129: invalid JSON: nested more than 128 levels deep");
  // Brackets inside strings, escaped quotes included, are not nesting.
  const std::string in_strings = "{\"a\": \"" + std::string(300, '[') + "\\\"{{{\"}";
  EXPECT_TRUE(ParseJsonStrict(in_strings).ok()) << in_strings;
}

// 2 MB of '[' once cost a copy of the whole path at every level (quadratic: terabytes); refused
// now after one linear scan.
TEST(StrictJsonTest, MegabytesOfOpenBracketsAreRefusedCheaply) {
  EXPECT_EQ(ErrorOf(std::string(2 << 20, '[')),
            "line 1, column 129: invalid JSON: nested more than 128 levels deep");
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
  EXPECT_EQ(ErrorOf(R"({"a": {"b": 1, "b": 2}})"), "a.b: duplicate key");
  EXPECT_EQ(ErrorOf(R"({"a": [{"x": 1}, {"y": 1, "y": 2}]})"), "a[1].y: duplicate key");
  EXPECT_EQ(ErrorOf(R"({"a": [[1, 2], {"z": 1, "z": 1}]})"), "a[1].z: duplicate key");
  EXPECT_EQ(ErrorOf(R"([{"q": 1}, {"q": 1, "q": 2}])"), "[1].q: duplicate key");
  // Equal keys in different objects are fine.
  EXPECT_TRUE(ParseJsonStrict(R"({"a": {"k": 1}, "b": {"k": 1}, "c": [{"k": 1}, {"k": 2}]})").ok());
}

TEST(StrictJsonTest, SyntaxErrorsNameLineAndColumn) {
  const std::string message = ErrorOf("{\n  \"a\": 1,\n  \"b\" 2\n}");
  EXPECT_EQ(message.rfind("line 3, column 7: invalid JSON: ", 0), 0u) << message;
  EXPECT_EQ(ErrorOf("{\"a\": 1,}").rfind("line 1, column 9: invalid JSON: ", 0), 0u);
  EXPECT_EQ(ErrorOf(""),
            "line 1, column 1: invalid JSON: syntax error while parsing value - unexpected end of "
            "input; expected '[', '{', or a literal");
  EXPECT_EQ(ErrorOf("{\"a\": 1,}"),
            "line 1, column 9: invalid JSON: syntax error while parsing object key - unexpected "
            "'}'; expected "
            "string literal");
  EXPECT_EQ(ErrorOf("{\n\n  \"a\": 1 // no comments\n}").substr(0, 17), "line 3, column 10");
}

TEST(ReadJsonInteger, EveryFormOfAnInteger) {
  constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();
  constexpr int64_t kMinI64 = std::numeric_limits<int64_t>::min();
  JsonInteger n = ReadJsonInteger(json(5));
  EXPECT_EQ(n.kind, JsonInteger::Kind::kInteger);
  EXPECT_EQ(n.ToInt64(), 5);
  EXPECT_EQ(ReadJsonInteger(json(-7)).ToInt64(), -7);
  EXPECT_EQ(ReadJsonInteger(json(5e8)).ToInt64(), 500000000);
  EXPECT_EQ(ReadJsonInteger(json(-9223372036854775808.0)).ToInt64(), kMinI64);
  n = ReadJsonInteger(json(kMaxU64));
  EXPECT_EQ(n.as_unsigned, kMaxU64);
  EXPECT_EQ(n.ToInt64(), std::nullopt);
  // 2^63 is an integer beyond int64_t; 2^64 is beyond 64 bits.
  n = ReadJsonInteger(json(9223372036854775808.0));
  EXPECT_EQ(n.kind, JsonInteger::Kind::kInteger);
  EXPECT_EQ(n.ToInt64(), std::nullopt);
  EXPECT_EQ(ReadJsonInteger(json(18446744073709551616.0)).kind, JsonInteger::Kind::kOutOfRange);
  EXPECT_EQ(ReadJsonInteger(json(-1e30)).kind, JsonInteger::Kind::kOutOfRange);
  EXPECT_EQ(ReadJsonInteger(json(1.5)).kind, JsonInteger::Kind::kNotAnInteger);
  EXPECT_EQ(ReadJsonInteger(json(true)).kind, JsonInteger::Kind::kNotAnInteger);
}

TEST(ReadJsonInteger, DecimalStringsOnlyWhenAccepted) {
  EXPECT_EQ(ReadJsonInteger(json("12")).kind, JsonInteger::Kind::kNotAnInteger);
  EXPECT_EQ(ReadJsonInteger(json("12"), JsonIntegerStrings::kAccept).ToInt64(), 12);
  EXPECT_EQ(ReadJsonInteger(json("-3"), JsonIntegerStrings::kAccept).ToInt64(), -3);
  const JsonInteger zero = ReadJsonInteger(json("-0"), JsonIntegerStrings::kAccept);
  EXPECT_FALSE(zero.negative);
  EXPECT_EQ(zero.ToInt64(), 0);
  EXPECT_EQ(ReadJsonInteger(json("18446744073709551615"), JsonIntegerStrings::kAccept).as_unsigned,
            std::numeric_limits<uint64_t>::max());
  for (const char* bad : {"", "+1", " 1", "1.5", "5x", "18446744073709551616"}) {
    EXPECT_EQ(ReadJsonInteger(json(bad), JsonIntegerStrings::kAccept).kind,
              JsonInteger::Kind::kNotAnInteger)
        << bad;
  }
}

TEST(ReadJsonInteger, InRangeChecksBothEnds) {
  EXPECT_TRUE(ReadJsonInteger(json(-2147483648)).InRange(-2147483648, 2147483647));
  EXPECT_FALSE(ReadJsonInteger(json(-2147483649)).InRange(-2147483648, 2147483647));
  EXPECT_FALSE(ReadJsonInteger(json(2147483648)).InRange(-2147483648, 2147483647));
  EXPECT_FALSE(ReadJsonInteger(json(0)).InRange(1, 10));
  EXPECT_FALSE(ReadJsonInteger(json(1.5)).InRange(0, 10));
}

TEST(DescribeJsonValue, EachKind) {
  EXPECT_EQ(DescribeJsonValue(json("x")), "string \"x\"");
  EXPECT_EQ(DescribeJsonValue(json(true)), "boolean true");
  EXPECT_EQ(DescribeJsonValue(json(2.5)), "number 2.5");
  EXPECT_EQ(DescribeJsonValue(json(nullptr)), "null");
  EXPECT_EQ(DescribeJsonValue(json::array()), "array");
  EXPECT_EQ(DescribeJsonValue(json::object()), "object");
  EXPECT_EQ(DescribeJsonValue(json(std::string(100, 'a'))),
            "string \"" + std::string(59, 'a') + "...\"");
}

}  // namespace
}  // namespace tandem
