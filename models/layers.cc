#include "models/layers.h"

#include <torch/torch.h>

#include <array>

namespace tandem::models {

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters(/*recurse=*/true)) count += p.numel();
  return count;
}

at::Tensor RmsNormForward(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

RmsNormImpl::RmsNormImpl(int64_t dim, double eps) : eps_(eps) {
  TORCH_CHECK(dim > 0, "RmsNorm: dim must be positive, got ", dim);
  weight = register_parameter("weight", torch::ones({dim}));
}

namespace {
at::Tensor As(const at::Tensor& parameter, const at::Tensor& x) {
  return parameter.defined() ? parameter.to(x.scalar_type()) : parameter;
}
}  // namespace

at::Tensor LinearAs(const torch::nn::Linear& linear, const at::Tensor& x) {
  return at::linear(x, As(linear->weight, x), As(linear->bias, x));
}

at::Tensor Conv2dAs(const torch::nn::Conv2d& conv, const at::Tensor& x) {
  const auto& o = conv->options;
  const std::array<int64_t, 2> no_padding{0, 0};
  return at::conv2d(x, As(conv->weight, x), As(conv->bias, x), *o.stride(), no_padding,
                    *o.dilation(), o.groups());
}

at::Tensor LayerNormFp32(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  return at::layer_norm(x.to(at::kFloat), {x.size(-1)}, weight.to(at::kFloat), bias.to(at::kFloat), eps)
      .to(x.scalar_type());
}

RotaryTables MakeRotaryTables(int64_t head_dim, int64_t max_seq_len, double theta) {
  TORCH_CHECK(head_dim > 0 && head_dim % 2 == 0, "rotary: head_dim must be even and positive, got ", head_dim);
  TORCH_CHECK(max_seq_len >= 0, "rotary: max_seq_len must be >= 0, got ", max_seq_len);
  TORCH_CHECK(theta > 0, "rotary: rope_theta must be positive, got ", theta);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const at::Tensor inv_freq =
      torch::pow(theta, -torch::arange(0, head_dim, 2, f64) / static_cast<double>(head_dim));  // [d/2]
  const at::Tensor positions = torch::arange(max_seq_len, f64);
  const at::Tensor freqs = torch::outer(positions, inv_freq);  // [S, d/2]
  const at::Tensor angles = torch::cat({freqs, freqs}, -1);    // [S, d]
  return {angles.cos().to(torch::kFloat), angles.sin().to(torch::kFloat)};
}

at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor rotated = at::cat({-xf.narrow(-1, half, half), xf.narrow(-1, 0, half)}, -1);
  return (xf * cos.to(at::kFloat) + rotated * sin.to(at::kFloat)).to(x.scalar_type());
}

void InitNormal(at::Tensor& tensor, double std) {
  torch::NoGradGuard no_grad;
  tensor.normal_(0.0, std);
}

void InitLinear(torch::nn::Linear& linear, double std) {
  torch::NoGradGuard no_grad;
  linear->weight.normal_(0.0, std);
  if (linear->bias.defined()) linear->bias.zero_();
}

}  // namespace tandem::models
