#include "models/layers.h"

#include <torch/torch.h>
#if __has_include(<ATen/ops/_fused_rms_norm.h>)
#include <ATen/ops/_fused_rms_norm.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#endif

#include <array>
#include <cmath>
#include <tuple>

namespace tandem::models {

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters(/*recurse=*/true)) count += p.numel();
  return count;
}

at::Tensor RmsNormForward(const at::Tensor& x, const at::Tensor& weight, double eps) {
#if __has_include(<ATen/ops/_fused_rms_norm.h>)
  // On a GPU, LibTorch's fused kernel: one kernel forward and one backward, where the written-out
  // form below launches eight and twelve (NOTE [Fused kernels on a GPU]). Outside autocast, so
  // that it keeps x's dtype as the written-out form does.
  if (x.is_cuda() && weight.scalar_type() == x.scalar_type()) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    return std::get<0>(at::_fused_rms_norm(x, {x.size(-1)}, weight, eps));
  }
#endif
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

RmsNormImpl::RmsNormImpl(int64_t dim, double eps) : eps_(eps) {
  TORCH_CHECK(dim > 0, "RmsNorm: dim must be positive, got ", dim);
  weight = register_parameter("weight", torch::ones({dim}));
}

bool IsKnownActivation(std::string_view name) {
  for (std::string_view known : {"gelu", "gelu_tanh", "gelu_pytorch_tanh", "gelu_new", "quick_gelu",
                                 "silu", "relu", "linear"}) {
    if (name == known) return true;
  }
  return false;
}

at::Tensor Activate(std::string_view name, const at::Tensor& x) {
  if (name == "gelu") return torch::gelu(x);
  if (name == "gelu_tanh" || name == "gelu_pytorch_tanh" || name == "gelu_new")
    return torch::gelu(x, "tanh");
  if (name == "quick_gelu") return x * torch::sigmoid(1.702 * x);
  if (name == "silu") return torch::silu(x);
  if (name == "relu") return torch::relu(x);
  if (name == "linear") return x;
  TORCH_CHECK(false, "unknown activation \"", std::string(name), "\"");
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

at::Tensor LayerNormFp32(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                         double eps) {
  return at::layer_norm(x.to(at::kFloat), {x.size(-1)}, weight.to(at::kFloat), bias.to(at::kFloat),
                        eps)
      .to(x.scalar_type());
}

RotaryTables MakeRotaryTables(int64_t head_dim, int64_t max_seq_len, double theta,
                              const RopeScaling& scaling) {
  TORCH_CHECK(head_dim > 0 && head_dim % 2 == 0, "rotary: head_dim must be even and positive, got ",
              head_dim);
  TORCH_CHECK(max_seq_len >= 0, "rotary: max_seq_len must be >= 0, got ", max_seq_len);
  TORCH_CHECK(theta > 0, "rotary: rope_theta must be positive, got ", theta);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  at::Tensor inv_freq = torch::pow(
      theta, -torch::arange(0, head_dim, 2, f64) / static_cast<double>(head_dim));  // [d/2]
  if (scaling.type == "linear") {
    TORCH_CHECK(scaling.factor > 0, "rotary: linear scaling needs factor > 0, got ",
                scaling.factor);
    inv_freq = inv_freq / scaling.factor;
  } else if (scaling.type == "llama3") {
    const double factor = scaling.factor, low = scaling.low_freq_factor,
                 high = scaling.high_freq_factor;
    const auto original = static_cast<double>(scaling.original_max_positions);
    TORCH_CHECK(factor > 0 && original > 0 && high > low,
                "rotary: llama3 scaling needs factor > 0, ",
                "original_max_position_embeddings > 0 and high_freq_factor > low_freq_factor, got ",
                factor, ", ", original, ", ", high, " and ", low);
    const at::Tensor wavelength = 2.0 * M_PI / inv_freq;
    const at::Tensor scaled =
        torch::where(wavelength > original / low, inv_freq / factor, inv_freq);
    const at::Tensor smooth = (original / wavelength - low) / (high - low);
    const at::Tensor smoothed = (1.0 - smooth) * scaled / factor + smooth * scaled;
    const at::Tensor medium =
        wavelength.ge(original / high).logical_and(wavelength.le(original / low));
    inv_freq = torch::where(medium, smoothed, scaled);
  } else {
    TORCH_CHECK(scaling.type == "default", "rotary: unknown rope_type \"", scaling.type,
                "\" (supported: default, linear, llama3)");
  }
  const at::Tensor positions = torch::arange(max_seq_len, f64);
  const at::Tensor freqs = torch::outer(positions, inv_freq);  // [S, d/2]
  const at::Tensor angles = torch::cat({freqs, freqs}, -1);    // [S, d]
  return {angles.cos().to(torch::kFloat), angles.sin().to(torch::kFloat)};
}

namespace {

// rotate_half(x) = [-x2, x1] for the halves x1, x2 of the last dim, and its transpose [u2, -u1].
at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

at::Tensor RotateHalfTransposed(const at::Tensor& u) {
  const int64_t half = u.size(-1) / 2;
  return at::cat({u.narrow(-1, half, half), -u.narrow(-1, 0, half)}, -1);
}

// NOTE [Rotary backward]: y = x cos + R x sin with R = rotate_half is one autograd function, whose
// backward is dx = g cos + R^T (g sin): two multiplies, a rotation and an add. Autograd of the
// written-out form zero-fills a tensor for each half's gradient, copies the half in and adds them
// up (slice_backward): 6% of the GPU time of a Qwen2-0.5B-sized step on an H100 (bench/README.md,
// "On a GPU"). The arithmetic is that of the written-out form: each product and sum in fp32 from
// the same operands (a bf16 operand times an fp32 one is computed in fp32, as after a cast), so the
// results are the same bits. The gradient g arrives in y's dtype, which is x's.
struct RotaryFunction : public torch::autograd::Function<RotaryFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& cos, const at::Tensor& sin) {
    const at::Tensor cos32 = cos.to(at::kFloat), sin32 = sin.to(at::kFloat);
    ctx->save_for_backward({cos32, sin32});
    return (x * cos32 + RotateHalf(x) * sin32).to(x.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& g = grads[0];
    return {(g * saved[0] + RotateHalfTransposed(g * saved[1])).to(g.scalar_type()), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return RotaryFunction::apply(x, cos, sin);
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
