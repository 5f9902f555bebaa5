// The models on a CUDA device against the same models on the CPU: what runs only there (LibTorch's
// fused RMSNorm, at::scaled_dot_product_attention with grouped-query heads, NOTE [Fused kernels on
// a GPU] in models/layers.h) and what runs there differently (the rotary function, the vision
// tower's attention). Needs a CUDA device; skipped without one (scripts/gpu-check runs it in
// gpu_test).
//
// fp32: the GPU's logits and every parameter's gradient within 1e-4 relative of the CPU's (cuBLAS,
// cuDNN and the CPU's BLAS sum in different orders; TF32 off). bf16: the GPU's error against the
// fp32 CPU result at most twice the CPU's own bf16 error (and 1e-3 more), so a kernel that rounds
// differently passes and one that computes something else does not.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "models/layers.h"
#include "models/llm.h"
#include "models/vision_encoder.h"
#include "tests/testing/models.h"

namespace tandem::models {
namespace {

const c10::Device kGpu(c10::kCUDA, 0);

class ModelsCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
    torch::manual_seed(0);
  }
};

double MaxError(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(c10::kCPU).to(torch::kDouble) - b.to(c10::kCPU).to(torch::kDouble))
      .abs()
      .max()
      .item<double>();
}

// The output of `run` and the gradient of sum(output * upstream) for every parameter of `module`,
// on the device and in the dtype the module is in now; inputs are moved there.
struct Pass {
  at::Tensor output;
  torch::OrderedDict<std::string, at::Tensor> grads;
};

template <typename Module, typename Run>
Pass RunPass(Module& module, const at::Tensor& upstream, Run run) {
  for (auto& parameter : module->parameters()) parameter.mutable_grad() = at::Tensor();
  Pass pass;
  pass.output = run();
  (pass.output.to(torch::kFloat) * upstream.to(pass.output.device())).sum().backward();
  for (const auto& item : module->named_parameters()) {
    pass.grads.insert(item.key(), item.value().grad().defined()
                                      ? item.value().grad().to(c10::kCPU).clone()
                                      : at::Tensor());
  }
  return pass;
}

void ExpectFp32Close(const Pass& gpu, const Pass& cpu, const std::string& what) {
  EXPECT_LE(testing::ToleranceRatio(gpu.output.to(c10::kCPU), cpu.output, 1e-5, 1e-4), 1.0)
      << what << " output";
  for (const auto& item : cpu.grads) {
    const at::Tensor& want = item.value();
    const at::Tensor got = gpu.grads[item.key()];
    ASSERT_EQ(got.defined(), want.defined()) << what << " " << item.key();
    if (!want.defined()) continue;
    EXPECT_LE(testing::ToleranceRatio(got, want, 1e-5, 1e-4), 1.0)
        << what << " gradient of " << item.key();
  }
}

void ExpectBf16Bounded(const Pass& gpu, const Pass& cpu, const Pass& reference,
                       const std::string& what) {
  EXPECT_EQ(gpu.output.scalar_type(), torch::kBFloat16) << what;
  EXPECT_LE(MaxError(gpu.output, reference.output),
            2 * MaxError(cpu.output, reference.output) + 1e-3)
      << what << " output";
  for (const auto& item : reference.grads) {
    if (!item.value().defined()) continue;
    const double gpu_error = MaxError(gpu.grads[item.key()], item.value());
    const double cpu_error = MaxError(cpu.grads[item.key()], item.value());
    EXPECT_LE(gpu_error, 2 * cpu_error + 1e-3) << what << " gradient of " << item.key();
  }
}

TEST_F(ModelsCudaTest, FusedRmsNormMatchesTheWrittenOutForm) {
  RmsNorm norm(96, 1e-6);
  {
    torch::NoGradGuard no_grad;
    norm->weight.copy_(1.0 + 0.1 * torch::randn({96}));
  }
  const at::Tensor x = torch::randn({3, 5, 96}) * 3.0, upstream = torch::randn({3, 5, 96});
  const Pass cpu = RunPass(norm, upstream, [&] { return norm(x); });
  norm->to(kGpu);
  const Pass gpu = RunPass(norm, upstream, [&] { return norm(x.to(kGpu)); });
  ExpectFp32Close(gpu, cpu, "fp32");

  norm->to(torch::kBFloat16);
  const Pass gpu_bf16 = RunPass(norm, upstream, [&] { return norm(x.to(kGpu, torch::kBFloat16)); });
  norm->to(c10::kCPU);
  const Pass cpu_bf16 = RunPass(norm, upstream, [&] { return norm(x.to(torch::kBFloat16)); });
  ExpectBf16Bounded(gpu_bf16, cpu_bf16, cpu, "bf16");
}

LlmConfig GqaConfig() {
  LlmConfig c;
  c.hidden = 64;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;  // two query heads a KV head: enable_gqa on the GPU, repeated on the CPU
  c.mlp_hidden = 96;
  c.vocab_size = 50;
  c.max_seq_len = 64;
  c.attention_bias = true;
  return c;
}

TEST_F(ModelsCudaTest, GroupedQueryLlmMatchesTheCpu) {
  Llm llm(GqaConfig());
  const at::Tensor tokens = torch::randint(50, {2, 9}, torch::kLong);
  const at::Tensor prefix = torch::randn({2, 6, 64});
  const at::Tensor upstream = torch::randn({2, 9, 50});
  const Pass cpu = RunPass(llm, upstream, [&] { return llm->forward(prefix, tokens); });
  llm->to(kGpu);
  const Pass gpu =
      RunPass(llm, upstream, [&] { return llm->forward(prefix.to(kGpu), tokens.to(kGpu)); });
  ExpectFp32Close(gpu, cpu, "fp32");

  llm->to(torch::kBFloat16);
  const auto run_bf16 = [&](c10::Device device) {
    return RunPass(llm, upstream, [&] {
      return llm->forward(prefix.to(device, torch::kBFloat16), tokens.to(device));
    });
  };
  const Pass gpu_bf16 = run_bf16(kGpu);
  llm->to(c10::kCPU);
  const Pass cpu_bf16 = run_bf16(c10::kCPU);
  ExpectBf16Bounded(gpu_bf16, cpu_bf16, cpu, "bf16");
}

TEST_F(ModelsCudaTest, VisionEncoderMatchesTheCpu) {
  for (const bool class_token : {false, true}) {
    VisionConfig c;
    c.image_size = 16;
    c.patch_size = 4;
    c.hidden = 64;
    c.layers = 2;
    c.heads = 4;
    c.mlp_hidden = 96;
    c.output_dim = 48;
    c.class_token = class_token;
    c.pre_norm = class_token;  // CLIP's
    c.final_norm = !class_token;
    VisionEncoder vision(c);
    const at::Tensor images = torch::rand({2, 3, 16, 16});
    const int64_t positions = 16 + (class_token ? 1 : 0);
    const at::Tensor upstream = torch::randn({2, positions, 48});
    const std::string what = class_token ? "class token" : "patches only";
    const Pass cpu = RunPass(vision, upstream, [&] { return vision->forward(images); });
    ASSERT_EQ(cpu.output.size(1), positions) << what;
    vision->to(kGpu);
    const Pass gpu = RunPass(vision, upstream, [&] { return vision->forward(images.to(kGpu)); });
    ExpectFp32Close(gpu, cpu, what + ", fp32");
  }
}

}  // namespace
}  // namespace tandem::models
