// Both models computing in fp32 from bf16 storage (NOTE [Model dtypes], NOTE [Compute dtype] in
// engine/compute.h): with the compute dtype set to fp32, a model with bf16 parameters computes
// exactly what an fp32 model with the same (bf16-representable) weights computes, and its gradients
// are that model's gradients rounded to bf16 (the embedding's within one rounding). On the default
// dtype nothing changes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "models/llm.h"
#include "models/vision_encoder.h"

namespace tandem::models {
namespace {

VisionConfig TinyVisionConfig() {
  VisionConfig c;
  c.image_size = 16;
  c.patch_size = 4;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 4;
  c.mlp_hidden = 64;
  c.output_dim = 24;
  return c;
}

LlmConfig TinyLlmConfig(bool tied) {
  LlmConfig c;
  c.hidden = 24;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp_hidden = 40;
  c.vocab_size = 20;
  c.max_seq_len = 32;
  c.tie_embeddings = tied;
  return c;
}

// Rounds every parameter to bf16 values; with `keep_bf16` the parameters become bf16 tensors,
// otherwise they stay fp32 holding the rounded values.
void RoundParameters(torch::nn::Module& module, bool keep_bf16) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    const at::Tensor rounded = p.data().to(torch::kBFloat16);
    p.set_data(keep_bf16 ? rounded : rounded.to(torch::kFloat));
  }
}

std::map<std::string, at::Tensor> Gradients(const torch::nn::Module& module) {
  std::map<std::string, at::Tensor> grads;
  for (const auto& item : module.named_parameters()) grads[item.key()] = item.value().grad();
  return grads;
}

class ComputeDtypeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(0);
  }
};

TEST_F(ComputeDtypeTest, Fp32ComputeFromBf16StorageEqualsTheFp32ModelExactly) {
  for (bool tied : {true, false}) {
    torch::manual_seed(1);
    VisionEncoder vision32(TinyVisionConfig());
    Llm llm32(TinyLlmConfig(tied));
    torch::manual_seed(1);
    VisionEncoder vision16(TinyVisionConfig());
    Llm llm16(TinyLlmConfig(tied));
    RoundParameters(*vision32, /*keep_bf16=*/false);
    RoundParameters(*llm32, false);
    RoundParameters(*vision16, /*keep_bf16=*/true);
    RoundParameters(*llm16, true);
    vision16->set_compute_dtype(torch::kFloat);
    llm16->set_compute_dtype(torch::kFloat);

    const at::Tensor images = torch::rand({2, 3, 16, 16});
    const at::Tensor tokens = torch::randint(3, 20, {2, 6}, torch::kLong);
    auto loss_of = [&](VisionEncoder& vision, Llm& llm) {
      const at::Tensor embeddings = vision->forward(images);
      EXPECT_EQ(embeddings.scalar_type(), torch::kFloat);
      const at::Tensor logits = llm->forward(embeddings, tokens);
      EXPECT_EQ(logits.scalar_type(), torch::kFloat);
      return CaptionLoss(logits, tokens, /*pad_id=*/0).sum;
    };
    const at::Tensor loss32 = loss_of(vision32, llm32);
    const at::Tensor loss16 = loss_of(vision16, llm16);
    EXPECT_EQ(loss16.item<float>(), loss32.item<float>()) << "tied " << tied;
    loss32.backward();
    loss16.backward();
    const auto grads32 = Gradients(*vision32), grads16 = Gradients(*vision16);
    const auto llm_grads32 = Gradients(*llm32), llm_grads16 = Gradients(*llm16);
    for (const auto* group : {&grads16, &llm_grads16}) {
      const auto& reference = group == &grads16 ? grads32 : llm_grads32;
      for (const auto& [name, grad] : *group) {
        ASSERT_TRUE(grad.defined()) << name;
        EXPECT_EQ(grad.scalar_type(), torch::kBFloat16) << name;
        const at::Tensor rounded = reference.at(name).to(torch::kBFloat16);
        if (name == "embed.weight") {
          // Its rows gather the gradients of repeated tokens (and, tied, the head's) after each
          // was rounded to bf16, where the fp32 model adds them first: equal within one rounding.
          const at::Tensor error = (grad.to(torch::kFloat) - reference.at(name)).abs();
          EXPECT_LE(error.max().item<float>(),
                    (1e-2 * reference.at(name).abs().max() + 1e-7).item<float>())
              << name << " (tied " << tied << ")";
        } else {
          EXPECT_TRUE(torch::equal(grad, rounded)) << name << " (tied " << tied << ")";
        }
      }
    }
    for (const auto& p : vision16->parameters()) EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
    for (const auto& p : llm16->parameters()) EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
  }
}

TEST_F(ComputeDtypeTest, DefaultComputeDtypeIsTheParameterDtype) {
  VisionEncoder vision(TinyVisionConfig());
  Llm llm(TinyLlmConfig(true));
  RoundParameters(*vision, true);
  RoundParameters(*llm, true);
  const at::Tensor embeddings = vision->forward(torch::rand({1, 3, 16, 16}));
  EXPECT_EQ(embeddings.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(llm->forward(embeddings, torch::randint(3, 20, {1, 4}, torch::kLong)).scalar_type(),
            torch::kBFloat16);
  vision->set_compute_dtype(torch::kFloat);
  vision->set_compute_dtype(c10::nullopt);  // back to the parameter dtype
  EXPECT_EQ(vision->forward(torch::rand({1, 3, 16, 16})).scalar_type(), torch::kBFloat16);
}

}  // namespace
}  // namespace tandem::models
