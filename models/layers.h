// Building blocks shared by the vision encoder (vision_encoder.h) and the LLM (llm.h):
// normalisation in fp32, rotary position embedding, initialisation and parameter counting. See
// models/README.md for the architectures, the parameter names and the conventions.
//
// NOTE [Model dtypes]
// Both models keep their residual stream in their compute dtype: the dtype of their parameters
// (fp32, or bf16 when an engine runs with bf16 parameters) unless set_compute_dtype names another,
// as an engine whose torch_autocast.dtype "auto" found no native bf16 does (fp32 compute from bf16
// storage, NOTE [Compute dtype] in engine/compute.h). Every parameter is cast to the dtype of the
// activations it meets where it is used (LinearAs, Conv2dAs; a no-op when they agree), so autograd
// hands its gradient back in the parameter's own dtype. Under autocast the Linear/Conv2d/matmul ops
// return the autocast dtype; adding such a branch to the residual promotes back to the compute
// dtype. Norms normalise in fp32 and cast back to the input dtype; rotary embedding is applied in
// fp32 and cast back to the dtype of q/k. Fixed tables (rotary cos/sin, 2D sine-cosine positions)
// are fp32 buffers, not parameters: engines ignore buffers, so they are neither converted,
// partitioned nor checkpointed.
//
// Thread-compatible: a module runs on one thread at a time.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "models/model_config.h"

namespace tandem::models {

// Number of elements of all parameters of `module` and its children (trainable or not; buffers are
// not counted). A tied weight counts once. Call before an engine takes the model over: at ZeRO-3
// the engine replaces the storage of partitioned parameters.
int64_t CountParameters(const torch::nn::Module& module);

// y = weight * (x / sqrt(mean(x^2 over the last dim) + eps)): the normalisation is computed in fp32
// and cast back to x's dtype before the weight multiply, as HF Llama does, so y has the promoted
// dtype of x and weight (the models keep both in the parameter dtype).
//
// NOTE [Fused kernels on a GPU]: on a CUDA tensor with a weight of its dtype, LibTorch 2.8+'s fused
// RMSNorm (at::_fused_rms_norm) computes the same formula in one kernel, weight multiply included
// in fp32, and rounds once: within one bf16 rounding of the written-out form, which launches eight
// kernels forward and twelve backward (tests/models/models_cuda_test.cc holds them to it). On the
// CPU, and with LibTorch 1.13, the written-out form: CPU results are the same on every version.
at::Tensor RmsNormForward(const at::Tensor& x, const at::Tensor& weight, double eps);

// RMSNorm with a learned scale (no bias), parameter "weight" [dim] initialised to ones.
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x) { return RmsNormForward(x, weight, eps_); }

  at::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RmsNorm);

// The activations of transformers' ACT2FN that the models use: "gelu" (erf), "gelu_tanh" (also
// "gelu_pytorch_tanh" and "gelu_new"), "quick_gelu" (x * sigmoid(1.702 x)), "silu", "relu" and
// "linear" (the identity). Activate throws c10::Error for another name.
bool IsKnownActivation(std::string_view name);
at::Tensor Activate(std::string_view name, const at::Tensor& x);

// linear(x) with the weight and bias cast to x's dtype (NOTE [Model dtypes]).
at::Tensor LinearAs(const torch::nn::Linear& linear, const at::Tensor& x);
// The same for a 2D convolution without padding (a patch embedding).
at::Tensor Conv2dAs(const torch::nn::Conv2d& conv, const at::Tensor& x);

// LayerNorm over the last dim computed in fp32 (input, weight and bias cast up), returned in x's
// dtype.
at::Tensor LayerNormFp32(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                         double eps);

// Rotary position embedding tables, rotate-half convention (HF Llama): for position m and channel i
// of a head of width d, angle = m * f_(i mod d/2) with f_k = theta^(-2k / d), as scaled by
// `scaling`; cos/sin are [max_seq_len, d], fp32 (computed in fp64).
struct RotaryTables {
  at::Tensor cos;
  at::Tensor sin;
};
// REQUIRES: head_dim even and > 0, max_seq_len >= 0, theta > 0; for "linear" and "llama3" factor >
// 0, for "llama3" original_max_positions > 0 and high_freq_factor > low_freq_factor.
RotaryTables MakeRotaryTables(int64_t head_dim, int64_t max_seq_len, double theta,
                              const RopeScaling& scaling = {});

// x * cos + rotate_half(x) * sin, where rotate_half(x) = [-x2, x1] for the halves x1, x2 of the
// last dim. x [..., seq, head_dim]; cos/sin [seq, head_dim] (rows of the tables for the positions
// of x). Computed in fp32; returns x's dtype. One autograd function (NOTE [Rotary backward] in
// layers.cc).
at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// Initialisation (models/README.md): weight ~ normal(0, std), bias (if any) zero. Draws from the
// default generator, so it is deterministic given torch::manual_seed and the call order.
void InitLinear(torch::nn::Linear& linear, double std);
void InitNormal(at::Tensor& tensor, double std);

inline constexpr double kInitStd = 0.02;

}  // namespace tandem::models
