// Checks the fused Adam/AdamW CPU kernel (kernels/adamw.h) against torch::optim::AdamW / Adam and a
// scalar reference, and SumOfSquaresCpu against torch. LibTorch only builds data and references.
//
// Tolerances are atol + rtol * |ref|, rtol tied to the dtype: kFp32Rtol (about 8 fp32 ulps) where
// the kernel runs the same fp32 operations as torch, and exact equality where the reference
// performs the very same operations in the same order (the scalar bf16 reference).
#include "kernels/adamw.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "engine/compat.h"
#include "kernels/bf16.h"

namespace tandem::kernels {
namespace {

constexpr double kFp32Atol = 1e-6;
constexpr double kFp32Rtol = 1e-6;
constexpr double kBf16SpacingBelow1 = 1.0 / 256;  // between bf16 values in [0.5, 1)
constexpr double kBf16SpacingAbove1 = 1.0 / 128;  // in [1, 2)
constexpr int64_t kOddSize = 10007;  // not a multiple of the kernel's chunk or block size

// Expects |actual - expected| <= atol + rtol * |expected| everywhere (NaN fails).
void ExpectClose(const at::Tensor& actual, const at::Tensor& expected, double atol, double rtol,
                 const std::string& what) {
  ASSERT_EQ(actual.numel(), expected.numel()) << what;
  const at::Tensor a = actual.to(torch::kDouble).flatten();
  const at::Tensor e = expected.to(torch::kDouble).flatten();
  const at::Tensor bad = ((a - e).abs() <= atol + rtol * e.abs()).logical_not();
  const int64_t num_bad = bad.sum().item<int64_t>();
  if (num_bad == 0) return;
  const int64_t i = bad.nonzero()[0][0].item<int64_t>();
  ADD_FAILURE() << what << ": " << num_bad << " of " << a.numel()
                << " elements out of tolerance; first at " << i << ": actual "
                << a[i].item<double>() << ", expected " << e[i].item<double>();
}

void ExpectEqual(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  ExpectClose(actual, expected, 0.0, 0.0, what);
}

Dtype DtypeOf(const at::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 ? Dtype::kBFloat16 : Dtype::kFloat32;
}

// Buffers over tensors of equal length; `master` and `compensation` may be undefined.
AdamWBuffers MakeBuffers(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg,
                         at::Tensor& exp_avg_sq, at::Tensor* master = nullptr,
                         at::Tensor* compensation = nullptr) {
  AdamWBuffers b;
  b.param = param.data_ptr();
  b.param_dtype = DtypeOf(param);
  b.master = master ? master->data_ptr<float>() : nullptr;
  b.grad = grad.data_ptr();
  b.grad_dtype = DtypeOf(grad);
  b.exp_avg = exp_avg.data_ptr();
  b.exp_avg_sq = exp_avg_sq.data_ptr();
  b.state_dtype = DtypeOf(exp_avg);
  b.compensation =
      compensation ? reinterpret_cast<uint16_t*>(compensation->data_ptr<at::BFloat16>()) : nullptr;
  b.n = param.numel();
  return b;
}

AdamWHyper TestHyper(bool decoupled) {
  AdamWHyper h;
  h.lr = 1e-2f;
  h.beta1 = 0.9f;
  h.beta2 = 0.99f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  h.decoupled = decoupled;
  return h;
}

// torch::optim takes doubles: pass the kernel's float hyperparameters exactly.
template <class Options>
Options TorchOptions(const AdamWHyper& h) {
  return Options(h.lr)
      .betas(std::make_tuple(static_cast<double>(h.beta1), static_cast<double>(h.beta2)))
      .eps(h.eps)
      .weight_decay(h.weight_decay);
}

at::Tensor Zeros(int64_t n, c10::ScalarType dtype) { return torch::zeros({n}, dtype); }

// Runs `steps` steps of the kernel (fp32 param, fp32 grad and states, `threads` threads) next to
// torch's optimizer on the same data, checking the weights and moments after every step.
template <class TorchOptimizer, class Options, class ParamState>
void CompareWithTorch(bool decoupled, float grad_scale, int threads) {
  torch::manual_seed(1);
  AdamWHyper h = TestHyper(decoupled);
  h.grad_scale = grad_scale;
  const at::Tensor init = torch::randn({kOddSize});
  at::Tensor torch_param = init.clone().requires_grad_(true);
  TorchOptimizer opt({torch_param}, TorchOptions<Options>(h));
  at::Tensor w = init.clone();
  at::Tensor m = Zeros(kOddSize, torch::kFloat);
  at::Tensor v = Zeros(kOddSize, torch::kFloat);
  for (int step = 1; step <= 5; ++step) {
    const at::Tensor grad = torch::randn({kOddSize});
    // The kernel's g = grad * grad_scale, in fp32.
    torch_param.mutable_grad() = grad * grad_scale;
    opt.step();
    h.step = step;
    AdamWCpu(MakeBuffers(w, grad, m, v), h, threads);
    const std::string at_step = " at step " + std::to_string(step);
    ExpectClose(w, torch_param.detach(), kFp32Atol, kFp32Rtol, "param" + at_step);
    const auto& state = static_cast<const ParamState&>(
        *opt.state().at(compat::OptimizerStateKey(opt.state(), torch_param)));
    ExpectClose(m, state.exp_avg(), kFp32Atol, kFp32Rtol, "exp_avg" + at_step);
    ExpectClose(v, state.exp_avg_sq(), kFp32Atol, kFp32Rtol, "exp_avg_sq" + at_step);
  }
}

TEST(AdamWCpu, Fp32MatchesTorchAdamW) {
  CompareWithTorch<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
      /*decoupled=*/true, /*grad_scale=*/1.0f, /*threads=*/2);
}

TEST(AdamWCpu, Fp32MatchesTorchAdamWithCoupledWeightDecay) {
  CompareWithTorch<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState>(
      /*decoupled=*/false, /*grad_scale=*/1.0f, /*threads=*/2);
}

TEST(AdamWCpu, GradScaleMultipliesEveryGradient) {
  CompareWithTorch<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
      /*decoupled=*/true, /*grad_scale=*/0.37f, /*threads=*/1);
  CompareWithTorch<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState>(
      /*decoupled=*/false, /*grad_scale=*/0.37f, /*threads=*/2);
}

// Classic mixed precision: fp32 master, bf16 param, fp32 states, fp32 or bf16 gradients.
TEST(AdamWCpu, MasterWeightsMatchFp32AndParamIsMasterRoundedToNearest) {
  for (const auto grad_dtype : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(grad_dtype == torch::kFloat ? "fp32 grad" : "bf16 grad");
    torch::manual_seed(2);
    AdamWHyper h = TestHyper(/*decoupled=*/true);
    const at::Tensor init = torch::randn({kOddSize});
    at::Tensor torch_param = init.clone().requires_grad_(true);
    torch::optim::AdamW opt({torch_param}, TorchOptions<torch::optim::AdamWOptions>(h));
    at::Tensor master = init.clone();
    at::Tensor param = init.to(torch::kBFloat16);
    at::Tensor m = Zeros(kOddSize, torch::kFloat);
    at::Tensor v = Zeros(kOddSize, torch::kFloat);
    for (int step = 1; step <= 5; ++step) {
      const at::Tensor grad = torch::randn({kOddSize}).to(grad_dtype);
      torch_param.mutable_grad() = grad.to(torch::kFloat);
      opt.step();
      h.step = step;
      AdamWCpu(MakeBuffers(param, grad, m, v, &master), h, /*threads=*/2);
    }
    ExpectClose(master, torch_param.detach(), kFp32Atol, kFp32Rtol, "master");
    ExpectEqual(param, master.to(torch::kBFloat16), "param vs master rounded to nearest");
  }
}

// A straightforward scalar reference for a bf16 param that is its own master, bf16 grad and bf16
// moments, rounded to nearest: the header's formulas, one element at a time.
void ReferenceBf16Step(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg,
                       at::Tensor& exp_avg_sq, const AdamWHyper& h) {
  auto* w = reinterpret_cast<uint16_t*>(param.data_ptr<at::BFloat16>());
  const auto* g = reinterpret_cast<const uint16_t*>(grad.data_ptr<at::BFloat16>());
  auto* m = reinterpret_cast<uint16_t*>(exp_avg.data_ptr<at::BFloat16>());
  auto* v = reinterpret_cast<uint16_t*>(exp_avg_sq.data_ptr<at::BFloat16>());
  const double bias_correction1 = 1.0 - std::pow(double{h.beta1}, static_cast<double>(h.step));
  const double bias_correction2 = 1.0 - std::pow(double{h.beta2}, static_cast<double>(h.step));
  const auto step_size = static_cast<float>(h.lr / bias_correction1);
  const auto sqrt_bc2 = static_cast<float>(std::sqrt(bias_correction2));
  const auto one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  const auto one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  const auto decay = static_cast<float>(1.0 - double{h.lr} * h.weight_decay);
  for (int64_t i = 0; i < param.numel(); ++i) {
    float gi = Bf16ToFloat(g[i]) * h.grad_scale;
    float wi = Bf16ToFloat(w[i]);
    if (!h.decoupled) gi = gi + h.weight_decay * wi;
    const float mi = h.beta1 * Bf16ToFloat(m[i]) + one_minus_beta1 * gi;
    const float vi = h.beta2 * Bf16ToFloat(v[i]) + (one_minus_beta2 * gi) * gi;
    if (h.decoupled) wi = wi * decay;
    wi = wi - (step_size * mi) / (std::sqrt(vi) / sqrt_bc2 + h.eps);
    w[i] = FloatToBf16Nearest(wi);
    m[i] = FloatToBf16Nearest(mi);
    v[i] = FloatToBf16Nearest(vi);
  }
}

TEST(AdamWCpu, Bf16NearestWithBf16MomentsEqualsScalarReference) {
  for (const bool decoupled : {true, false}) {
    SCOPED_TRACE(decoupled ? "AdamW" : "Adam");
    torch::manual_seed(3);
    AdamWHyper h = TestHyper(decoupled);
    h.grad_scale = 0.5f;
    const at::Tensor init = torch::randn({kOddSize}).to(torch::kBFloat16);
    at::Tensor param = init.clone();
    at::Tensor m = Zeros(kOddSize, torch::kBFloat16);
    at::Tensor v = Zeros(kOddSize, torch::kBFloat16);
    at::Tensor ref_param = param.clone();
    at::Tensor ref_m = m.clone();
    at::Tensor ref_v = v.clone();
    for (int step = 1; step <= 5; ++step) {
      const at::Tensor grad = torch::randn({kOddSize}).to(torch::kBFloat16);
      h.step = step;
      AdamWBuffers b = MakeBuffers(param, grad, m, v);
      b.rounding = Rounding::kNearest;
      AdamWCpu(b, h, /*threads=*/2);
      ReferenceBf16Step(ref_param, grad, ref_m, ref_v, h);
    }
    // Same operations in the same order, no FMA contraction on either side: bit-identical.
    ExpectEqual(param, ref_param, "param");
    ExpectEqual(m, ref_m, "exp_avg");
    ExpectEqual(v, ref_v, "exp_avg_sq");
    EXPECT_FALSE(torch::equal(param, init));
  }
}

// One AdamW step on `n` elements that all start at w = 1 with gradient 1: every element's exact
// update is the same fp32 value x, which lies between the bf16 values 1 - 2^-8 and 1.
struct StochasticRun {
  at::Tensor param;
  float exact;  // the fp32 result, from the kernel with an fp32 param
};

StochasticRun RunStochastic(int64_t n, uint64_t seed, int threads) {
  AdamWHyper h;
  h.lr = 1.2e-3f;  // about 0.31 of the bf16 spacing below 1
  AdamWBuffers b;
  at::Tensor grad = torch::ones({n});
  at::Tensor m = Zeros(n, torch::kFloat);
  at::Tensor v = Zeros(n, torch::kFloat);
  StochasticRun run;
  run.param = torch::ones({n}, torch::kBFloat16);
  b = MakeBuffers(run.param, grad, m, v);
  b.rounding = Rounding::kStochastic;
  b.seed = seed;
  AdamWCpu(b, h, threads);
  at::Tensor exact = torch::ones({1});
  at::Tensor g1 = torch::ones({1});
  at::Tensor m1 = Zeros(1, torch::kFloat);
  at::Tensor v1 = Zeros(1, torch::kFloat);
  AdamWCpu(MakeBuffers(exact, g1, m1, v1), h, 1);
  run.exact = exact.item<float>();
  return run;
}

TEST(AdamWCpu, StochasticRoundingIsUnbiased) {
  const int64_t n = int64_t{1} << 20;
  const StochasticRun run = RunStochastic(n, /*seed=*/42, /*threads=*/2);
  const float below = 1.0f - static_cast<float>(kBf16SpacingBelow1);
  ASSERT_GT(run.exact, below);
  ASSERT_LT(run.exact, 1.0f);
  const at::Tensor values = run.param.to(torch::kFloat);
  // Only the two neighbours of the exact value occur.
  EXPECT_EQ(((values == below).logical_or(values == 1.0f)).sum().item<int64_t>(), n);
  // P(round down) = (1 - x) / 2^-8 ~= 0.31; the mean of n draws has standard deviation
  // 2^-8 * sqrt(p (1 - p) / n) ~= 1.8e-6. Allow 1e-5 (5.7 sigma).
  const double mean = values.to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(mean, run.exact, 1e-5);
}

TEST(AdamWCpu, StochasticRoundingDependsOnSeedOnly) {
  const int64_t n = kOddSize;
  const at::Tensor two_threads = RunStochastic(n, 7, /*threads=*/2).param;
  ExpectEqual(RunStochastic(n, 7, /*threads=*/1).param, two_threads, "threads=1 vs threads=2");
  ExpectEqual(RunStochastic(n, 7, /*threads=*/2).param, two_threads, "same seed");
  // With p ~= 0.31 two independent roundings differ with probability 2 p (1 - p) ~= 0.43.
  const int64_t differ = (RunStochastic(n, 8, 2).param != two_threads).sum().item<int64_t>();
  EXPECT_GT(differ, n / 3);
}

TEST(AdamWCpu, StochasticRoundingSeedOffsetSplitsOneStream) {
  const int64_t n = kOddSize;
  const int64_t half = 5000;
  const at::Tensor whole = RunStochastic(n, 9, 2).param;
  // The same update in two partitions whose seed_offset is their first global index.
  AdamWHyper h;
  h.lr = 1.2e-3f;
  at::Tensor param = torch::ones({n}, torch::kBFloat16);
  at::Tensor grad = torch::ones({n});
  at::Tensor m = Zeros(n, torch::kFloat);
  at::Tensor v = Zeros(n, torch::kFloat);
  for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, half}, {half, n}}) {
    at::Tensor p = param.slice(0, begin, end);
    at::Tensor mp = m.slice(0, begin, end);
    at::Tensor vp = v.slice(0, begin, end);
    AdamWBuffers b = MakeBuffers(p, grad.slice(0, begin, end), mp, vp);
    b.rounding = Rounding::kStochastic;
    b.seed = 9;
    b.seed_offset = static_cast<uint64_t>(begin);
    AdamWCpu(b, h, 2);
  }
  ExpectEqual(param, whole, "two partitions vs one");
}

// 2000 AdamW steps of about lr = 1e-5 each on w = 1, where bf16 values are 2^-8 apart below 1 and
// 2^-7 above: each update is 1/390 to 1/780 of the spacing. Gradients are constant per element
// (random sign and size), so the fp32 reference drifts by about 2000 * 1e-5 = 0.02 up or down.
class SmallUpdatesTest : public ::testing::Test {
 protected:
  static constexpr int64_t kN = 4096;
  static constexpr int kSteps = 2000;

  void SetUp() override {
    torch::manual_seed(5);
    grad_ = (torch::rand({kN}) + 0.5) * torch::randn({kN}).sign();
    h_.lr = 1e-5f;
    h_.weight_decay = 0.0f;
    // fp32 reference: the same kernel with an fp32 param (checked against torch above).
    reference_ = torch::ones({kN});
    at::Tensor m = Zeros(kN, torch::kFloat);
    at::Tensor v = Zeros(kN, torch::kFloat);
    for (int step = 1; step <= kSteps; ++step) {
      h_.step = step;
      AdamWCpu(MakeBuffers(reference_, grad_, m, v), h_, 2);
    }
  }

  // Runs the steps on a bf16 param starting at 1; returns it as fp32 (and the compensation).
  at::Tensor RunBf16(Rounding rounding, at::Tensor* compensation_out = nullptr) {
    at::Tensor param = torch::ones({kN}, torch::kBFloat16);
    at::Tensor compensation = Zeros(kN, torch::kBFloat16);
    at::Tensor m = Zeros(kN, torch::kFloat);
    at::Tensor v = Zeros(kN, torch::kFloat);
    for (int step = 1; step <= kSteps; ++step) {
      h_.step = step;
      AdamWBuffers b = MakeBuffers(param, grad_, m, v, nullptr, &compensation);
      b.rounding = rounding;
      b.seed = 1000 + static_cast<uint64_t>(step);  // a fresh stream every step
      AdamWCpu(b, h_, 2);
    }
    if (compensation_out) *compensation_out = compensation.to(torch::kFloat);
    return param.to(torch::kFloat);
  }

  AdamWHyper h_;
  at::Tensor grad_;
  at::Tensor reference_;
};

TEST_F(SmallUpdatesTest, Fp32ReferenceMovesByManyBf16Spacings) {
  const double drift = (reference_ - 1.0).abs().min().item<double>();
  EXPECT_GT(drift, 2 * kBf16SpacingAbove1);  // about 0.02: 2.5 to 5 spacings for every element
}

TEST_F(SmallUpdatesTest, NearestRoundingLosesEveryUpdate) {
  ExpectEqual(RunBf16(Rounding::kNearest), torch::ones({kN}), "param stuck at 1");
}

TEST_F(SmallUpdatesTest, KahanTracksFp32Reference) {
  at::Tensor compensation;
  const at::Tensor param = RunBf16(Rounding::kKahan, &compensation);
  const at::Tensor drift = (reference_ - 1.0).abs();
  // The param stays within half a bf16 spacing above 1 (3.9e-3) of the reference; measured worst
  // case 3.4e-3.
  ExpectClose(param, reference_, 0.5 * kBf16SpacingAbove1, 0.0, "Kahan param");
  // param + compensation follows the drift to within 15% (measured 12%, the same for every
  // element): near |c| ~ 2e-3 the bf16 compensation resolves ~1e-5, the size of one update, so its
  // rounding loses part of each update. Nearest rounding loses 100%.
  const at::Tensor relative_error = (param + compensation - reference_).abs() / drift;
  EXPECT_LT(relative_error.max().item<double>(), 0.15);
}

TEST_F(SmallUpdatesTest, StochasticRoundingTracksFp32Reference) {
  const at::Tensor error = RunBf16(Rounding::kStochastic) - reference_;
  // Unbiased: each element is a martingale around the reference, with per-step variance about
  // update * spacing, so after 2000 steps its deviation is ~sqrt(2000 * 1e-5 * 2^-7) ~= 1.3e-2
  // (measured rms 1.1e-2). The mean over 4096 elements then has sigma ~1.7e-4: bound it by 1e-3
  // (5% of the 0.02 drift; measured 1.3e-5), and the rms by 1.5e-2.
  EXPECT_NEAR(error.mean().item<double>(), 0.0, 1e-3);
  EXPECT_LT(error.square().mean().sqrt().item<double>(), 1.5e-2);
}

// bf16 moments under zero gradients: v = beta2 * v with beta2 = 0.999 moves v by 0.1% a step, below
// half a bf16 spacing of v (0.2% to 0.4% relative), so a v rounded to nearest never falls. Rounded
// stochastically it decays as beta2^steps in expectation.
at::Tensor DecaySecondMoment(Rounding state_rounding, int steps) {
  constexpr int64_t kN = 4096;
  AdamWHyper h;  // beta2 = 0.999
  h.lr = 0.0f;
  at::Tensor param = torch::ones({kN}, torch::kBFloat16);
  at::Tensor grad = Zeros(kN, torch::kBFloat16);
  at::Tensor m = Zeros(kN, torch::kBFloat16);
  at::Tensor v = torch::ones({kN}, torch::kBFloat16);
  for (int step = 1; step <= steps; ++step) {
    h.step = step;
    AdamWBuffers b = MakeBuffers(param, grad, m, v);
    b.state_rounding = state_rounding;
    b.seed = CounterRandom(11, static_cast<uint64_t>(step));
    AdamWCpu(b, h, 2);
  }
  return v.to(torch::kDouble);
}

TEST(AdamWCpu, Bf16SecondMomentRoundedToNearestNeverDecays) {
  ExpectEqual(DecaySecondMoment(Rounding::kNearest, 500), torch::ones({4096}), "v stuck at 1");
}

TEST(AdamWCpu, Bf16SecondMomentRoundedStochasticallyDecaysAsBeta2PowerSteps) {
  const at::Tensor v = DecaySecondMoment(Rounding::kStochastic, 1000);
  const double expected = std::pow(0.999, 1000);  // 0.368
  // Each element is a martingale around beta2^t; the mean of 4096 stays within 2% of it (measured
  // below 0.3%), against 172% off when rounded to nearest.
  EXPECT_NEAR(v.mean().item<double>(), expected, 0.02 * expected);
  EXPECT_LT(v.max().item<double>(), 0.6);  // every element fell, none is stuck near 1
}

TEST(AdamWCpu, StochasticMomentsDrawStreamsApartFromTheWeights) {
  // Same seed for the weights' and the moments' rounding: the draws must still be independent, or
  // a weight and its moment would round up together.
  constexpr int64_t kN = 8192;
  AdamWHyper h;
  h.lr = 1.2e-3f;
  at::Tensor param = torch::ones({kN}, torch::kBFloat16);
  at::Tensor grad = torch::ones({kN});
  at::Tensor m = Zeros(kN, torch::kBFloat16);
  at::Tensor v = Zeros(kN, torch::kBFloat16);
  AdamWBuffers b = MakeBuffers(param, grad, m, v);
  b.rounding = Rounding::kStochastic;
  b.state_rounding = Rounding::kStochastic;
  b.seed = 5;
  AdamWCpu(b, h, 2);
  const at::Tensor w_up = param.to(torch::kFloat) == 1.0f;
  const at::Tensor m_up = m.to(torch::kFloat) > 0.1f;  // m = 0.1 exactly is not a bf16 value
  const double p_w = w_up.to(torch::kDouble).mean().item<double>();
  const double p_m = m_up.to(torch::kDouble).mean().item<double>();
  const double p_both = w_up.logical_and(m_up).to(torch::kDouble).mean().item<double>();
  ASSERT_GT(p_w, 0.1);
  ASSERT_GT(p_m, 0.1);
  // Independent draws: P(both) = P(w) P(m), within 0.03 (sigma ~0.005 at 8192 elements).
  EXPECT_NEAR(p_both, p_w * p_m, 0.03);
}

// Weight decay alone (zero gradients) on bf16 weights at 1: lr * weight_decay = 1e-5 a step is
// 1/390 of the bf16 spacing below 1, so a weight rounded to nearest never moves, while Kahan and
// stochastic rounding follow (1 - 1e-5)^t.
at::Tensor DecayWeights(Rounding rounding, int steps) {
  constexpr int64_t kN = 4096;
  AdamWHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 1e-2f;
  at::Tensor param = torch::ones({kN}, torch::kBFloat16);
  at::Tensor grad = Zeros(kN, torch::kBFloat16);
  at::Tensor m = Zeros(kN, torch::kBFloat16);
  at::Tensor v = Zeros(kN, torch::kBFloat16);
  at::Tensor compensation = Zeros(kN, torch::kBFloat16);
  for (int step = 1; step <= steps; ++step) {
    h.step = step;
    AdamWBuffers b = MakeBuffers(param, grad, m, v, nullptr, &compensation);
    b.rounding = rounding;
    b.seed = CounterRandom(13, static_cast<uint64_t>(step));
    AdamWCpu(b, h, 2);
  }
  return param.to(torch::kDouble);
}

TEST(AdamWCpu, WeightDecayActsOnBf16WeightsOnlyWithKahanOrStochasticRounding) {
  constexpr int kSteps = 2000;
  const double expected = std::pow(1.0 - 1e-5, kSteps);  // 0.9802
  ExpectEqual(DecayWeights(Rounding::kNearest, kSteps), torch::ones({4096}), "nearest: stuck at 1");
  // Kahan: within half a bf16 spacing (2^-9) of the exact decay, every element.
  const at::Tensor kahan = DecayWeights(Rounding::kKahan, kSteps);
  EXPECT_LT((kahan - expected).abs().max().item<double>(), 1.0 / 512);
  // Stochastic: unbiased, the mean of 4096 within 1e-3 of it (measured a few 1e-5).
  EXPECT_NEAR(DecayWeights(Rounding::kStochastic, kSteps).mean().item<double>(), expected, 1e-3);
}

TEST(AdamWCpu, EmptyRangeIsANoOp) {
  AdamWBuffers b;
  AdamWCpu(b, AdamWHyper{}, 2);
  EXPECT_EQ(SumOfSquaresCpu(nullptr, Dtype::kFloat32, 0), 0.0);
}

TEST(SumOfSquaresCpu, MatchesTorchInDouble) {
  torch::manual_seed(6);
  // Sums of squares accumulate in double: rtol ~ n * 2^-53 for n ~ 1e6 is ~1e-10.
  constexpr double kDoubleAccumulationRtol = 1e-10;
  for (const int64_t n : {int64_t{1}, int64_t{7}, kOddSize, int64_t{1} << 20 | 13}) {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      SCOPED_TRACE("n = " + std::to_string(n) + (dtype == torch::kFloat ? " fp32" : " bf16"));
      const at::Tensor x = (torch::randn({n}) * 3).to(dtype);
      const double expected = x.to(torch::kDouble).square().sum().item<double>();
      const double one = SumOfSquaresCpu(x.data_ptr(), DtypeOf(x), n, 1);
      const double two = SumOfSquaresCpu(x.data_ptr(), DtypeOf(x), n, 2);
      EXPECT_NEAR(two, expected, kDoubleAccumulationRtol * expected);
      EXPECT_EQ(one, two);  // the split depends on n only
    }
  }
}

}  // namespace
}  // namespace tandem::kernels
