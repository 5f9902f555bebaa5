#include "models/vision_encoder.h"

#include <torch/torch.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/compat.h"
#include "models/layers.h"
#include "parallel/collectives.h"

namespace tandem::models {
namespace {

namespace F = torch::nn::functional;

using SequenceParallel = std::shared_ptr<const parallel::ParallelGroup>;

// Multi-head self-attention: one qkv projection (with bias), output projection "proj". With
// sequence parallelism (NOTE [Sequence-parallel vision encoder]) x holds this rank's positions;
// one all-to-all before attention and one after it swap positions for heads.
class VisionAttentionImpl : public torch::nn::Module {
 public:
  VisionAttentionImpl(int64_t hidden, int64_t heads, SequenceParallel sp)
      : sp_(std::move(sp)),
        heads_(heads),
        qkv_(register_module("qkv", torch::nn::Linear(hidden, 3 * hidden))),
        proj_(register_module("proj", torch::nn::Linear(hidden, hidden))) {}

  at::Tensor forward(const at::Tensor& x) {
    const int64_t batch = x.size(0), seq = x.size(1), hidden = x.size(2), dim = hidden / heads_;
    at::Tensor qkv =
        LinearAs(qkv_, x).view({batch, seq, 3, heads_, dim});  // [B, n, 3, heads, head_dim]
    if (sp_->active()) {
      // [B, n, heads, 3 head_dim] (this rank's n positions) -> [B, N, heads / S, 3 head_dim]: every
      // position, this rank's heads; q, k and v travel in one all-to-all.
      qkv = parallel::SequenceToHeads(qkv.transpose(2, 3).reshape({batch, seq, heads_, 3 * dim}),
                                      *sp_);
      qkv = qkv.view({batch, qkv.size(1), qkv.size(2), 3, dim}).transpose(2, 3);
    }
    // [3, B, heads / S, N, head_dim], unbound: its backward stacks the three gradients in one
    // kernel, where selecting each zero-fills a [3, ...] gradient and adds them up.
    const std::vector<at::Tensor> q_k_v = qkv.permute({2, 0, 3, 1, 4}).unbind(0);
    at::Tensor out =
        compat::ScaledDotProductAttention(q_k_v[0], q_k_v[1], q_k_v[2], /*is_causal=*/false);
    out = parallel::HeadsToSequence(out.transpose(1, 2), *sp_);  // [B, n, heads, head_dim]
    return LinearAs(proj_, out.reshape({batch, seq, hidden}));
  }

  void Init(double std, double residual_std) {
    InitLinear(qkv_, std);
    InitLinear(proj_, residual_std);
  }

 private:
  SequenceParallel sp_;
  int64_t heads_;
  torch::nn::Linear qkv_, proj_;
};
TORCH_MODULE(VisionAttention);

class VisionMlpImpl : public torch::nn::Module {
 public:
  VisionMlpImpl(int64_t hidden, int64_t mlp_hidden, std::string activation)
      : activation_(std::move(activation)),
        fc1_(register_module("fc1", torch::nn::Linear(hidden, mlp_hidden))),
        fc2_(register_module("fc2", torch::nn::Linear(mlp_hidden, hidden))) {}

  at::Tensor forward(const at::Tensor& x) {
    return LinearAs(fc2_, Activate(activation_, LinearAs(fc1_, x)));
  }

  void Init(double std, double residual_std) {
    InitLinear(fc1_, std);
    InitLinear(fc2_, residual_std);
  }

 private:
  std::string activation_;
  torch::nn::Linear fc1_, fc2_;
};
TORCH_MODULE(VisionMlp);

// Pre-norm transformer block. Inputs {x [B, N, hidden]}, outputs {x'}.
class VisionBlock : public engine::BlockModule {
 public:
  VisionBlock(const VisionConfig& c, const SequenceParallel& sp)
      : eps_(c.norm_eps),
        norm1_(register_module(
            "norm1",
            torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden}).eps(c.norm_eps)))),
        attn_(register_module("attn", VisionAttention(c.hidden, c.heads, sp))),
        norm2_(register_module(
            "norm2",
            torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden}).eps(c.norm_eps)))),
        mlp_(register_module("mlp", VisionMlp(c.hidden, c.mlp_hidden, c.activation))) {
    const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(c.layers));
    attn_->Init(kInitStd, residual_std);
    mlp_->Init(kInitStd, residual_std);
    // LayerNorm already starts at weight 1, bias 0.
  }

  std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs) override {
    at::Tensor x = inputs[0];
    x = x + attn_(LayerNormFp32(x, norm1_->weight, norm1_->bias, eps_));
    x = x + mlp_(LayerNormFp32(x, norm2_->weight, norm2_->bias, eps_));
    return {x};
  }

 private:
  double eps_;
  torch::nn::LayerNorm norm1_;
  VisionAttention attn_;
  torch::nn::LayerNorm norm2_;
  VisionMlp mlp_;
};

void CheckConfig(const VisionConfig& c) {
  TORCH_CHECK(c.image_size > 0 && c.patch_size > 0 && c.image_size % c.patch_size == 0,
              "VisionEncoder: image_size ", c.image_size,
              " must be a positive multiple of patch_size ", c.patch_size);
  TORCH_CHECK(c.channels > 0 && c.hidden > 0 && c.layers >= 0 && c.heads > 0 && c.mlp_hidden > 0 &&
                  c.output_dim > 0,
              "VisionEncoder: sizes must be positive (channels ", c.channels, ", hidden ", c.hidden,
              ", layers ", c.layers, ", heads ", c.heads, ", mlp_hidden ", c.mlp_hidden,
              ", output_dim ", c.output_dim, ")");
  TORCH_CHECK(c.hidden % c.heads == 0, "VisionEncoder: hidden ", c.hidden,
              " must be a multiple of heads ", c.heads);
  TORCH_CHECK(c.positions == "learned" || c.positions == "sincos",
              "VisionEncoder: positions must be \"learned\" ", "or \"sincos\", got \"", c.positions,
              "\"");
  TORCH_CHECK(c.positions != "sincos" || (c.hidden % 4 == 0 && !c.class_token),
              "VisionEncoder: sincos positions ", "need hidden ", c.hidden,
              " to be a multiple of 4 and no class token");
  const auto per_channel = [&](const std::vector<double>& v) {
    return v.empty() || static_cast<int64_t>(v.size()) == c.channels;
  };
  TORCH_CHECK(per_channel(c.image_mean) && per_channel(c.image_std),
              "VisionEncoder: image_mean and image_std ", "need one value per channel (",
              c.channels, ") or none, got ", c.image_mean.size(), " and ", c.image_std.size());
  for (double s : c.image_std)
    TORCH_CHECK(s > 0, "VisionEncoder: image_std values must be positive, got ", s);
  TORCH_CHECK(IsKnownActivation(c.activation), "VisionEncoder: unknown activation \"", c.activation,
              "\"");
  TORCH_CHECK(c.projector == "linear" || c.projector == "mlp2x",
              "VisionEncoder: projector must be \"linear\" or ", "\"mlp2x\", got \"", c.projector,
              "\"");
  TORCH_CHECK(IsKnownActivation(c.projector_activation),
              "VisionEncoder: unknown projector activation \"", c.projector_activation, "\"");
  TORCH_CHECK(c.feature_index() >= 0 && c.feature_index() <= c.layers,
              "VisionEncoder: feature_layer ", c.feature_layer, " is outside the ", c.layers + 1,
              " hidden states of ", c.layers, " layers");
  TORCH_CHECK(c.num_features() > 0,
              "VisionEncoder: no features are left after dropping the first position");
}

void CheckSequenceParallel(const VisionConfig& c, int size) {
  if (size == 1) return;
  TORCH_CHECK(c.heads % size == 0, "VisionEncoder: ", c.heads, " heads do not split over ", size,
              " sequence-parallel ranks");
  TORCH_CHECK(c.num_positions() % size == 0, "VisionEncoder: a sequence of ", c.num_positions(),
              " positions does not split over ", size, " sequence-parallel ranks");
  TORCH_CHECK(c.num_positions() / size > (c.drop_first_feature ? 1 : 0), "VisionEncoder: ", size,
              " sequence-parallel ranks leave rank 0 no feature");
}

void CheckImages(const VisionConfig& c, const at::Tensor& x, const char* what) {
  TORCH_CHECK(x.defined() && x.dim() == 4 && x.size(1) == c.channels && x.size(2) == c.image_size &&
                  x.size(3) == c.image_size,
              "VisionEncoder: expected ", what, " [batch, ", c.channels, ", ", c.image_size, ", ",
              c.image_size, "], got ", x.defined() ? x.sizes() : at::IntArrayRef{});
}

void Freeze(torch::nn::Module& module) {
  for (auto& p : module.parameters(/*recurse=*/true)) p.set_requires_grad(false);
}

// SigLIP's attention-pooling head under transformers' names (probe, attention.in_proj_*,
// attention.out_proj, layernorm, mlp.fc1/fc2): kept so that an export carries it, never run.
class PoolingHeadImpl : public torch::nn::Module {
 public:
  PoolingHeadImpl(int64_t hidden, int64_t mlp_hidden) {
    register_parameter("probe", torch::zeros({1, 1, hidden}));
    auto attention = register_module("attention", std::make_shared<torch::nn::Module>());
    attention->register_parameter("in_proj_weight", torch::zeros({3 * hidden, hidden}));
    attention->register_parameter("in_proj_bias", torch::zeros({3 * hidden}));
    attention->register_module("out_proj", torch::nn::Linear(hidden, hidden));
    register_module("layernorm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})));
    register_module("mlp", VisionMlp(hidden, mlp_hidden, "gelu"));
  }
};
TORCH_MODULE(PoolingHead);

}  // namespace

parallel::Range VisionFeatureRange(const VisionConfig& config, int size, int rank) {
  const int64_t local = config.num_positions() / size, dropped = config.drop_first_feature ? 1 : 0;
  return {std::max<int64_t>(rank * local - dropped, 0), (rank + 1) * local - dropped};
}

at::Tensor SinCosPositions2d(int64_t grid, int64_t dim) {
  TORCH_CHECK(dim > 0 && dim % 4 == 0, "SinCosPositions2d: dim ", dim,
              " must be a positive multiple of 4");
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t quarter = dim / 4;
  const at::Tensor omega =
      torch::pow(10000.0, -torch::arange(quarter, f64) / static_cast<double>(quarter));
  const at::Tensor coords = torch::arange(grid, f64);
  const at::Tensor angles = torch::outer(coords, omega);                    // [grid, dim/4]
  const at::Tensor axis = torch::cat({angles.sin(), angles.cos()}, -1);     // [grid, dim/2]
  const at::Tensor rows = axis.unsqueeze(1).expand({grid, grid, dim / 2});  // row of patch (r, c)
  const at::Tensor cols =
      axis.unsqueeze(0).expand({grid, grid, dim / 2});  // column of patch (r, c)
  return torch::cat({rows, cols}, -1).reshape({grid * grid, dim}).to(torch::kFloat);
}

VisionEncoderImpl::VisionEncoderImpl(const VisionConfig& config,
                                     parallel::ParallelGroup sequence_parallel)
    : config_(config),
      sequence_parallel_(
          std::make_shared<const parallel::ParallelGroup>(std::move(sequence_parallel))) {
  CheckConfig(config_);
  CheckSequenceParallel(config_, sequence_parallel_->size());
  const auto& c = config_;
  const int64_t local = c.num_positions() / sequence_parallel_->size();
  positions_range_ = {sequence_parallel_->rank() * local, (sequence_parallel_->rank() + 1) * local};
  feature_range_ = VisionFeatureRange(c, sequence_parallel_->size(), sequence_parallel_->rank());
  if (c.positions == "learned") {
    positions_ = register_parameter("positions", torch::empty({1, c.num_positions(), c.hidden}));
    InitNormal(positions_, kInitStd);
  } else {
    positions_ = register_buffer("positions", SinCosPositions2d(c.grid(), c.hidden).unsqueeze(0));
  }
  if (c.class_token) {
    class_token_ = register_parameter("class_token", torch::empty({1, 1, c.hidden}));
    InitNormal(class_token_, kInitStd);
  }
  patch_embed_ = register_module(
      "patch_embed", torch::nn::Conv2d(torch::nn::Conv2dOptions(c.channels, c.hidden, c.patch_size)
                                           .stride(c.patch_size)
                                           .bias(c.patch_bias)));
  {
    torch::NoGradGuard no_grad;
    patch_embed_->weight.normal_(0.0, kInitStd);
    if (c.patch_bias) patch_embed_->bias.zero_();
  }
  const auto layer_norm = [&] {
    return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden}).eps(c.norm_eps));
  };
  if (c.pre_norm) pre_norm_ = register_module("pre_norm", layer_norm());
  block_list_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.layers; ++i) {
    auto block = std::make_shared<VisionBlock>(c, sequence_parallel_);
    // Blocks after the feature layer never run (LLaVA's -2 skips the last): frozen, as PyTorch
    // would leave a parameter without gradient untouched.
    if (i >= c.feature_index()) Freeze(*block);
    block_list_->push_back(block);
    blocks_.push_back(block);
  }
  if (c.final_norm) norm_ = register_module("norm", layer_norm());
  if (c.post_norm) Freeze(*register_module("post_norm", layer_norm()));
  if (c.pooling_head) Freeze(*register_module("head", PoolingHead(c.hidden, c.mlp_hidden)));
  if (c.projector == "linear") {
    projector_ = register_module("projector", torch::nn::Linear(c.hidden, c.output_dim));
    InitLinear(projector_, kInitStd);
  } else {
    auto mlp = register_module("projector", std::make_shared<torch::nn::Module>());
    projector_ = mlp->register_module("linear_1", torch::nn::Linear(c.hidden, c.output_dim));
    projector_2_ = mlp->register_module("linear_2", torch::nn::Linear(c.output_dim, c.output_dim));
    // PyTorch's default Linear initialisation, as LLaVA's projector has: with no norm before it,
    // small weights (0.02) would hand the LLM near-zero embeddings at first.
  }
  // Buffers, so that they move with the model (NOTE [Model dtypes]: engines ignore buffers).
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const auto per_channel = [&](const std::vector<double>& v) {
    return (v.empty() ? torch::full({c.channels}, 0.5, f64) : torch::tensor(v, f64))
        .to(torch::kFloat)
        .view({1, -1, 1, 1});
  };
  pixel_mean_ = register_buffer("pixel_mean", per_channel(c.image_mean));
  pixel_std_ = register_buffer("pixel_std", per_channel(c.image_std));
}

at::Tensor VisionEncoderImpl::forward(const at::Tensor& images) {
  const auto& c = config_;
  CheckImages(c, images, "images");
  const auto dtype = compute_dtype_.value_or(patch_embed_->weight.scalar_type());
  return ForwardNormalized((images.to(dtype) - pixel_mean_.to(dtype)) / pixel_std_.to(dtype));
}

at::Tensor VisionEncoderImpl::ForwardNormalized(const at::Tensor& pixels) {
  const auto& c = config_;
  CheckImages(c, pixels, "pixels");
  const auto dtype = compute_dtype_.value_or(patch_embed_->weight.scalar_type());
  // This rank's positions [begin, end): the class token is position 0, patch p position p + 1.
  const int64_t cls = c.class_token ? 1 : 0;
  const int64_t first = std::max<int64_t>(positions_range_.begin - cls, 0),
                last = positions_range_.end - cls;
  at::Tensor x;
  if (last > first) {
    // Only the grid rows holding this rank's patches go through the patch embedding.
    const int64_t row0 = first / c.grid(), rows = (last + c.grid() - 1) / c.grid() - row0;
    const at::Tensor band = pixels.narrow(2, row0 * c.patch_size, rows * c.patch_size);
    // [B, rows * grid, hidden], made contiguous: the residual stream would otherwise keep the
    // convolution's channel-first layout through every block, each layer norm copying it.
    x = Conv2dAs(patch_embed_, band.to(dtype)).flatten(2).transpose(1, 2).to(dtype).contiguous();
    x = x.narrow(1, first - row0 * c.grid(), last - first);
  }
  if (c.class_token && positions_range_.begin == 0) {
    const at::Tensor token = class_token_.to(dtype).expand({pixels.size(0), 1, c.hidden});
    x = x.defined() ? torch::cat({token, x}, 1) : token;
  }
  x = x + positions_.narrow(1, positions_range_.begin, positions_range_.size()).to(dtype);
  if (c.pre_norm) x = LayerNormFp32(x, pre_norm_->weight, pre_norm_->bias, c.norm_eps);
  for (int64_t i = 0; i < c.feature_index(); ++i) x = blocks_[i]->Forward(x);
  if (c.drop_first_feature && positions_range_.begin == 0) x = x.narrow(1, 1, x.size(1) - 1);
  if (c.final_norm) x = LayerNormFp32(x, norm_->weight, norm_->bias, c.norm_eps);
  x = LinearAs(projector_, x);
  if (projector_2_) x = LinearAs(projector_2_, Activate(c.projector_activation, x));
  return x;
}

void VisionEncoderImpl::set_compute_dtype(c10::optional<at::ScalarType> dtype) {
  compute_dtype_ = dtype;
}

void VisionEncoderImpl::set_recompute(bool recompute) {
  for (const auto& block : blocks_) block->set_recompute(recompute);
}

}  // namespace tandem::models
