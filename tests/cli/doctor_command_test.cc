// `tandem doctor` as a user runs it: the JSON object and its fields, the verdict and exit code for
// a coordinator that does not answer, refuses the token, or answers; --help names every flag.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/service/service_testing.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct DoctorRun {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// `tandem --log-level warning doctor ARGS`, stdout and stderr apart, with TANDEM_CPU_BF16 as
// `cpu_bf16` says ("" unsets it), whatever the suite runs with.
DoctorRun Doctor(const std::string& args, const std::string& cpu_bf16 = "") {
  char pattern[] = "/tmp/tandem-doctor-err-XXXXXX";
  const int fd = mkstemp(pattern);
  close(fd);
  const testing::Outcome doctor = testing::Shell(absl::StrCat(
      cpu_bf16.empty() ? "env -u TANDEM_CPU_BF16 " : "env TANDEM_CPU_BF16=" + cpu_bf16 + " ",
      TANDEM_BINARY, " --log-level warning doctor ", args, " 2>", pattern));
  DoctorRun run;
  run.exit_code = doctor.exit_code;
  run.out = doctor.output;
  std::ifstream err(pattern);
  run.err.assign(std::istreambuf_iterator<char>(err), {});
  std::remove(pattern);
  return run;
}

// The last line of `text` (without its newline).
std::string LastLine(const std::string& text) {
  const std::string trimmed = text.substr(0, text.find_last_not_of('\n') + 1);
  return trimmed.substr(trimmed.find_last_of('\n') + 1);
}

TEST(DoctorCommand, PrintsOneJsonObjectWithTheDocumentedFields) {
  const DoctorRun run = Doctor("--output json --skip-probes");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const nlohmann::json doctor =
      nlohmann::json::parse(run.out);  // throws, failing the test, if not JSON
  EXPECT_THAT(doctor["verdict"].get<std::string>(), StartsWith("ready"));
  EXPECT_THAT(doctor["summary"].get<std::string>(),
              StartsWith(doctor["verdict"].get<std::string>()));
  EXPECT_TRUE(doctor["failures"].empty());
  EXPECT_TRUE(doctor["warnings"].is_array());
  EXPECT_TRUE(doctor["notes"].is_array());
  const nlohmann::json& torch = doctor["libtorch"];
  EXPECT_FALSE(torch["version"].get<std::string>().empty());
  for (const char* key : {"cuda", "tandem_cuda"}) EXPECT_TRUE(torch[key].is_boolean()) << key;
  for (const char* key : {"cuda_version", "blas_info", "mkl"})
    EXPECT_TRUE(torch[key].is_string()) << key;
  EXPECT_GT(torch["threads"].get<int>(), 0);
  const nlohmann::json& blas = doctor["blas"];
  for (const char* key : {"kind", "library", "implementation", "version", "threading"})
    EXPECT_TRUE(blas[key].is_string()) << key;
  const nlohmann::json& cpu = doctor["cpu"];
  for (const char* key : {"model", "arch", "features", "bf16_detail"})
    EXPECT_TRUE(cpu[key].is_string()) << key;
  EXPECT_TRUE(cpu["native_bf16"].is_boolean());
  EXPECT_TRUE(cpu["bf16_override"].is_null());  // TANDEM_CPU_BF16 is not set
  EXPECT_TRUE(cpu["matmul"].is_null());         // --skip-probes
  EXPECT_TRUE(doctor["cuda"]["devices"].is_array());
  EXPECT_TRUE(doctor["cuda"]["none_reason"].is_string());
  if (!torch["cuda"].get<bool>()) {
    EXPECT_TRUE(doctor["cuda"]["devices"].empty());
  }
  const nlohmann::json& nccl = doctor["nccl"];
  EXPECT_TRUE(nccl["built_in"].is_boolean());
  EXPECT_EQ(nccl["version"].is_null(), !nccl["built_in"].get<bool>());
  EXPECT_TRUE(nccl["all_reduce"].is_null());
  EXPECT_EQ(nccl["error"], "");
  const nlohmann::json& link = doctor["local_link"];
  EXPECT_TRUE(link["ok"].get<bool>()) << link["error"];
  EXPECT_THAT(link["name"].get<std::string>(), StartsWith("tandem-doctor-"));
  EXPECT_EQ(link["errno"], 0);
  EXPECT_TRUE(doctor["coordinator"].is_null());
}

TEST(DoctorCommand, ReportsTheCpuBf16OverrideAndTheCpuAsItIsTreated) {
  const DoctorRun run = Doctor("--output json --skip-probes", "absent");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const nlohmann::json cpu = nlohmann::json::parse(run.out)["cpu"];
  EXPECT_EQ(cpu["bf16_override"], "absent");
  EXPECT_FALSE(cpu["native_bf16"].get<bool>());
  const DoctorRun text = Doctor("--skip-probes", "emulated");
  ASSERT_EQ(text.exit_code, 0) << text.out << text.err;
  EXPECT_THAT(text.out, HasSubstr("CPU bf16     not native: TANDEM_CPU_BF16=emulated"));
  EXPECT_THAT(text.out, HasSubstr("torch_autocast \"auto\" computes in emulated bf16 there"));
}

TEST(DoctorCommand, FailsNamingACoordinatorThatIsNotListening) {
  const DoctorRun text = Doctor("--skip-probes --coordinator 127.0.0.1:1");
  EXPECT_EQ(text.exit_code, 1) << text.out << text.err;
  EXPECT_THAT(text.out, HasSubstr("127.0.0.1:1 unreachable: connection refused"));
  EXPECT_THAT(LastLine(text.out),
              StartsWith("not ready: coordinator 127.0.0.1:1 unreachable (connection refused)"));

  const DoctorRun json = Doctor("--skip-probes --output json --coordinator 127.0.0.1:1");
  EXPECT_EQ(json.exit_code, 1) << json.out << json.err;
  const nlohmann::json doctor = nlohmann::json::parse(json.out);
  EXPECT_EQ(doctor["verdict"], "not ready");
  EXPECT_EQ(doctor["coordinator"]["address"], "127.0.0.1:1");
  EXPECT_EQ(doctor["coordinator"]["reachable"], false);
  EXPECT_EQ(doctor["coordinator"]["reason"], "connection refused");
  EXPECT_TRUE(doctor["coordinator"]["actors"].is_null());
  ASSERT_EQ(doctor["failures"].size(), 1u);
  EXPECT_THAT(doctor["failures"][0].get<std::string>(),
              HasSubstr("coordinator 127.0.0.1:1 unreachable"));
}

TEST(DoctorCommand, ChecksTheCoordinatorsTokenAfterItsHealth) {
  testing::ProcessCluster cluster;
  const std::string token = cluster.WriteFile("token", "doctor-test-token\n");
  cluster.StartCoordinator("127.0.0.1:0", {"--token-file", token});
  ASSERT_FALSE(cluster.address().empty());

  const DoctorRun without =
      Doctor(absl::StrCat("--skip-probes --output json --coordinator ", cluster.address()));
  EXPECT_EQ(without.exit_code, 1) << without.out << without.err;
  const nlohmann::json refused = nlohmann::json::parse(without.out);
  EXPECT_EQ(refused["coordinator"]["reachable"], false);
  EXPECT_EQ(refused["coordinator"]["reason"], "unauthenticated");
  EXPECT_THAT(refused["coordinator"]["detail"].get<std::string>(), HasSubstr("no token"));

  const DoctorRun with = Doctor(absl::StrCat("--skip-probes --output json --coordinator ",
                                             cluster.address(), " --token-file ", token));
  EXPECT_EQ(with.exit_code, 0) << with.out << with.err;
  const nlohmann::json accepted = nlohmann::json::parse(with.out);
  EXPECT_EQ(accepted["coordinator"]["reachable"], true);
  EXPECT_EQ(accepted["coordinator"]["actors"], 0);
  EXPECT_EQ(accepted["coordinator"]["reason"], "");
}

TEST(DoctorCommand, HelpDescribesEveryFlag) {
  const DoctorRun run = Doctor("--help");
  EXPECT_EQ(run.exit_code, 0);
  for (const char* flag : {"--coordinator", "--timeout", "--output", "--skip-probes",
                           "--token-file", "--tls-cert", "--tls-key", "--tls-ca"}) {
    EXPECT_THAT(run.out, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace tandem
