// A residual MLP (stem, pre-norm-free tanh MLP blocks, head) used by the engine demo and the engine
// benchmark, and a fixed random "teacher" of the same shape that makes a learnable regression task.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/block.h"

namespace tandem::examples {

class ResidualBlock : public engine::BlockModule {
 public:
  ResidualBlock(int64_t width, int64_t hidden)
      : up_(register_module("up", torch::nn::Linear(width, hidden))),
        down_(register_module("down", torch::nn::Linear(hidden, width))) {}
  std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs) override {
    return {inputs[0] + down_(torch::tanh(up_(inputs[0])))};
  }

 private:
  torch::nn::Linear up_, down_;
};

class ResidualMlp : public torch::nn::Module {
 public:
  ResidualMlp(int64_t in, int64_t width, int64_t out, int blocks)
      : stem_(register_module("stem", torch::nn::Linear(in, width))),
        list_(register_module("blocks", torch::nn::ModuleList())),
        head_(nullptr) {
    for (int i = 0; i < blocks; ++i) {
      blocks_.push_back(std::make_shared<ResidualBlock>(width, 4 * width));
      list_->push_back(blocks_.back());  // parameter names "blocks.<i>.up.weight", ...
    }
    head_ = register_module("head", torch::nn::Linear(width, out));
  }
  at::Tensor forward(at::Tensor x) {
    x = stem_(x);
    for (auto& block : blocks_) x = block->Forward(x);
    return head_(x);
  }
  int64_t num_parameters() const {
    int64_t n = 0;
    for (const auto& p : parameters()) n += p.numel();
    return n;
  }

 private:
  torch::nn::Linear stem_;
  torch::nn::ModuleList list_;
  torch::nn::Linear head_;
  std::vector<std::shared_ptr<ResidualBlock>> blocks_;
};

// Targets of the regression task: a fixed random two-layer network of the inputs.
class Teacher {
 public:
  Teacher(int64_t in, int64_t out, uint64_t seed) {
    auto g = at::detail::createCPUGenerator(seed);
    w1_ = at::randn({in, 64}, g) / std::sqrt(static_cast<double>(in));
    w2_ = at::randn({64, out}, g) / 8.0;
  }
  at::Tensor operator()(const at::Tensor& x) const {
    return at::matmul(at::tanh(at::matmul(x, w1_)), w2_);
  }

 private:
  at::Tensor w1_, w2_;
};

}  // namespace tandem::examples
