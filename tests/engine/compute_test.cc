// What an engine computes in (engine/compute.h, NOTE [Compute dtype]): the plan for every
// combination of torch_autocast and native bf16, the warning that names the measured cost of an
// emulated bf16, and an engine on a CPU treated as one without native bf16
// (TANDEM_CPU_BF16=absent).
#include "engine/compute.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "engine/communicator.h"
#include "engine/engine.h"
#include "engine_config/config.h"
#include "platform/bf16_support.h"
#include "tests/testing/models.h"

namespace tandem::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr char kBf16Full[] =
    R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true})";

Config Parse(const std::string& json) {
  auto config = ParseConfig(json);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

Config WithAutocast(const std::string& dtype, const std::string& precision = kBf16Full) {
  return Parse(R"({"torch_autocast": {"enabled": true, "dtype": ")" + dtype + "\"}, " + precision +
               "}");
}

const platform::Bf16Support kNative{true, true, "avx512_bf16"};
const platform::Bf16Support kNone{false, false, "no avx512_bf16 or amx_bf16 (AVX2 only)"};
const platform::Bf16Support kForced{false, true, "TANDEM_CPU_BF16=emulated"};

TEST(PlanCompute, AutoIsBf16AutocastWhereBf16IsNative) {
  const ComputePlan plan = PlanCompute(WithAutocast("auto"), kNative);
  EXPECT_TRUE(plan.autocast);
  EXPECT_EQ(plan.autocast_dtype, at::kBFloat16);
  EXPECT_EQ(plan.activation_dtype, at::kBFloat16);  // the parameter dtype, as without "auto"
  EXPECT_EQ(plan.output_dtype, at::kBFloat16);
  EXPECT_FALSE(plan.emulated_bf16);
}

TEST(PlanCompute, AutoIsFp32ComputeFromBf16StorageElsewhere) {
  const ComputePlan plan = PlanCompute(WithAutocast("auto"), kNone);
  EXPECT_FALSE(plan.autocast);
  EXPECT_EQ(plan.activation_dtype, at::kFloat);
  EXPECT_EQ(plan.output_dtype, at::kFloat);
  EXPECT_FALSE(plan.emulated_bf16);
  EXPECT_THAT(plan.reason, HasSubstr("fp32 compute (no avx512_bf16 or amx_bf16 (AVX2 only)) from "
                                     "bf16 storage"));
  // fp32 parameters: fp32 compute, nothing to cast.
  const ComputePlan fp32 = PlanCompute(WithAutocast("auto", R"("steps_per_print": 10)"), kNone);
  EXPECT_FALSE(fp32.autocast);
  EXPECT_EQ(fp32.activation_dtype, at::kFloat);
}

TEST(PlanCompute, AutoFollowsAForcedBf16) {
  const ComputePlan plan = PlanCompute(WithAutocast("auto"), kForced);
  EXPECT_TRUE(plan.autocast);
  EXPECT_TRUE(plan.emulated_bf16);
}

TEST(PlanCompute, ExplicitBf16StaysBf16AndIsMarkedEmulatedWithoutNativeBf16) {
  EXPECT_FALSE(PlanCompute(WithAutocast("bfloat16"), kNative).emulated_bf16);
  const ComputePlan plan = PlanCompute(WithAutocast("bfloat16"), kNone);
  EXPECT_TRUE(plan.autocast);
  EXPECT_EQ(plan.output_dtype, at::kBFloat16);
  EXPECT_TRUE(plan.emulated_bf16);
}

TEST(PlanCompute, NoAutocastComputesInTheParameterDtype) {
  const ComputePlan bf16 = PlanCompute(Parse(std::string("{") + kBf16Full + "}"), kNone);
  EXPECT_FALSE(bf16.autocast);
  EXPECT_EQ(bf16.activation_dtype, at::kBFloat16);
  EXPECT_TRUE(bf16.emulated_bf16);
  const ComputePlan fp32 = PlanCompute(Parse("{}"), kNone);
  EXPECT_EQ(fp32.activation_dtype, at::kFloat);
  EXPECT_FALSE(fp32.emulated_bf16);
}

TEST(EmulatedBf16Warning, NamesTheMeasuredCostAndTheWayOut) {
  const Config explicit_bf16 = WithAutocast("bfloat16");
  const std::string warning = EmulatedBf16Warning(PlanCompute(explicit_bf16, kNone), explicit_bf16,
                                                  kNone, c10::Device("cpu"));
  EXPECT_THAT(warning,
              MatchesRegex("torch_autocast.dtype is bf16, but this CPU has no native bf16 "
                           "\\(no avx512_bf16 or amx_bf16 \\(AVX2 only\\)\\): bf16 matmuls "
                           "run [0-9]+x slower than fp32 here \\(measured [0-9.]+ against "
                           "[0-9.]+ GFLOP/s\\)\\. Set torch_autocast .*\"auto\".*"));
  const Config no_autocast = Parse(std::string("{") + kBf16Full + "}");
  EXPECT_THAT(
      EmulatedBf16Warning(PlanCompute(no_autocast, kNone), no_autocast, kNone, c10::Device("cpu")),
      HasSubstr("bf16 parameters without torch_autocast compute in bf16, but this CPU"));
  EXPECT_EQ(EmulatedBf16Warning(PlanCompute(explicit_bf16, kNative), explicit_bf16, kNative,
                                c10::Device("cpu")),
            "");
}

// Under TANDEM_CPU_BF16=absent an engine with "auto" computes in fp32 and keeps bf16 storage, and
// LibTorch's bf16 matmuls take the emulated path (oneDNN off).
TEST(EngineCompute, AutoOnACpuWithoutNativeBf16KeepsBf16StorageAndComputesInFp32) {
  // The suite's own override (TANDEM_CPU_BF16) is put back at the end, whatever the test finds.
  struct Restore {
    platform::CpuBf16Override previous = platform::GetCpuBf16Override();
    ~Restore() { platform::SetCpuBf16Override(previous); }
  } restore;
  platform::SetCpuBf16Override(platform::CpuBf16Override::kNone);
  EXPECT_TRUE(at::globalContext().userEnabledMkldnn());
  platform::SetCpuBf16Override(platform::CpuBf16Override::kAbsent);
  EXPECT_FALSE(at::globalContext().userEnabledMkldnn());
  EXPECT_FALSE(platform::DetectBf16Support("cpu").native);
  auto model = std::make_shared<testing::TinyNet>();
  auto engine =
      Engine::Create(model, CreateSingleRankCommunicator("compute"), WithAutocast("auto"));
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_FALSE((*engine)->compute().autocast);
  EXPECT_EQ((*engine)->compute().activation_dtype, at::kFloat);
  for (const auto& p : model->parameters()) EXPECT_EQ(p.scalar_type(), at::kBFloat16);
  EXPECT_DOUBLE_EQ((*engine)->Memory().bytes_per_parameter(), 8.0);
  platform::SetCpuBf16Override(platform::CpuBf16Override::kNone);
  EXPECT_TRUE(at::globalContext().userEnabledMkldnn());  // the override's oneDNN switch is undone
}

}  // namespace
}  // namespace tandem::engine
