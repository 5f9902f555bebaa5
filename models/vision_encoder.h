// VisionEncoder: a ViT without class token whose projected patch embeddings are the LLM's prefix
// (docs/design.md §4). Architecture, parameter names and count formula: models/README.md.
//
//   images [B, C, H, W] float in [0, 1]  ->  (x - 0.5) / 0.5
//   -> patch_embed Conv2d(C, hidden, kernel = stride = patch) -> [B, P, hidden] (P = (H/patch)^2,
//      row-major over the patch grid) + positions (learned parameter, or fixed 2D sine-cosine
//      buffer)
//   -> layers x pre-norm block: x += proj(MHSA(LN(x))); x += fc2(GELU(fc1(LN(x))))
//   -> projector: Linear(hidden, output_dim) -> GELU -> Linear(output_dim, output_dim)
//   -> [B, P, output_dim]
//
// NOTE [Vision towers]
// The same class holds the pretrained towers of Hugging Face checkpoints (hf/), set by the
// VisionConfig fields after output_dim:
//   - CLIP: a class embedding ahead of the patches (class_token), no patch bias, a LayerNorm on
//     the embeddings (pre_norm), QuickGELU; SigLIP: tanh GELU. Both have separate q, k, v
//     projections with biases, stacked into qkv on load.
//   - LLaVA's features: the residual stream after block feature_index() (blocks after it are
//     not run), without position 0 for the "default" strategy, with no norm (final_norm false).
//     The tower's post-layernorm (post_norm) and SigLIP's pooling head (pooling_head) are kept
//     for a faithful export but never run. Parameters that never run are created with
//     requires_grad false, so an engine holds them frozen: as in PyTorch, where a parameter
//     without a gradient is left alone by the optimizer.
//   - projector "mlp2x": LLaVA's multi_modal_projector, linear_1 -> act -> linear_2.
//   - forward normalises [0, 1] pixels with image_mean and image_std (the preprocessor's values);
//     ForwardNormalized takes transformers' pixel_values as they are.
// Tandem's own ViT is the defaults, a LLaVA model too: no class token, the last block's features,
// the mlp2x projector, mean and std 0.5, which export as a SigLIP tower (hf/export.h).
//
// Each transformer block is an engine::BlockModule called through Forward, so an engine can gather
// its parameters just in time (ZeRO-3) and recompute it in backward (set_recompute). Dtypes: NOTE
// [Model dtypes] in models/layers.h; under autocast the output has the autocast dtype.
//
// Errors: the constructor and forward throw c10::Error (TORCH_CHECK) for an inconsistent config or
// an input of the wrong shape; the message names the sizes. Thread-compatible: one forward at a
// time.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/block.h"
#include "models/model_config.h"
#include "parallel/parallel_group.h"

namespace tandem::models {

// NOTE [Sequence-parallel vision encoder]
// With a sequence-parallel group of S ranks (DeepSpeed-Ulysses) every rank holds every parameter
// and rank r computes positions [r N/S, (r+1) N/S) of the N = num_positions() (the class token,
// when there is one, is position 0). Outside attention every activation is this rank's positions
// only; the patch embedding convolves only the grid rows holding them. Each block's attention
// swaps positions for heads with one all-to-all (q, k and v together: [B, N, H/S, 3 d] per rank),
// attends over the whole sequence with H/S heads, and swaps back with another. The output is this
// rank's features, feature_range() of num_features() (rank 0's is one shorter when the class
// token's feature is dropped). Each rank's parameter gradients cover its positions: their sum over
// the group is the whole gradient (the engine's reduction over the vision group adds them).
class VisionEncoderImpl : public torch::nn::Module {
 public:
  // Builds and initialises the model from the default generator (deterministic given
  // torch::manual_seed). REQUIRES: image_size a positive multiple of patch_size, hidden a multiple
  // of heads, positions "learned" or "sincos" (then hidden a multiple of 4); sizes positive. With a
  // sequence-parallel group of S ranks also: S divides heads and num_positions(). The group must
  // outlive the model.
  explicit VisionEncoderImpl(const VisionConfig& config,
                             parallel::ParallelGroup sequence_parallel = {});

  // images [B, channels, image_size, image_size], values in [0, 1] -> [B, num_features, output_dim]
  // ([B, feature_range().size(), output_dim] on a sequence-parallel rank).
  // Normalises with image_mean and image_std, then ForwardNormalized.
  at::Tensor forward(const at::Tensor& images);
  // pixels already normalised (transformers' pixel_values) -> [B, num_features, output_dim].
  at::Tensor ForwardNormalized(const at::Tensor& pixels);

  const VisionConfig& config() const { return config_; }
  int64_t num_patches() const { return config_.num_patches(); }
  // Embeddings per image: the patches, plus the class token unless it is dropped.
  int64_t num_features() const { return config_.num_features(); }

  // The dtype the residual stream runs in (NOTE [Model dtypes]); nullopt (the default) is the
  // parameter dtype. Set it to Engine::compute().activation_dtype after the engine takes the model.
  void set_compute_dtype(c10::optional<at::ScalarType> dtype);

  // Activation checkpointing for every transformer block (engine/block.h).
  void set_recompute(bool recompute);
  const std::vector<std::shared_ptr<engine::BlockModule>>& blocks() const { return blocks_; }

  // The sequence-parallel group (a group of one without it) and the features [begin, end) of
  // num_features() that forward returns on this rank (all of them without it).
  const parallel::ParallelGroup& sequence_parallel() const { return *sequence_parallel_; }
  const parallel::Range& feature_range() const { return feature_range_; }

 private:
  VisionConfig config_;
  std::shared_ptr<const parallel::ParallelGroup> sequence_parallel_;
  parallel::Range positions_range_, feature_range_;
  torch::nn::Conv2d patch_embed_{nullptr};
  at::Tensor positions_;    // [1, positions, hidden]: parameter ("learned") or buffer ("sincos")
  at::Tensor class_token_;  // [1, 1, hidden] when config.class_token
  torch::nn::LayerNorm pre_norm_{nullptr};
  torch::nn::ModuleList block_list_{nullptr};
  std::vector<std::shared_ptr<engine::BlockModule>> blocks_;
  torch::nn::LayerNorm norm_{nullptr};      // when config.final_norm
  torch::nn::Linear projector_{nullptr};    // "linear", or linear_1 of "mlp2x"
  torch::nn::Linear projector_2_{nullptr};  // linear_2 of "mlp2x"
  at::Tensor pixel_mean_, pixel_std_;       // fp32 buffers [1, channels, 1, 1]
  c10::optional<at::ScalarType> compute_dtype_;
};
TORCH_MODULE(VisionEncoder);

// The features [begin, end) of num_features() that rank `rank` of a sequence-parallel group of
// `size` ranks computes (NOTE [Sequence-parallel vision encoder]); all of them for size 1.
// REQUIRES: size divides num_positions().
parallel::Range VisionFeatureRange(const VisionConfig& config, int size, int rank);

// The fixed 2D sine-cosine position table [grid * grid, dim] (fp32, row-major over the grid, as
// MAE): the first dim/2 channels encode the patch row, the last dim/2 the column; each half is
// [sin(p * w_k), cos(p * w_k)] with w_k = 10000^(-k / (dim/4)), k < dim/4. REQUIRES: dim % 4 == 0.
at::Tensor SinCosPositions2d(int64_t grid, int64_t dim);

}  // namespace tandem::models
