// The tensor-parallel LLM (NOTE [Tensor-parallel LLM] in models/llm.h) against the single-process
// model: ranks as threads over engine::FakeGroup, fp32.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/fake_communicator.h"
#include "models/llm.h"
#include "models/parameter_list.h"
#include "parallel/layout.h"

namespace tandem::models {
namespace {

using ::testing::HasSubstr;

struct Case {
  std::string name;
  int size;
  LlmConfig config;
  bool recompute = false;
};

LlmConfig Config(int64_t heads, int64_t kv_heads, int64_t vocab, bool tied, bool bias) {
  LlmConfig c;
  c.hidden = 8 * heads;
  c.layers = 2;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.mlp_hidden = 24;
  c.vocab_size = vocab;
  c.max_seq_len = 32;
  c.tie_embeddings = tied;
  c.attention_bias = bias;
  return c;
}

std::vector<Case> Cases() {
  return {
      {"TP 2, KV heads split, tied embeddings, a vocabulary of 21", 2,
       Config(4, 2, 21, true, false)},
      {"TP 2 with activation recompute", 2, Config(4, 2, 21, true, false), /*recompute=*/true},
      {"TP 3, biases, an untied head, a vocabulary of 20", 3, Config(6, 3, 20, false, true)},
      {"TP 4, 2 KV heads replicated", 4, Config(4, 2, 19, false, true)},
  };
}

void ExpectClose(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  ASSERT_TRUE(actual.sizes() == expected.sizes())
      << what << ": " << actual.sizes() << " vs " << expected.sizes();
  EXPECT_TRUE(at::allclose(actual, expected, 1e-4, 1e-6))
      << what << ": largest difference " << (actual - expected).abs().max().item<double>();
}

class LlmTensorParallelTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

// Logits (this rank's columns), the loss, every parameter's gradient (this rank's shard) and the
// prefix's gradient equal the single-process model's; ForwardLast's logits are whole on every rank.
TEST_P(LlmTensorParallelTest, MatchesTheSingleProcessModel) {
  const Case& test = GetParam();
  const LlmConfig& config = test.config;
  torch::manual_seed(7);
  const at::Tensor prefix0 = torch::randn({2, 3, config.hidden});
  at::Tensor tokens = torch::randint(config.vocab_size, {2, 6}, torch::kLong);
  tokens[1][5] = 0;
  const at::Tensor labels = tokens.masked_fill(tokens.eq(0), kIgnoreLabel);
  const at::Tensor last = torch::tensor({5, 3});

  torch::manual_seed(0);
  Llm whole(config);
  at::Tensor prefix = prefix0.clone().requires_grad_();
  const at::Tensor logits = whole->forward(prefix, tokens);
  const TokenLoss loss = LabelLoss(logits, labels);
  loss.sum.backward();
  const at::Tensor last_logits = whole->ForwardLast(prefix0, tokens, last);

  engine::FakeGroup group(test.size, parallel::ParallelGroupName(Role::kLlm, 0));
  std::vector<Llm> ranks;
  for (int r = 0; r < test.size; ++r) {  // one after another: they draw from the default generator
    torch::manual_seed(0);
    ranks.emplace_back(config, parallel::ParallelGroup{group.rank(r), std::chrono::seconds(20)});
    ranks.back()->set_recompute(test.recompute);
  }
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < test.size; ++r) {
    threads.emplace_back([&, r] {
      Llm& llm = ranks[r];
      at::Tensor mine = prefix0.clone().requires_grad_();
      const at::Tensor local = llm->forward(mine, tokens);
      const TokenLoss local_loss = LabelLoss(llm, local, labels);
      local_loss.sum.backward();
      const at::Tensor local_last = llm->ForwardLast(prefix0, tokens, last);

      std::lock_guard<std::mutex> lock(mu);
      SCOPED_TRACE("rank " + std::to_string(r));
      const parallel::Range columns = llm->vocab_columns();
      ExpectClose(local, logits.narrow(2, columns.begin, columns.size()).detach(), "logits");
      ExpectClose(local_loss.sum, loss.sum.detach(), "loss");
      EXPECT_EQ(local_loss.count, loss.count);
      ExpectClose(mine.grad(), prefix.grad(), "prefix gradient");
      ExpectClose(local_last, last_logits, "ForwardLast's logits");
      const auto reference = whole->named_parameters();
      for (const auto& item : llm->named_parameters()) {
        const auto shard = llm->shards().find(item.key());
        const at::Tensor expected =
            shard == llm->shards().end()
                ? reference[item.key()].grad()
                : parallel::TakeShard(reference[item.key()].grad(), shard->second);
        ExpectClose(item.value().grad(), expected, item.key() + "'s gradient");
      }
    });
  }
  for (auto& thread : threads) thread.join();
}

INSTANTIATE_TEST_SUITE_P(Layouts, LlmTensorParallelTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return "case" + std::to_string(info.index);
                         });

// Sequence packing (models::Packing): three samples in one row (the first with one image, the
// second text only, the third with two) give the loss and gradients of the same samples in rows of
// their own (fp32, 1e-5), on one rank and on each of two tensor-parallel ranks.
class LlmPackingTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

struct LossAndGradients {
  double loss = 0;
  int64_t count = 0;
  at::Tensor images_grad;
  std::map<std::string, at::Tensor> grads;
};

LossAndGradients RunOnce(Llm& llm, const at::Tensor& images, const at::Tensor& tokens,
                         const at::Tensor& labels, const Packing* packing) {
  for (auto& p : llm->parameters()) p.mutable_grad() = at::Tensor();
  at::Tensor leaf = images.clone().requires_grad_();
  const TokenLoss loss = ForwardLabelLoss(llm, leaf, tokens, labels, packing);
  loss.sum.backward();
  LossAndGradients out{loss.sum.item<double>(), loss.count, leaf.grad(), {}};
  for (const auto& item : llm->named_parameters()) out.grads[item.key()] = item.value().grad();
  return out;
}

TEST_P(LlmPackingTest, PackedRowsEqualTheirSamplesInRowsOfTheirOwn) {
  const int size = GetParam();
  LlmConfig config = Config(4, 2, 21, false, true);
  config.image_token_id = 20;
  constexpr int64_t kImage = 20, kPatches = 2;
  torch::manual_seed(3);
  // Lengths 6, 7 and 8 (image tokens included); each sample's first label is never a target.
  const std::vector<std::vector<int64_t>> samples = {{1, kImage, kImage, 5, 6, 7},
                                                     {1, 8, 9, 10, 11, 12, 13},
                                                     {1, kImage, kImage, 3, kImage, kImage, 4, 2}};
  const at::Tensor images = torch::randn({3, kPatches, config.hidden});
  const int64_t longest = 8, packed_length = 6 + 7 + 8 + 3;  // three positions of padding
  at::Tensor tokens = torch::zeros({3, longest}, torch::kLong);
  at::Tensor labels = torch::full({3, longest}, kIgnoreLabel, torch::kLong);
  at::Tensor packed = torch::zeros({1, packed_length}, torch::kLong);
  at::Tensor packed_labels = torch::full({1, packed_length}, kIgnoreLabel, torch::kLong);
  at::Tensor positions = torch::zeros({1, packed_length}, torch::kLong);
  at::Tensor segments = torch::full({1, packed_length}, -1, torch::kLong);
  int64_t at = 0;
  for (size_t b = 0; b < samples.size(); ++b) {
    for (size_t t = 0; t < samples[b].size(); ++t) {
      const int64_t id = samples[b][t];
      const int64_t label = t == 0 || id == kImage ? kIgnoreLabel : id;
      tokens[b][t] = id;
      labels[b][t] = label;
      packed[0][at] = id;
      packed_labels[0][at] = label;
      positions[0][at] = static_cast<int64_t>(t);
      segments[0][at] = static_cast<int64_t>(b);
      ++at;
    }
  }
  const Packing packing{positions, segments};

  engine::FakeGroup group(size, parallel::ParallelGroupName(Role::kLlm, 0));
  std::vector<Llm> ranks;
  for (int r = 0; r < size; ++r) {
    torch::manual_seed(0);
    ranks.emplace_back(
        config, size == 1 ? parallel::ParallelGroup{}
                          : parallel::ParallelGroup{group.rank(r), std::chrono::seconds(20)});
  }
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      const LossAndGradients rows = RunOnce(ranks[r], images, tokens, labels, nullptr);
      const LossAndGradients one = RunOnce(ranks[r], images, packed, packed_labels, &packing);
      std::lock_guard<std::mutex> lock(mu);
      SCOPED_TRACE("rank " + std::to_string(r));
      EXPECT_EQ(one.count, rows.count);
      EXPECT_NEAR(one.loss, rows.loss, 1e-5 * std::abs(rows.loss));
      EXPECT_TRUE(at::allclose(one.images_grad, rows.images_grad, 1e-5, 1e-7))
          << (one.images_grad - rows.images_grad).abs().max().item<double>();
      for (const auto& [name, grad] : rows.grads) {
        EXPECT_TRUE(at::allclose(one.grads.at(name), grad, 1e-5, 1e-7))
            << name << ": " << (one.grads.at(name) - grad).abs().max().item<double>();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  // Without the mask the later samples would attend to the earlier ones: the loss differs.
  if (size == 1) {
    const Packing one_sample{positions, torch::zeros_like(segments)};
    const LossAndGradients leaked = RunOnce(ranks[0], images, packed, packed_labels, &one_sample);
    const LossAndGradients rows = RunOnce(ranks[0], images, tokens, labels, nullptr);
    EXPECT_GT(std::abs(leaked.loss - rows.loss), 1e-4 * std::abs(rows.loss));
  }
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, LlmPackingTest, ::testing::Values(1, 2));

TEST(LlmTensorParallel, ShardsHalveTheSplitWeightsAndNameHowEachIsSplit) {
  const LlmConfig config = Config(4, 2, 21, false, false);
  engine::FakeGroup group(2, parallel::ParallelGroupName(Role::kLlm, 0));
  Llm whole(config);
  Llm rank1(config, parallel::ParallelGroup{group.rank(1), std::chrono::seconds(1)});
  const auto shards = rank1->shards();
  EXPECT_EQ(shards.at("blocks.0.attn.q.weight").dim, 0);
  EXPECT_EQ(shards.at("blocks.0.attn.o.weight").dim, 1);
  EXPECT_EQ(shards.at("blocks.1.mlp.down.weight").dim, 1);
  EXPECT_EQ(shards.at("head.weight").range.begin, 11);  // 21 = 11 + 10
  EXPECT_EQ(shards.count("norm.weight"), 0u);
  EXPECT_EQ(rank1->named_parameters()["blocks.0.mlp.gate.weight"].sizes(),
            (std::vector<int64_t>{12, 32}));
  EXPECT_EQ(rank1->named_parameters()["embed.weight"].sizes(), (std::vector<int64_t>{10, 32}));
  // Everything but the norms is split in two (the vocabulary of 21 unevenly).
  const int64_t norms = 2 * 2 * 32 + 32;
  EXPECT_EQ(CountParameters(*rank1), (CountParameters(*whole) - norms - 2 * 32) / 2 + norms);
}

// What the memory estimate counts on each rank is what each rank's model holds, uneven vocabulary
// shards and replicated KV heads included.
TEST(LlmTensorParallel, ShardElementsCountEachRanksParameters) {
  for (const auto& [size, config] :
       {std::pair{2, Config(4, 2, 21, false, true)}, std::pair{4, Config(4, 2, 23, true, false)},
        std::pair{4, Config(4, 4, 22, false, false)}}) {
    engine::FakeGroup group(size, parallel::ParallelGroupName(Role::kLlm, 0));
    for (int rank = 0; rank < size; ++rank) {
      Llm llm(config, parallel::ParallelGroup{group.rank(rank), std::chrono::seconds(1)});
      int64_t listed = 0;
      for (const ParameterInfo& p : LlmParameterList(config))
        listed += LlmShardElements(config, p, size, rank);
      EXPECT_EQ(listed, CountParameters(*llm))
          << "TP " << size << " rank " << rank << " vocabulary " << config.vocab_size;
    }
  }
}

TEST(LlmTensorParallel, RefusesSizesThatDoNotSplit) {
  engine::FakeGroup group(3, parallel::ParallelGroupName(Role::kLlm, 0));
  const parallel::ParallelGroup rank0{group.rank(0), std::chrono::seconds(1)};
  EXPECT_THAT([&] { Llm(Config(4, 2, 20, true, false), rank0); },
              ::testing::ThrowsMessage<c10::Error>(
                  HasSubstr("4 heads do not split over 3 tensor-parallel ranks")));
  EXPECT_THAT([&] { Llm(Config(6, 2, 20, true, false), rank0); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("2 KV heads neither split over 3")));
  LlmConfig small_vocab = Config(6, 3, 2, true, false);
  EXPECT_THAT([&] { Llm(small_vocab, rank0); },
              ::testing::ThrowsMessage<c10::Error>(
                  HasSubstr("a vocabulary of 2 for 3 tensor-parallel ranks")));
}

}  // namespace
}  // namespace tandem::models
