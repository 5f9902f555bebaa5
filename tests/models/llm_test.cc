// Tests of models/llm.h and of the shared layers in models/layers.h (RMSNorm, rotary embedding).
#include "models/llm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "engine/communicator.h"
#include "engine/compat.h"
#include "engine/engine.h"
#include "engine_config/config.h"
#include "models/layers.h"
#include "models/parameter_list.h"
#include "tests/testing/models.h"

namespace tandem::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

constexpr int64_t kPad = 0, kBos = 1, kEos = 2;

LlmConfig TinyConfig() {
  LlmConfig c;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp_hidden = 48;
  c.vocab_size = 20;
  c.max_seq_len = 32;
  return c;
}

std::vector<std::string> ParameterNames(const torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters()) names.push_back(item.key());
  return names;
}

class LlmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(0);
  }
};

TEST_F(LlmTest, ForwardReturnsLogitsOfTextPositionsOnly) {
  Llm llm(TinyConfig());
  const at::Tensor tokens = torch::randint(20, {2, 7}, torch::kLong);
  EXPECT_EQ(llm->forward(torch::randn({2, 5, 32}), tokens).sizes(),
            (std::vector<int64_t>{2, 7, 20}));
  EXPECT_EQ(llm->forward(at::Tensor(), tokens).sizes(), (std::vector<int64_t>{2, 7, 20}));
  EXPECT_EQ(llm->forward(torch::zeros({2, 0, 32}), tokens).sizes(),
            (std::vector<int64_t>{2, 7, 20}));
}

TEST_F(LlmTest, TextOnlyEqualsEmptyPrefix) {
  Llm llm(TinyConfig());
  const at::Tensor tokens = torch::randint(20, {2, 6}, torch::kLong);
  EXPECT_TRUE(torch::equal(llm->forward(at::Tensor(), tokens),
                           llm->forward(torch::zeros({2, 0, 32}), tokens)));
}

TEST_F(LlmTest, ParameterNamesOfOneLayerTiedModel) {
  auto config = TinyConfig();
  config.layers = 1;
  Llm llm(config);
  EXPECT_THAT(
      ParameterNames(*llm),
      ElementsAre("embed.weight", "blocks.0.attn_norm.weight", "blocks.0.attn.q.weight",
                  "blocks.0.attn.k.weight", "blocks.0.attn.v.weight", "blocks.0.attn.o.weight",
                  "blocks.0.mlp_norm.weight", "blocks.0.mlp.gate.weight", "blocks.0.mlp.up.weight",
                  "blocks.0.mlp.down.weight", "norm.weight"));
  std::vector<std::string> buffers;
  for (const auto& item : llm->named_buffers()) buffers.push_back(item.key());
  EXPECT_THAT(buffers, ElementsAre("rope_cos", "rope_sin"));
}

TEST_F(LlmTest, UntiedModelAddsHeadWeight) {
  auto config = TinyConfig();
  config.layers = 1;
  config.tie_embeddings = false;
  Llm llm(config);
  EXPECT_THAT(
      ParameterNames(*llm),
      ElementsAre("embed.weight", "blocks.0.attn_norm.weight", "blocks.0.attn.q.weight",
                  "blocks.0.attn.k.weight", "blocks.0.attn.v.weight", "blocks.0.attn.o.weight",
                  "blocks.0.mlp_norm.weight", "blocks.0.mlp.gate.weight", "blocks.0.mlp.up.weight",
                  "blocks.0.mlp.down.weight", "norm.weight", "head.weight"));
  EXPECT_EQ(llm->named_parameters()["head.weight"].sizes(), (std::vector<int64_t>{20, 32}));
}

TEST_F(LlmTest, TiedHeadReadsTheEmbedding) {
  Llm llm(TinyConfig());
  const at::Tensor tokens = torch::randint(20, {2, 5}, torch::kLong);
  {
    torch::NoGradGuard no_grad;
    llm->named_parameters()["embed.weight"].zero_();
  }
  // Zero embeddings and a zero prefix give zero hidden states, and a tied head maps them to zero
  // logits.
  EXPECT_TRUE(
      torch::equal(llm->forward(torch::zeros({2, 3, 32}), tokens), torch::zeros({2, 5, 20})));
}

// The formula of models/README.md.
int64_t ExpectedLlmParameters(const LlmConfig& c) {
  const int64_t h = c.hidden, v = c.vocab_size, m = c.mlp_hidden,
                kv = c.kv_heads * (c.hidden / c.heads);
  const int64_t block = 2 * h + 2 * h * h + 2 * h * kv + 3 * h * m;
  return v * h * (c.tie_embeddings ? 1 : 2) + c.layers * block + h;
}

TEST_F(LlmTest, ParameterCountMatchesFormula) {
  for (const bool tied : {true, false}) {
    for (const int64_t kv_heads : {1, 2, 4}) {
      auto config = TinyConfig();
      config.tie_embeddings = tied;
      config.kv_heads = kv_heads;
      Llm llm(config);
      EXPECT_EQ(CountParameters(*llm), ExpectedLlmParameters(config))
          << "tied " << tied << " kv " << kv_heads;
    }
  }
}

TEST_F(LlmTest, ParameterListMatchesTheModule) {
  for (const bool tied : {true, false}) {
    for (const bool bias : {false, true}) {
      auto config = TinyConfig();
      config.tie_embeddings = tied;
      config.attention_bias = bias;
      config.kv_heads = 2;
      config.head_dim = 6;
      Llm llm(config);
      const auto built = llm->named_parameters(/*recurse=*/true);
      const std::vector<ParameterInfo> listed = LlmParameterList(config);
      ASSERT_EQ(listed.size(), built.size()) << "tied " << tied << " bias " << bias;
      for (size_t i = 0; i < listed.size(); ++i) {
        SCOPED_TRACE(listed[i].name);
        EXPECT_EQ(listed[i].name, built[i].key());
        EXPECT_EQ(listed[i].shape, built[i].value().sizes().vec());
        EXPECT_FALSE(listed[i].frozen);
        EXPECT_EQ(listed[i].in_block, listed[i].name.rfind("blocks.", 0) == 0);
      }
    }
  }
}

TEST_F(LlmTest, GroupedQueryAttentionVariantsGiveSameShapes) {
  const at::Tensor prefix = torch::randn({2, 4, 32});
  const at::Tensor tokens = torch::randint(20, {2, 6}, torch::kLong);
  for (const int64_t kv_heads : {1, 2, 4}) {
    auto config = TinyConfig();
    config.kv_heads = kv_heads;
    Llm llm(config);
    EXPECT_EQ(llm->forward(prefix, tokens).sizes(), (std::vector<int64_t>{2, 6, 20})) << kv_heads;
    EXPECT_EQ(llm->named_parameters()["blocks.0.attn.k.weight"].sizes(),
              (std::vector<int64_t>{kv_heads * 8, 32}));
  }
}

TEST_F(LlmTest, ChangingTokenTChangesNoEarlierLogitsButPositionT) {
  Llm llm(TinyConfig());
  const at::Tensor prefix = torch::randn({2, 5, 32});
  const at::Tensor tokens = torch::randint(3, 20, {2, 9}, torch::kLong);
  const at::Tensor changed = tokens.clone();
  const int64_t t = 4;
  changed.select(1, t).fill_(1);  // tokens are >= 3, so every row changes
  torch::NoGradGuard no_grad;
  const at::Tensor a = llm->forward(prefix, tokens), b = llm->forward(prefix, changed);
  EXPECT_TRUE(torch::equal(a.narrow(1, 0, t), b.narrow(1, 0, t)));
  for (int64_t row = 0; row < 2; ++row) {
    for (int64_t pos = t; pos < 9; ++pos) {
      EXPECT_GT((a[row][pos] - b[row][pos]).abs().max().item<float>(), 1e-6) << row << " " << pos;
    }
  }
}

TEST_F(LlmTest, RejectsSequencesLongerThanMaxSeqLen) {
  Llm llm(TinyConfig());
  EXPECT_THAT(
      [&] {
        llm->forward(torch::randn({1, 30, 32}), torch::zeros({1, 3}, torch::kLong));
      },
      ThrowsMessage<c10::Error>(
          HasSubstr("30 prefix positions + 3 tokens = 33 exceeds max_seq_len 32")));
  EXPECT_THAT(
      [&] {
        llm->forward(at::Tensor(), torch::zeros({1, 33}, torch::kLong));
      },
      ThrowsMessage<c10::Error>(
          HasSubstr("0 prefix positions + 33 tokens = 33 exceeds max_seq_len 32")));
  EXPECT_NO_THROW(llm->forward(torch::randn({1, 29, 32}), torch::zeros({1, 3}, torch::kLong)));
}

TEST_F(LlmTest, RejectsMismatchedShapes) {
  Llm llm(TinyConfig());
  const at::Tensor tokens = torch::zeros({2, 3}, torch::kLong);
  EXPECT_THAT(
      [&] {
        llm->forward(torch::randn({2, 4, 16}), tokens);
      },
      ThrowsMessage<c10::Error>(HasSubstr("prefix must be [2, patches, 32]")));
  EXPECT_THAT(
      [&] {
        llm->forward(torch::randn({3, 4, 32}), tokens);
      },
      ThrowsMessage<c10::Error>(HasSubstr("prefix must be [2, patches, 32]")));
  EXPECT_THAT([&] { llm->forward(at::Tensor(), tokens.to(torch::kInt)); },
              ThrowsMessage<c10::Error>(HasSubstr("tokens must be int64")));
}

TEST_F(LlmTest, RejectsInconsistentConfig) {
  auto config = TinyConfig();
  config.kv_heads = 3;
  EXPECT_THAT([&] { Llm llm(config); },
              ThrowsMessage<c10::Error>(HasSubstr("heads 4 must be a multiple of kv_heads 3")));
  config = TinyConfig();
  config.vocab_size = 0;
  EXPECT_THAT([&] { Llm llm(config); },
              ThrowsMessage<c10::Error>(HasSubstr("vocab_size must be set")));
}

TEST_F(LlmTest, InitialisationIsDeterministicAndScaled) {
  auto config = TinyConfig();
  config.layers = 4;
  torch::manual_seed(7);
  Llm a(config);
  torch::manual_seed(7);
  Llm b(config);
  const auto pb = b->named_parameters();
  for (const auto& item : a->named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
    const std::string& name = item.key();
    if (name.find("norm") != std::string::npos) {
      EXPECT_TRUE(torch::equal(item.value(), torch::ones_like(item.value()))) << name;
      continue;
    }
    const bool residual =
        name.find(".o.") != std::string::npos || name.find(".down.") != std::string::npos;
    const double expected = residual ? 0.02 / std::sqrt(2.0 * 4) : 0.02;
    EXPECT_NEAR(item.value().std().item<double>(), expected, 0.15 * expected) << name;
  }
}

TEST(RmsNormTest, MatchesFormulaOnHandMadeInput) {
  RmsNorm norm(4, 1e-5);
  {
    torch::NoGradGuard no_grad;
    norm->weight.copy_(torch::tensor({1.0f, 0.5f, 2.0f, -1.0f}));
  }
  const at::Tensor x = torch::tensor({{1.0f, 2.0f, 3.0f, 4.0f}, {0.0f, 0.0f, 0.0f, 2.0f}});
  const double rms0 = std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-5), rms1 = std::sqrt(4 / 4.0 + 1e-5);
  const at::Tensor expected = torch::tensor(
      {{1 / rms0, 0.5 * 2 / rms0, 2 * 3 / rms0, -4 / rms0}, {0.0, 0.0, 0.0, -2 / rms1}},
      torch::kFloat);
  EXPECT_TRUE(torch::allclose(norm(x), expected, 1e-6, 1e-6)) << norm(x);
  // bf16 in: normalised in fp32, cast back to bf16, then scaled by the weight (type promotion as HF
  // Llama: fp32 with an fp32 weight, bf16 once the weight is bf16 too).
  EXPECT_EQ(norm(x.to(torch::kBFloat16)).scalar_type(), torch::kFloat);
  EXPECT_LE(testing::ToleranceRatio(norm(x.to(torch::kBFloat16)), expected, 1e-2, 1e-2), 1.0);
  norm->to(torch::kBFloat16);
  EXPECT_EQ(norm(x.to(torch::kBFloat16)).scalar_type(), torch::kBFloat16);
  EXPECT_LE(testing::ToleranceRatio(norm(x.to(torch::kBFloat16)), expected, 1e-2, 1e-2), 1.0);
}

TEST(RotaryTest, TablesFollowRotateHalfConvention) {
  const RotaryTables tables = MakeRotaryTables(/*head_dim=*/4, /*max_seq_len=*/3, /*theta=*/100.0);
  // Position 1, channel pair (0, 2) turns by 1 radian, pair (1, 3) by 100^(-1/2) = 0.1 radian.
  const at::Tensor x = torch::tensor({1.0f, 0.0f, 0.0f, 1.0f});
  const at::Tensor y =
      ApplyRotary(x.view({1, 4}), tables.cos.narrow(0, 1, 1), tables.sin.narrow(0, 1, 1));
  const at::Tensor expected =
      torch::tensor({static_cast<float>(std::cos(1.0)), static_cast<float>(-std::sin(0.1)),
                     static_cast<float>(std::sin(1.0)), static_cast<float>(std::cos(0.1))});
  EXPECT_TRUE(torch::allclose(y.view({4}), expected, 1e-6, 1e-6)) << y;
}

TEST(RotaryTest, PositionZeroIsIdentity) {
  const RotaryTables tables = MakeRotaryTables(8, 16, 10000.0);
  const at::Tensor x = torch::randn({2, 3, 1, 8});
  EXPECT_TRUE(
      torch::allclose(ApplyRotary(x, tables.cos.narrow(0, 0, 1), tables.sin.narrow(0, 0, 1)), x));
}

TEST(RotaryTest, AttentionScoreDependsOnlyOnRelativePosition) {
  torch::manual_seed(0);
  const RotaryTables tables = MakeRotaryTables(8, 32, 10000.0);
  const at::Tensor q = torch::randn({1, 8}), k = torch::randn({1, 8});
  auto score = [&](int64_t m, int64_t n) {
    const at::Tensor qm = ApplyRotary(q, tables.cos.narrow(0, m, 1), tables.sin.narrow(0, m, 1));
    const at::Tensor kn = ApplyRotary(k, tables.cos.narrow(0, n, 1), tables.sin.narrow(0, n, 1));
    return (qm * kn).sum().item<double>();
  };
  for (const int64_t shift : {1, 5, 20}) {
    EXPECT_NEAR(score(3, 1), score(3 + shift, 1 + shift), 1e-5) << shift;
    EXPECT_NEAR(score(2, 6), score(2 + shift, 6 + shift), 1e-5) << shift;
  }
  EXPECT_GT(std::abs(score(3, 1) - score(3, 2)), 1e-3);  // and it does depend on the offset
  // The rotation preserves norms.
  const at::Tensor q9 = ApplyRotary(q, tables.cos.narrow(0, 9, 1), tables.sin.narrow(0, 9, 1));
  EXPECT_NEAR(q9.norm().item<double>(), q.norm().item<double>(), 1e-5);
}

// ApplyRotary's own backward (NOTE [Rotary backward]) gives autograd's result for the rotation
// written out, bit for bit, in fp32 and in bf16: the same products and sums from the same operands.
TEST(RotaryTest, OwnBackwardEqualsAutogradOfTheWrittenOutRotation) {
  torch::manual_seed(0);
  const RotaryTables tables = MakeRotaryTables(8, 16, 10000.0);
  const at::Tensor cos = tables.cos.narrow(0, 2, 5), sin = tables.sin.narrow(0, 2, 5);
  const auto written_out = [&](const at::Tensor& x) {
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor rotated = at::cat({-xf.narrow(-1, 4, 4), xf.narrow(-1, 0, 4)}, -1);
    return (xf * cos + rotated * sin).to(x.scalar_type());
  };
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const at::Tensor input = torch::randn({2, 3, 5, 8}).to(dtype);
    const at::Tensor upstream = torch::randn({2, 3, 5, 8}).to(dtype);
    const at::Tensor a = input.clone().requires_grad_(true), b = input.clone().requires_grad_(true);
    const at::Tensor ya = ApplyRotary(a, cos, sin), yb = written_out(b);
    ya.backward(upstream);
    yb.backward(upstream);
    EXPECT_EQ(ya.scalar_type(), dtype);
    EXPECT_EQ(a.grad().scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(ya, yb)) << dtype;
    EXPECT_TRUE(torch::equal(a.grad(), b.grad())) << dtype;
    EXPECT_GT(a.grad().abs().sum().item<double>(), 0.0);
  }
}

// The head on the targeted positions only gives LabelLoss of the whole forward: the same loss and
// count, the same gradients for the prefix and every parameter, in a batch with ignored labels, a
// row without targets and image tokens among the text.
TEST_F(LlmTest, ForwardLabelLossEqualsLabelLossOfTheWholeForward) {
  LlmConfig c = TinyConfig();
  c.image_token_id = 5;
  Llm llm(c);
  at::Tensor tokens = torch::randint(6, 20, {3, 8}, torch::kLong);
  tokens.narrow(1, 1, 2).fill_(5);  // two image positions a row
  at::Tensor labels = tokens.clone();
  labels.narrow(1, 0, 4).fill_(kIgnoreLabel);  // the prompt
  labels[1].fill_(kIgnoreLabel);               // a row without targets
  labels[2][6] = kIgnoreLabel;
  const at::Tensor images = torch::randn({3, 2, 32});
  const auto run = [&](bool rows_only) {
    llm->zero_grad();
    const at::Tensor prefix = images.clone().requires_grad_(true);
    const TokenLoss loss = rows_only ? ForwardLabelLoss(llm, prefix, tokens, labels)
                                     : LabelLoss(llm, llm->forward(prefix, tokens), labels);
    loss.sum.backward();
    std::vector<at::Tensor> grads{prefix.grad().clone()};
    for (const auto& p : llm->parameters()) grads.push_back(p.grad().clone());
    return std::make_tuple(loss.sum.item<double>(), loss.count, grads);
  };
  const auto [whole_sum, whole_count, whole_grads] = run(false);
  const auto [rows_sum, rows_count, rows_grads] = run(true);
  EXPECT_EQ(rows_count, 4 + 0 + 3);  // labels 4-7 of row 0, none of row 1, 4, 5 and 7 of row 2
  EXPECT_EQ(rows_count, whole_count);
  EXPECT_NEAR(rows_sum, whole_sum, 1e-5 * std::abs(whole_sum));
  ASSERT_EQ(rows_grads.size(), whole_grads.size());
  for (size_t i = 0; i < whole_grads.size(); ++i) {
    EXPECT_LE(testing::ToleranceRatio(rows_grads[i], whole_grads[i], 1e-7, 1e-5), 1.0) << i;
  }
  EXPECT_GT(rows_grads[0].abs().sum().item<double>(), 0.0);  // the prefix's gradient flows

  // Nothing to predict: a zero loss that still backpropagates.
  const at::Tensor prefix = images.clone().requires_grad_(true);
  const TokenLoss none =
      ForwardLabelLoss(llm, prefix, tokens, torch::full({3, 8}, kIgnoreLabel, torch::kLong));
  EXPECT_EQ(none.count, 0);
  EXPECT_EQ(none.sum.item<double>(), 0.0);
  none.sum.backward();
  EXPECT_EQ(prefix.grad().abs().sum().item<double>(), 0.0);
}

TEST(CaptionLossTest, SumsCrossEntropyOverNonPadTargets) {
  // vocab: 0 <pad>, 1 <bos>, 2 <eos>, 3 word. Row 0: <bos> word <eos> <pad>; row 1: <bos> <eos>
  // <pad> <pad>.
  const at::Tensor tokens =
      torch::tensor(std::vector<int64_t>{1, 3, 2, 0, 1, 2, 0, 0}).view({2, 4});
  const std::vector<std::vector<double>> rows = {
      {0.5, -1.0, 2.0, 0.0},  {1.0, 0.0, 0.0, 3.0}, {0.0, 0.0, 1.5, 0.0}, {9.0, 9.0, 9.0, 9.0},
      {-2.0, 1.0, 0.25, 0.0}, {7.0, 1.0, 2.0, 3.0}, {5.0, 5.0, 5.0, 5.0}, {4.0, 3.0, 2.0, 1.0}};
  std::vector<float> flat;
  for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
  const at::Tensor logits =
      torch::tensor(flat).view({2, 4, 4}).to(torch::kBFloat16).to(torch::kFloat);
  auto nll = [&](int row, int64_t target) {
    double norm = 0;
    for (double v : rows[row]) norm += std::exp(v);
    return std::log(norm) - rows[row][target];
  };
  // Targets are tokens[:, 1:]: row 0 predicts 3, 2 (then pad); row 1 predicts 2 (then pads).
  const double expected = nll(0, 3) + nll(1, 2) + nll(4, 2);
  const at::Tensor leaf = logits.clone().requires_grad_(true);
  const TokenLoss loss = CaptionLoss(leaf, tokens, kPad);
  EXPECT_EQ(loss.count, 3);
  EXPECT_EQ(loss.sum.scalar_type(), torch::kFloat);
  EXPECT_NEAR(loss.sum.item<double>(), expected, 1e-5);
  // bf16 logits (autocast) give the same sum, computed in fp32.
  EXPECT_NEAR(CaptionLoss(logits.to(torch::kBFloat16), tokens, kPad).sum.item<double>(), expected,
              1e-5);
  loss.sum.backward();
  // Positions whose target is a pad, and the last position, get no gradient.
  EXPECT_TRUE(torch::equal(leaf.grad()[0][2], torch::zeros({4})));
  EXPECT_TRUE(torch::equal(leaf.grad()[0][3], torch::zeros({4})));
  EXPECT_TRUE(torch::equal(leaf.grad()[1][1], torch::zeros({4})));
  EXPECT_GT(leaf.grad()[0][0].abs().sum().item<float>(), 0);
}

TEST(CaptionLossTest, AllPadBatchIsZeroOverZero) {
  const TokenLoss loss = CaptionLoss(
      torch::randn({1, 3, 5}), torch::tensor(std::vector<int64_t>{1, 0, 0}).view({1, 3}), kPad);
  EXPECT_EQ(loss.count, 0);
  EXPECT_EQ(loss.sum.item<float>(), 0.0f);
}

// Trains a tiny LLM on two captions, one per fixed random prefix, then decodes them back greedily.
TEST_F(LlmTest, GenerateGreedyReproducesTrainedCaptions) {
  auto config = TinyConfig();
  config.vocab_size = 10;
  Llm llm(config);
  const at::Tensor prefix = torch::randn({2, 4, 32});
  // Row 0: <bos> 3 5 7 9 <eos>; row 1: <bos> 4 6 <eos> <pad> <pad> (greedy must stop per row).
  const at::Tensor tokens =
      torch::tensor(std::vector<int64_t>{1, 3, 5, 7, 9, 2, 1, 4, 6, 2, 0, 0}).view({2, 6});
  torch::optim::Adam adam(llm->parameters(), torch::optim::AdamOptions(1e-2));
  double last = 0;
  for (int step = 0; step < 150; ++step) {
    adam.zero_grad();
    const TokenLoss loss = CaptionLoss(llm->forward(prefix, tokens), tokens, kPad);
    const at::Tensor mean = loss.sum / static_cast<double>(loss.count);
    mean.backward();
    adam.step();
    last = mean.item<double>();
  }
  EXPECT_LT(last, 0.05);
  EXPECT_THAT(GenerateGreedy(llm, prefix, kBos, kEos, /*max_new_tokens=*/10),
              ElementsAre(ElementsAre(3, 5, 7, 9), ElementsAre(4, 6)));
  EXPECT_THAT(GenerateGreedy(llm, prefix, kBos, kEos, /*max_new_tokens=*/2),
              ElementsAre(ElementsAre(3, 5), ElementsAre(4, 6)));
  // The sequence may not outgrow max_seq_len: 30 prefix positions leave room for 2 new tokens.
  const auto capped = GenerateGreedy(llm, torch::randn({1, 30, 32}), kBos, kEos, 10);
  ASSERT_EQ(capped.size(), 1u);
  EXPECT_LE(capped[0].size(), 2u);
  EXPECT_TRUE(torch::GradMode::is_enabled());  // the no-grad guard is scoped to the call
}

// Prompts of different lengths, right-padded in one batch, continue as each does alone with a KV
// cache: padding after a row's last token changes nothing; LLaVA's image rows go to each prompt's
// image tokens; a row stops at a stop id, and at an image token it writes (kept in its output).
TEST_F(LlmTest, GenerateGreedyBatchEqualsEachPromptAlone) {
  auto config = TinyConfig();
  config.vocab_size = 12;
  config.image_token_id = 11;
  Llm llm(config);
  torch::NoGradGuard no_grad;
  for (auto& p : llm->parameters()) p.mul_(6);  // sharper logits: distinct continuations
  const at::Tensor images = torch::randn({3, 2, 32});
  const std::vector<std::vector<int64_t>> prompts = {
      {1, 11, 11, 4}, {11, 11, 5, 6, 7, 3}, {2, 11, 11}};
  const auto batch = GenerateGreedyBatch(llm, images, prompts, /*pad_id=*/0, /*stop_ids=*/{}, 6);
  ASSERT_EQ(batch.size(), 3u);
  for (size_t b = 0; b < prompts.size(); ++b) {
    auto alone =
        GenerateGreedyCached(llm, images.narrow(0, b, 1), prompts[b], {config.image_token_id}, 6);
    EXPECT_EQ(batch[b], alone) << "row " << b;
    // Stopping at the first token the row generated leaves it empty.
    const auto stopped =
        GenerateGreedyBatch(llm, images.narrow(0, b, 1), {prompts[b]}, 0, {alone[0]}, 6);
    EXPECT_TRUE(stopped[0].empty()) << "row " << b;
  }
}

// The label loss is the caption loss when the labels are the tokens with the padding ignored.
TEST_F(LlmTest, LabelLossIgnoresOnlyTheIgnoredLabels) {
  const at::Tensor logits = torch::randn({2, 5, 7});
  const at::Tensor tokens =
      torch::tensor(std::vector<int64_t>{1, 3, 5, 2, 0, 1, 4, 2, 0, 0}).view({2, 5});
  const TokenLoss caption = CaptionLoss(logits, tokens, kPad);
  const at::Tensor labels =
      torch::tensor(std::vector<int64_t>{-100, 3, -100, 2, -100, 1, 4, 2, -100, -100}).view({2, 5});
  const TokenLoss loss = LabelLoss(logits, labels);
  EXPECT_EQ(caption.count, 5);
  EXPECT_EQ(loss.count, 4);  // position 0's label is never a target; 5 is ignored
  const at::Tensor log_probs = torch::log_softmax(logits, -1);
  const double expected =
      -(log_probs[0][2][2] + log_probs[1][0][4] + log_probs[1][1][2]).item<double>() -
      log_probs[0][0][3].item<double>();
  EXPECT_NEAR(loss.sum.item<double>(), expected, 1e-5);
}

TEST_F(LlmTest, AutocastBf16IsCloseToFp32AndTrains) {
  Llm llm(TinyConfig());
  const at::Tensor prefix = torch::randn({2, 5, 32});
  const at::Tensor tokens = torch::randint(3, 20, {2, 7}, torch::kLong);
  const at::Tensor reference = llm->forward(prefix, tokens).detach();
  for (const auto prefix_dtype : {torch::kFloat, torch::kBFloat16}) {
    const at::Tensor leaf = prefix.to(prefix_dtype).detach().requires_grad_(true);
    at::Tensor logits, loss;
    {
      compat::AutocastScope autocast(c10::DeviceType::CPU, {true, torch::kBFloat16});
      logits = llm->forward(leaf, tokens);
      loss = CaptionLoss(logits, tokens, kPad).sum;
    }
    EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);
    EXPECT_LE(testing::ToleranceRatio(logits.detach(), reference, 0.02, 0.05), 1.0);
    loss.backward();
    ASSERT_TRUE(leaf.grad().defined());
    EXPECT_EQ(leaf.grad().scalar_type(), prefix_dtype);
    EXPECT_TRUE(leaf.grad().isfinite().all().item<bool>());
  }
}

// An engine with bf16 parameters and no autocast: an fp32 prefix is cast to the parameter dtype.
TEST_F(LlmTest, RunsWithBf16ParametersWithoutAutocast) {
  Llm llm(TinyConfig());
  const at::Tensor prefix = torch::randn({2, 5, 32});
  const at::Tensor tokens = torch::randint(3, 20, {2, 7}, torch::kLong);
  const at::Tensor reference = llm->forward(prefix, tokens).detach();
  for (const auto& p : llm->parameters()) p.set_data(p.data().to(torch::kBFloat16));
  const at::Tensor leaf = prefix.clone().requires_grad_(true);
  const at::Tensor logits = llm->forward(leaf, tokens);
  EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);
  EXPECT_LE(testing::ToleranceRatio(logits.detach(), reference, 0.03, 0.05), 1.0);
  CaptionLoss(logits, tokens, kPad).sum.backward();
  EXPECT_EQ(leaf.grad().scalar_type(), torch::kFloat);
  for (const auto& item : llm->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_EQ(item.value().grad().scalar_type(), torch::kBFloat16) << item.key();
  }
}

TEST_F(LlmTest, RecomputeGivesTheSameGradients) {
  auto config = TinyConfig();
  torch::manual_seed(3);
  Llm plain(config);
  torch::manual_seed(3);
  Llm recomputed(config);
  recomputed->set_recompute(true);
  const at::Tensor prefix = torch::randn({2, 5, 32});
  const at::Tensor tokens = torch::randint(3, 20, {2, 7}, torch::kLong);

  auto run = [&](Llm& llm) {
    const at::Tensor leaf = prefix.clone().requires_grad_(true);
    CaptionLoss(llm->forward(leaf, tokens), tokens, kPad).sum.backward();
    return leaf.grad();
  };
  const at::Tensor grad_plain = run(plain), grad_recomputed = run(recomputed);
  EXPECT_LE(testing::ToleranceRatio(grad_recomputed, grad_plain, 1e-7, 1e-5), 1.0);
  const auto expected = plain->named_parameters();
  for (const auto& item : recomputed->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_LE(testing::ToleranceRatio(item.value().grad(), expected[item.key()].grad(), 1e-7, 1e-5),
              1.0)
        << item.key();
  }
}

// The blocks work under an engine: ZeRO-3 (blocks gathered just in time and recomputed, with the
// rotary rows as extra block inputs; embedding and final norm resident) trains like ZeRO-0.
TEST_F(LlmTest, ZeroStage3EngineTrainsLikeStage0) {
  const at::Tensor prefix = torch::randn({2, 5, 32});
  const at::Tensor tokens = torch::randint(3, 20, {2, 7}, torch::kLong);
  std::vector<std::vector<double>> losses;
  for (const int stage : {0, 3}) {
    torch::manual_seed(9);
    Llm llm(TinyConfig());
    auto config =
        engine_config::ParseConfig(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}})");
    ASSERT_TRUE(config.ok()) << config.status();
    config->zero.stage = stage;
    auto engine =
        engine::Engine::Create(llm.ptr(), engine::CreateSingleRankCommunicator("llm"), *config);
    ASSERT_TRUE(engine.ok()) << engine.status();
    losses.emplace_back();
    for (int step = 0; step < 3; ++step) {
      const at::Tensor leaf = prefix.clone().requires_grad_(true);
      const TokenLoss loss = CaptionLoss(llm->forward(leaf, tokens), tokens, kPad);
      (loss.sum / static_cast<double>(loss.count)).backward();
      ASSERT_TRUE(leaf.grad().defined());
      ASSERT_TRUE((*engine)->Step().ok());
      losses.back().push_back(loss.sum.item<double>());
    }
  }
  for (int step = 0; step < 3; ++step)
    EXPECT_NEAR(losses[1][step], losses[0][step], 1e-4 * losses[0][step]) << step;
  EXPECT_LT(losses[0][2], losses[0][0]);
}

}  // namespace
}  // namespace tandem::models
