#include "engine/block.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/compat.h"

namespace tandem::engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Fails naming the first tensor that requires grad and that `roots` depend on but that is neither
// an input nor a parameter of the block: torch::autograd::grad differentiates only `wrt`, so such
// a parameter would silently get no gradient from the recomputation.
void CheckOnlyOwnLeaves(const BlockModule& block, const variable_list& roots,
                        const variable_list& wrt) {
  std::unordered_set<const void*> own;
  for (const auto& t : wrt) own.insert(t.unsafeGetTensorImpl());
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  for (const auto& root : roots) {
    if (root.grad_fn()) stack.push_back(root.grad_fn().get());
  }
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (auto* leaf = dynamic_cast<torch::autograd::AccumulateGrad*>(node)) {
      const at::Tensor& variable = leaf->variable;
      if (!own.count(variable.unsafeGetTensorImpl())) {
        const std::string name =
            block.host() != nullptr ? block.host()->ParameterName(variable) : std::string();
        TORCH_CHECK(false, "block ", block.block_id(), " (", block.name(), ") reads parameter ",
                    name.empty() ? std::string("of shape ") + c10::str(variable.sizes()) : name,
                    ", which is not one of its own: the recomputation in backward would give it no "
                    "gradient; register it in the block or pass it to Forward as an input");
      }
    }
    for (const auto& edge : node->next_edges()) {
      if (edge.function) stack.push_back(edge.function.get());
    }
  }
}

// See NOTE [Block recomputation] in block.h.
struct RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
  // `anchor` is a leaf that requires grad, so the node is part of the graph even when no input
  // requires grad (the first block of a model); it never receives a gradient.
  static variable_list forward(AutogradContext* ctx, int64_t block_address, at::Tensor anchor,
                               at::TensorList inputs) {
    auto* block = reinterpret_cast<BlockModule*>(block_address);
    ctx->saved_data["block"] = block_address;
    const auto device = inputs.empty() ? c10::DeviceType::CPU : inputs[0].device().type();
    const auto autocast = compat::AutocastState::Capture(device);
    ctx->saved_data["autocast_enabled"] = autocast.enabled;
    ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(autocast.dtype);
    c10::List<bool> needs_grad;
    for (const auto& input : inputs) needs_grad.push_back(input.requires_grad());
    ctx->saved_data["needs_grad"] = needs_grad;
    ctx->save_for_backward(inputs.vec());

    BlockHost* host = block->host();
    if (host != nullptr && host->gathers_parameters()) host->GatherBlock(block->block_id());
    variable_list outputs = block->Run(inputs.vec());
    // Autocast caches its low-precision copies of fp32 weights even under no-grad, and keeps them
    // until the outermost autocast scope exits; copies made here have no autograd link, so the
    // recomputation in backward must not find them (NOTE [Block recomputation]).
    at::autocast::clear_cache();
    if (host != nullptr && host->gathers_parameters()) host->ReleaseBlock(block->block_id());
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* block = reinterpret_cast<BlockModule*>(ctx->saved_data["block"].toInt());
    BlockHost* host = block->host();
    if (host != nullptr) host->EnterBackward();

    variable_list saved = ctx->get_saved_variables();
    auto needs_grad = ctx->saved_data["needs_grad"].toBoolList();
    variable_list inputs;
    for (size_t i = 0; i < saved.size(); ++i) {
      inputs.push_back(saved[i].detach().requires_grad_(needs_grad.get(i)));
    }
    std::vector<at::Tensor> params = block->trainable_parameters();

    if (host != nullptr && host->gathers_parameters()) host->GatherBlock(block->block_id());
    variable_list outputs;
    {
      torch::AutoGradMode grad_mode(true);
      const auto device = inputs.empty() ? c10::DeviceType::CPU : inputs[0].device().type();
      at::autocast::clear_cache();  // casts cached elsewhere without grad must not be reused
      compat::AutocastScope autocast(
          device, {ctx->saved_data["autocast_enabled"].toBool(),
                   static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt())});
      outputs = block->Run(inputs);
    }

    // Differentiate the outputs that carry a gradient with respect to inputs and parameters.
    variable_list roots, root_grads, wrt;
    for (size_t i = 0; i < outputs.size() && i < grad_outputs.size(); ++i) {
      if (grad_outputs[i].defined() && outputs[i].requires_grad()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grad_outputs[i]);
      }
    }
    std::vector<size_t> input_positions;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].requires_grad()) {
        input_positions.push_back(i);
        wrt.push_back(inputs[i]);
      }
    }
    for (const auto& p : params) wrt.push_back(p);

    CheckOnlyOwnLeaves(*block, roots, wrt);
    variable_list grads(wrt.size());
    if (!roots.empty() && !wrt.empty()) {
      grads = torch::autograd::grad(roots, wrt, root_grads, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    }
    std::vector<at::Tensor> param_grads(grads.begin() + input_positions.size(), grads.end());
    outputs.clear();
    if (host != nullptr) {
      host->AcceptBlockGradients(block->block_id(), param_grads);
      if (host->gathers_parameters()) host->ReleaseBlock(block->block_id());
    } else {
      for (size_t i = 0; i < params.size(); ++i) {
        if (!param_grads[i].defined()) continue;
        at::Tensor& g = params[i].mutable_grad();
        if (g.defined()) {
          g.add_(param_grads[i]);
        } else {
          g = param_grads[i].detach().clone();
        }
      }
    }

    // One gradient per forward argument: none for the block address and the anchor, then the
    // inputs.
    variable_list result(2 + inputs.size());
    for (size_t k = 0; k < input_positions.size(); ++k) result[2 + input_positions[k]] = grads[k];
    return result;
  }
};

}  // namespace

std::vector<at::Tensor> BlockModule::Forward(const std::vector<at::Tensor>& inputs) {
  const bool gathers = host_ != nullptr && host_->gathers_parameters();
  if (!recompute_ && !gathers) return Run(inputs);
  if (!anchor_.defined()) anchor_ = torch::zeros({}, torch::requires_grad());
  return RecomputeFunction::apply(reinterpret_cast<int64_t>(this), anchor_, at::TensorList(inputs));
}

std::vector<at::Tensor> BlockModule::trainable_parameters() const {
  std::vector<at::Tensor> result;
  for (const auto& p : parameters(/*recurse=*/true)) {
    if (p.requires_grad()) result.push_back(p);
  }
  return result;
}

}  // namespace tandem::engine
