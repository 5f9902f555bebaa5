// Tests for jobspec/proto_json.cc: the walk of a JSON document against a Descriptor.
#include "jobspec/proto_json.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "proto/tandem/v1/job.pb.h"

namespace tandem::jobspec {
namespace {

using nlohmann::json;

std::string CheckError(std::string_view text, const std::string& path = "") {
  absl::Status status =
      CheckJsonAgainstMessage(json::parse(text), *tandem::v1::JobSpec::descriptor(), path);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
  return std::string(status.message());
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

}  // namespace
}  // namespace tandem::jobspec
