// The CUDA AdamW kernel (kernels/adamw_cuda.cu) against the CPU kernel, which tests/kernels/
// adamw_test.cc checks against torch::optim. Both run every fp32 operation rounded to nearest in
// the same order (NOTE [AdamW element update] in kernels/adamw_cpu.cc) and share the bf16
// conversions and the counter-based random numbers (kernels/bf16.h), so the demand is bit equality:
// every weight, master, moment and Kahan compensation the same bits after every step, for every
// combination of dtypes and roundings the engine uses. Needs a CUDA device; skipped without one.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/adamw.h"

namespace tandem::kernels {
namespace {

#ifdef TANDEM_HAVE_CUDA_KERNELS

// More elements than one pass of the grid (SMs x 8 blocks x 256 threads), and not a multiple of a
// block, so the grid-stride loop and the tail run.
constexpr int64_t kElements = (int64_t{1} << 21) + 77;
constexpr int kSteps = 3;

struct Case {
  c10::ScalarType param = at::kFloat;
  bool master = false;
  c10::ScalarType grad = at::kFloat;
  c10::ScalarType state = at::kFloat;
  Rounding state_rounding = Rounding::kNearest;
  Rounding rounding = Rounding::kNearest;
  bool decoupled = true;
};

const char* Name(c10::ScalarType t) { return t == at::kBFloat16 ? "bf16" : "fp32"; }
const char* Name(Rounding r) {
  return r == Rounding::kKahan ? "kahan" : r == Rounding::kStochastic ? "stochastic" : "nearest";
}
std::string Describe(const Case& c) {
  return std::string("param ") + Name(c.param) + (c.master ? " + fp32 master" : "") + ", grad " +
         Name(c.grad) + ", states " + Name(c.state) + " " + Name(c.state_rounding) + ", update " +
         Name(c.rounding) + (c.decoupled ? ", AdamW" : ", Adam");
}

Dtype DtypeOf(c10::ScalarType t) { return t == at::kBFloat16 ? Dtype::kBFloat16 : Dtype::kFloat32; }

// One copy of every buffer a step touches, on one device.
struct Buffers {
  at::Tensor param, master, grad, exp_avg, exp_avg_sq, compensation;

  Buffers To(const c10::Device& device) const {
    auto to = [&](const at::Tensor& t) { return t.defined() ? t.to(device).clone() : t; };
    return {to(param), to(master), to(grad), to(exp_avg), to(exp_avg_sq), to(compensation)};
  }
  AdamWBuffers View(const Case& c, uint64_t seed) {
    AdamWBuffers b;
    b.param = param.data_ptr();
    b.param_dtype = DtypeOf(c.param);
    b.master = master.defined() ? master.data_ptr<float>() : nullptr;
    b.grad = grad.data_ptr();
    b.grad_dtype = DtypeOf(c.grad);
    b.exp_avg = exp_avg.data_ptr();
    b.exp_avg_sq = exp_avg_sq.data_ptr();
    b.state_dtype = DtypeOf(c.state);
    b.state_rounding = c.state_rounding;
    b.compensation = compensation.defined()
                         ? reinterpret_cast<uint16_t*>(compensation.data_ptr<at::BFloat16>())
                         : nullptr;
    b.n = param.numel();
    b.rounding = c.rounding;
    b.seed = seed;
    b.seed_offset = 1000003;  // a partition that does not start at element 0
    return b;
  }
};

// Bit equality of two tensors of one dtype, with the first differing element named.
void ExpectSameBits(const at::Tensor& gpu, const at::Tensor& cpu, const std::string& what) {
  if (!cpu.defined()) return;
  const at::Tensor a = gpu.cpu().contiguous();
  const at::Tensor bits_a =
      a.scalar_type() == at::kBFloat16 ? a.view(at::kShort) : a.view(at::kInt);
  const at::Tensor bits_b =
      cpu.scalar_type() == at::kBFloat16 ? cpu.view(at::kShort) : cpu.view(at::kInt);
  const at::Tensor differ = bits_a != bits_b;
  const int64_t count = differ.sum().item<int64_t>();
  if (count == 0) return;
  const int64_t i = differ.nonzero()[0][0].item<int64_t>();
  ADD_FAILURE() << what << ": " << count << " of " << a.numel() << " elements differ; first at "
                << i << ": GPU " << a[i].item<double>() << ", CPU " << cpu[i].item<double>();
}

void CompareSteps(const Case& c) {
  SCOPED_TRACE(Describe(c));
  torch::manual_seed(17);
  Buffers cpu;
  cpu.param = (torch::randn({kElements}) * 0.5).to(c.param);
  if (c.master) cpu.master = cpu.param.to(at::kFloat) + torch::randn({kElements}) * 1e-3;
  cpu.exp_avg = (torch::randn({kElements}) * 1e-2).to(c.state);
  cpu.exp_avg_sq = (torch::rand({kElements}) * 1e-4).to(c.state);
  if (c.rounding == Rounding::kKahan) cpu.compensation = torch::zeros({kElements}, at::kBFloat16);
  AdamWHyper h;
  h.lr = 3e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.999f;
  h.eps = 1e-8f;
  h.weight_decay = 0.05f;
  h.decoupled = c.decoupled;
  h.grad_scale = 0.7f;
  Buffers gpu = cpu.To(c10::Device(c10::kCUDA, 0));
  for (int step = 1; step <= kSteps; ++step) {
    h.step = step;
    cpu.grad = torch::randn({kElements}).to(c.grad);
    gpu.grad = cpu.grad.to(c10::Device(c10::kCUDA, 0));
    const uint64_t seed = 0x5eed0000u + static_cast<uint64_t>(step);
    AdamWCpu(cpu.View(c, seed), h, /*threads=*/0);
    // The default stream: the copies back to the host below are ordered after it.
    ASSERT_EQ(AdamWCuda(gpu.View(c, seed), h, /*stream=*/nullptr), 0) << "the launch failed";
    const std::string at = " after step " + std::to_string(step);
    ExpectSameBits(gpu.param, cpu.param, "param" + at);
    ExpectSameBits(gpu.master, cpu.master, "master" + at);
    ExpectSameBits(gpu.exp_avg, cpu.exp_avg, "exp_avg" + at);
    ExpectSameBits(gpu.exp_avg_sq, cpu.exp_avg_sq, "exp_avg_sq" + at);
    ExpectSameBits(gpu.compensation, cpu.compensation, "compensation" + at);
  }
}

class AdamWCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(AdamWCudaTest, Fp32EqualsCpuBitForBit) {
  for (bool decoupled : {true, false}) {
    Case c;
    c.decoupled = decoupled;
    CompareSteps(c);
  }
}

TEST_F(AdamWCudaTest, Bf16ParamsWithFp32MasterEqualCpuBitForBit) {
  for (c10::ScalarType grad : {at::kFloat, at::kBFloat16}) {
    Case c;
    c.param = at::kBFloat16;
    c.master = true;
    c.grad = grad;
    CompareSteps(c);
  }
}

// bf16_master_weights_and_grads with bf16_optimizer_states: the engine's 8-byte mode, under each
// rounding of the update and of the moments.
TEST_F(AdamWCudaTest, Bf16MastersAndStatesEqualCpuBitForBitUnderEveryRounding) {
  for (Rounding rounding : {Rounding::kNearest, Rounding::kKahan, Rounding::kStochastic}) {
    for (Rounding state_rounding : {Rounding::kNearest, Rounding::kStochastic}) {
      Case c;
      c.param = at::kBFloat16;
      c.grad = at::kBFloat16;
      c.state = at::kBFloat16;
      c.rounding = rounding;
      c.state_rounding = state_rounding;
      CompareSteps(c);
    }
  }
}

TEST_F(AdamWCudaTest, Bf16MastersWithFp32StatesAndAdamEqualCpuBitForBit) {
  Case c;
  c.param = at::kBFloat16;
  c.grad = at::kBFloat16;
  c.rounding = Rounding::kKahan;
  c.decoupled = false;
  CompareSteps(c);
}

#else

TEST(AdamWCudaTest, NotBuilt) { GTEST_SKIP() << "built without the CUDA kernels"; }

#endif  // TANDEM_HAVE_CUDA_KERNELS

}  // namespace
}  // namespace tandem::kernels
