#include "engine/compute.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::engine {
namespace {

at::ScalarType ToScalarType(DType dtype) {
  return dtype == DType::kBFloat16 ? at::kBFloat16 : at::kFloat;
}

}  // namespace

ComputePlan PlanCompute(const Config& config, const platform::Bf16Support& support) {
  ComputePlan plan;
  const at::ScalarType param = ToScalarType(config.param_dtype());
  plan.activation_dtype = param;
  if (!config.autocast_enabled) {
    plan.emulated_bf16 = param == at::kBFloat16 && !support.native;
    plan.reason =
        absl::StrCat("no autocast: computes in the parameter dtype (", c10::toString(param), ")");
  } else if (config.autocast_dtype == AutocastDType::kAuto && !support.auto_is_bf16) {
    plan.activation_dtype = at::kFloat;
    plan.reason = absl::StrCat("torch_autocast.dtype \"auto\": fp32 compute (", support.detail, ")",
                               param == at::kBFloat16 ? " from bf16 storage" : "");
  } else {
    plan.autocast = true;
    plan.autocast_dtype = at::kBFloat16;
    plan.emulated_bf16 = !support.native;
    plan.reason = absl::StrCat(
        "autocast to bf16 (",
        config.autocast_dtype == AutocastDType::kAuto ? "torch_autocast.dtype \"auto\", " : "",
        support.detail, ")");
  }
  plan.output_dtype = plan.autocast ? plan.autocast_dtype : plan.activation_dtype;
  return plan;
}

ComputePlan PlanCompute(const Config& config, const c10::Device& device) {
  return PlanCompute(config, platform::DetectBf16Support(device.str()));
}

std::string EmulatedBf16Warning(const ComputePlan& plan, const Config& config,
                                const platform::Bf16Support& support, const c10::Device& device) {
  if (!plan.emulated_bf16) return "";
  const std::string what =
      config.autocast_enabled
          ? std::string(config.autocast_dtype == AutocastDType::kAuto
                            ? "torch_autocast.dtype \"auto\" picked bf16"
                            : "torch_autocast.dtype is bf16")
          : std::string("bf16 parameters without torch_autocast compute in bf16");
  const bool forced = config.autocast_enabled && config.autocast_dtype == AutocastDType::kAuto;
  const char* kAdvice =
      forced ? "Unset TANDEM_CPU_BF16 to compute in fp32 from the bf16 storage"
             : "Set torch_autocast {\"enabled\": true, \"dtype\": \"auto\"} to compute in fp32 "
               "from the bf16 storage";
  if (!device.is_cpu()) {
    return absl::StrFormat("%s, but %s has no native bf16 (%s): bf16 runs emulated. %s", what,
                           device.str(), support.detail, kAdvice);
  }
  static std::once_flag once;
  static platform::MatmulSpeed speed;
  std::call_once(once, [] { speed = platform::MeasureCpuMatmul(); });
  return absl::StrFormat(
      "%s, but this CPU has no native bf16 (%s): bf16 matmuls run %.0fx slower than fp32 here "
      "(measured %.1f against %.1f GFLOP/s). %s",
      what, support.detail, speed.slowdown(), speed.bf16_gflops, speed.fp32_gflops, kAdvice);
}

}  // namespace tandem::engine
