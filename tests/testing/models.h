// Tiny models for engine tests: a linear stem, residual MLP blocks (BlockModules, so they can be
// gathered at ZeRO-3 and recomputed) and a linear head. Sizes are odd on purpose, so partitions are
// uneven for world sizes 2 and 3.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/block.h"

namespace tandem::testing {

class MlpBlock : public engine::BlockModule {
 public:
  explicit MlpBlock(int64_t width)
      : fc1_(register_module("fc1", torch::nn::Linear(width, 2 * width + 1))),
        fc2_(register_module("fc2", torch::nn::Linear(2 * width + 1, width))) {}
  std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs) override {
    return {inputs[0] + fc2_(torch::tanh(fc1_(inputs[0])))};
  }

 private:
  torch::nn::Linear fc1_, fc2_;
};

class TinyNet : public torch::nn::Module {
 public:
  TinyNet(int64_t in = 5, int64_t width = 7, int64_t out = 3, int blocks = 2, bool stem = true)
      : stem_(stem) {
    if (stem_) input_ = register_module("input", torch::nn::Linear(in, width));
    for (int i = 0; i < blocks; ++i) {
      blocks_.push_back(
          register_module("block" + std::to_string(i), std::make_shared<MlpBlock>(width)));
    }
    if (stem_) output_ = register_module("output", torch::nn::Linear(width, out));
  }
  at::Tensor forward(at::Tensor x) {
    if (stem_) x = input_(x);
    for (auto& block : blocks_) x = block->Forward(x);
    return stem_ ? output_(x) : x;
  }
  void set_recompute(bool recompute) {
    for (auto& block : blocks_) block->set_recompute(recompute);
  }

 private:
  bool stem_;
  torch::nn::Linear input_{nullptr}, output_{nullptr};
  std::vector<std::shared_ptr<MlpBlock>> blocks_;
};

// A copy of `model`'s parameter values into `target` (same architecture).
inline void CopyParameters(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  auto src = from.named_parameters();
  for (auto& item : to.named_parameters()) item.value().copy_(src[item.key()]);
}

// Max over elements of |a - b| / (atol + rtol * |b|); <= 1 means within tolerance.
inline double ToleranceRatio(const at::Tensor& a, const at::Tensor& b, double atol, double rtol) {
  auto af = a.to(torch::kDouble), bf = b.to(torch::kDouble);
  return ((af - bf).abs() / (atol + rtol * bf.abs())).max().item<double>();
}

// Expects every (name, tensor) of `actual` within atol + rtol * |expected| of `reference`'s
// parameter of that name; `what` names the case in failures.
inline void ExpectCloseToParameters(const std::vector<std::pair<std::string, at::Tensor>>& actual,
                                    const torch::nn::Module& reference, double atol, double rtol,
                                    const std::string& what) {
  const auto expected = reference.named_parameters();
  for (const auto& [name, tensor] : actual) {
    const at::Tensor* want = expected.find(name);
    ASSERT_NE(want, nullptr) << what << ": no parameter " << name << " in the reference";
    EXPECT_LE(ToleranceRatio(tensor, want->detach(), atol, rtol), 1.0)
        << what << " " << name << "\nactual\n"
        << tensor << "\nexpected\n"
        << *want;
  }
}

}  // namespace tandem::testing
