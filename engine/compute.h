// What an engine's forward computes in, decided once per engine from its config and its device.
//
// NOTE [Compute dtype]
// Low-precision storage (bf16 params, grads, master weights, moments) is what saves memory; it
// stays whatever the device. Low-precision compute pays off only where the device multiplies bf16
// in hardware (platform/bf16_support.h); elsewhere LibTorch emulates it, 20-30x slower than fp32.
// So:
//
//   torch_autocast            device       forward
//   enabled, dtype "auto"     native bf16  autocast to bf16 (residual stream in the param dtype)
//   enabled, dtype "auto"     otherwise    no autocast; activations in fp32, every parameter cast
//                                          to fp32 where it is used (bf16 storage, fp32 compute)
//   enabled, "bfloat16"       any          autocast to bf16; one warning where it is emulated
//   disabled                  any          the parameter dtype, as PyTorch; one warning where
//                                          that is an emulated bf16
//
// "fp32 compute from bf16 storage" needs the model's help: LibTorch 1.13's CPU autocast takes bf16
// only, so the engine cannot cast for it. The model runs its residual stream in activation_dtype
// and casts each parameter to the activations' dtype at its use (models/layers.h, NOTE [Model
// dtypes]); autograd turns the fp32 gradient back into the parameter's bf16 at that cast.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

#include "engine/config_names.h"
#include "platform/bf16_support.h"

namespace tandem::engine {

struct ComputePlan {
  bool autocast = false;  // run forward under autocast to autocast_dtype
  at::ScalarType autocast_dtype = at::kBFloat16;
  at::ScalarType activation_dtype = at::kFloat;  // the model's residual stream
  // The dtype the model's output comes out in: the autocast dtype for a projection under autocast,
  // else the activation dtype. What a vision group's embeddings cross to the LLM group in.
  at::ScalarType output_dtype = at::kFloat;
  bool emulated_bf16 = false;  // bf16 matmuls in this forward run emulated on this device
  std::string reason;          // one line: what was chosen and why
};

ComputePlan PlanCompute(const Config& config, const platform::Bf16Support& support);

// PlanCompute on `device`'s own bf16 support.
ComputePlan PlanCompute(const Config& config, const c10::Device& device);

// The warning for a plan that computes in emulated bf16, with the measured cost on a CPU ("bf16
// matmuls run 23x slower than fp32 here (measured 4.0 against 92 GFLOP/s)"), or "" when the plan
// does not. Measures once per process.
std::string EmulatedBf16Warning(const ComputePlan& plan, const Config& config,
                                const platform::Bf16Support& support, const c10::Device& device);

}  // namespace tandem::engine
