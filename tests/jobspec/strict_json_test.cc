// Tests for jobspec/strict_json.cc: syntax positions, duplicate keys with paths (arrays included),
// and the walk against a Descriptor.
#include "jobspec/strict_json.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "proto/tandem/v1/job.pb.h"

namespace tandem::jobspec {
namespace {

using nlohmann::json;

std::string ParseError(std::string_view text) {
  absl::StatusOr<json> parsed = ParseJsonStrict(text);
  EXPECT_FALSE(parsed.ok()) << text;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

std::string CheckError(std::string_view text, const std::string& path = "") {
  absl::Status status =
      CheckJsonAgainstMessage(json::parse(text), *tandem::v1::JobSpec::descriptor(), path);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
  return std::string(status.message());
}

TEST(ParseJsonStrict, SyntaxErrorsGiveLineAndColumn) {
  EXPECT_EQ(ParseError(""),
            "line 1, column 1: invalid JSON: syntax error while parsing value - unexpected end of "
            "input; expected '[', '{', or a literal");
  EXPECT_EQ(ParseError("{\"a\": 1,}"),
            "line 1, column 9: invalid JSON: syntax error while parsing object key - unexpected "
            "'}'; expected "
            "string literal");
  EXPECT_EQ(ParseError("{\n\n  \"a\": 1 // no comments\n}").substr(0, 17), "line 3, column 10");
}

TEST(ParseJsonStrict, DuplicateKeysAreNamedByPath) {
  EXPECT_EQ(ParseError(R"({"a": {"b": 1, "b": 2}})"), "a.b: duplicate key");
  EXPECT_EQ(ParseError(R"({"a": [{"x": 1}, {"y": 1, "y": 2}]})"), "a[1].y: duplicate key");
  EXPECT_EQ(ParseError(R"({"a": [[1, 2], {"z": 1, "z": 1}]})"), "a[1].z: duplicate key");
  // Equal keys in different objects are fine.
  EXPECT_TRUE(ParseJsonStrict(R"({"a": {"k": 1}, "b": {"k": 1}, "c": [{"k": 1}, {"k": 2}]})").ok());
}

TEST(CheckJsonAgainstMessage, IntegersInTheirProto3Forms) {
  const auto* descriptor = tandem::v1::JobSpec::descriptor();
  for (const char* ok :
       {R"({"schedule": {"steps": 5}})", R"({"schedule": {"steps": "5"}})",
        R"({"schedule": {"steps": 5e0}})", R"({"schedule": {"seed": 18446744073709551615}})",
        R"({"schedule": {"seed": "18446744073709551615"}})",
        R"({"vision": {"actors": -2147483648}})"}) {
    EXPECT_TRUE(CheckJsonAgainstMessage(json::parse(ok), *descriptor, "").ok()) << ok;
  }
  EXPECT_EQ(CheckError(R"({"schedule": {"steps": "5x"}})"),
            "schedule.steps: must be an integer, got string \"5x\"");
  EXPECT_EQ(CheckError(R"({"schedule": {"steps": 9223372036854775808}})"),
            "schedule.steps: must be an integer in [-9223372036854775808, 9223372036854775807], "
            "got number "
            "9223372036854775808");
  EXPECT_EQ(CheckError(R"({"schedule": {"seed": "-3"}})"),
            "schedule.seed: must be an integer in [0, 18446744073709551615], got string \"-3\"");
  EXPECT_EQ(CheckError(R"({"schedule": {"steps": 1e30}})"),
            "schedule.steps: must be an integer, got number 1e+30");
}

TEST(CheckJsonAgainstMessage, PathPrefixAndStructContentIsFree) {
  EXPECT_EQ(CheckError(R"({"hiden": 1})", "vision.model"), "vision.model.hiden: unknown field");
  // Inside a Struct anything goes: the engine parser judges it.
  EXPECT_TRUE(CheckJsonAgainstMessage(
                  json::parse(R"({"vision": {"engine": {"anything": [1, {"x": null}]}}})"),
                  *tandem::v1::JobSpec::descriptor(), "")
                  .ok());
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
}  // namespace tandem::jobspec
