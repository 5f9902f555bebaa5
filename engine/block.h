// BlockModule: a module the engine can gather just in time (ZeRO-3) and recompute in backward
// (activation checkpointing). LibTorch has no module hooks, so the model opts in by deriving its
// repeated layers (transformer blocks) from BlockModule and implementing Run.
//
// NOTE [Block recomputation]
// Block::Forward runs Run through a custom autograd function when the block needs it (its engine is
// at ZeRO-3, or set_recompute(true)):
// - forward: gather the block's parameters (ZeRO-3), run under no-grad, release them, keep the
// inputs.
// - backward: gather again, re-run Run with grad enabled under the forward's autocast state, and
// take
//   the gradients of the inputs and of the block's parameters with torch::autograd::grad (no
//   AccumulateGrad runs, so this is not a nested backward into the engine's hooks). Parameter
//   gradients go straight to the engine's reduction (or, with no engine, are added to
//   param.grad()); the parameters are released; the input gradients flow on.
// Run must be deterministic (no dropout): it runs twice. Otherwise Forward simply calls Run.
// Run may read only the block's own parameters and its inputs: a parameter from elsewhere would get
// no gradient from the recomputation, so the backward fails naming it instead.
//
// Thread-compatible: a block runs on one thread at a time.
#pragma once

#include <torch/nn/module.h>

#include <string>
#include <vector>

namespace tandem::engine {

// Implemented by the engine that owns a block's parameters.
class BlockHost {
 public:
  virtual ~BlockHost() = default;
  virtual bool gathers_parameters() const = 0;  // ZeRO-3
  // Makes the block's parameters usable (all-gather at ZeRO-3); Release frees them again.
  virtual void GatherBlock(int block_id) = 0;
  virtual void ReleaseBlock(int block_id) = 0;
  // Called first in a block's backward: lets the engine register its end-of-backward callback.
  virtual void EnterBackward() = 0;
  // Gradients of the block's trainable parameters, in `BlockModule::trainable_parameters()` order
  // (undefined where a parameter got none).
  virtual void AcceptBlockGradients(int block_id, const std::vector<at::Tensor>& grads) = 0;
  // The model's name for `parameter`, for errors; "" when it is not one of the engine's.
  virtual std::string ParameterName(const at::Tensor& parameter) const { return ""; }
};

class BlockModule : public torch::nn::Module {
 public:
  // The block's computation. Must be deterministic; may read module members for non-tensor inputs.
  virtual std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs) = 0;

  // Call this from the parent module's forward instead of Run.
  std::vector<at::Tensor> Forward(const std::vector<at::Tensor>& inputs);
  at::Tensor Forward(const at::Tensor& input) { return Forward(std::vector<at::Tensor>{input})[0]; }

  // Activation checkpointing for this block at any ZeRO stage (always on at ZeRO-3).
  void set_recompute(bool recompute) { recompute_ = recompute; }
  bool recompute() const { return recompute_; }

  // The block's parameters that require grad, in named_parameters() order.
  std::vector<at::Tensor> trainable_parameters() const;

  // Set by the engine that owns this block's parameters.
  void AttachHost(BlockHost* host, int block_id) {
    host_ = host;
    block_id_ = block_id;
  }
  BlockHost* host() const { return host_; }
  int block_id() const { return block_id_; }

 private:
  bool recompute_ = false;
  at::Tensor anchor_;  // see RecomputeFunction in block.cc
  BlockHost* host_ = nullptr;
  int block_id_ = -1;
};

}  // namespace tandem::engine
