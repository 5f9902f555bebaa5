#include "parallel/collectives.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/fake_communicator.h"
#include "parallel/layout.h"
#include "parallel/vocab_parallel.h"

namespace tandem::parallel {
namespace {

namespace F = torch::nn::functional;

// Runs fn(group) on one thread per rank of a fake group of `size`; returns the first exception's
// message per rank ("" where none was thrown).
std::vector<std::string> OnRanks(int size, const std::function<void(const ParallelGroup&)>& fn,
                                 engine::FakeGroup* fake = nullptr) {
  engine::FakeGroup own(size, "tp");
  engine::FakeGroup& group = fake != nullptr ? *fake : own;
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      ParallelGroup g;
      g.comm = group.rank(r);
      g.timeout = std::chrono::seconds(20);
      try {
        fn(g);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return errors;
}

void ExpectClose(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  EXPECT_TRUE(actual.sizes() == expected.sizes())
      << what << ": " << actual.sizes() << " vs " << expected.sizes();
  EXPECT_TRUE(at::allclose(actual, expected, 1e-5, 1e-6))
      << what << ": largest difference " << (actual - expected).abs().max().item<double>();
}

void ExpectNoErrors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Megatron's MLP: a column-parallel linear (CopyToGroup before it) and a row-parallel one
// (ReduceFromGroup after it) give the single-process output and gradients, sliced.
TEST(TensorParallel, ColumnThenRowParallelLinearsMatchTheWholeLayer) {
  torch::manual_seed(1);
  const int64_t hidden = 4, inner = 6;
  const at::Tensor x0 = torch::randn({3, hidden}), w1 = torch::randn({inner, hidden}),
                   w2 = torch::randn({hidden, inner}), c = torch::randn({3, hidden});
  at::Tensor x = x0.clone().requires_grad_(), a = w1.clone().requires_grad_(),
             b = w2.clone().requires_grad_();
  const at::Tensor y = F::linear(torch::relu(F::linear(x, a)), b);
  (y * c).sum().backward();

  for (int size : {2, 3}) {
    SCOPED_TRACE("group of " + std::to_string(size));
    std::mutex mu;
    ExpectNoErrors(OnRanks(size, [&](const ParallelGroup& g) {
      const int64_t n = inner / size, begin = g.rank() * n;
      at::Tensor xr = x0.clone().requires_grad_();
      at::Tensor ar = w1.narrow(0, begin, n).clone().requires_grad_();
      at::Tensor br = w2.narrow(1, begin, n).clone().requires_grad_();
      const at::Tensor yr =
          ReduceFromGroup(F::linear(torch::relu(F::linear(CopyToGroup(xr, g), ar)), br), g);
      (yr * c).sum().backward();
      std::lock_guard<std::mutex> lock(mu);
      ExpectClose(yr, y, "output");
      ExpectClose(xr.grad(), x.grad(), "input gradient");
      ExpectClose(ar.grad(), a.grad().narrow(0, begin, n), "column-parallel weight gradient");
      ExpectClose(br.grad(), b.grad().narrow(1, begin, n), "row-parallel weight gradient");
    }));
  }
}

// A vocabulary of 7 over 2 and 3 ranks (uneven shares): the loss and the logits' gradient of
// every rank's columns are cross_entropy's.
TEST(VocabParallel, CrossEntropyMatchesTheWholeVocabularyWithUnevenShares) {
  torch::manual_seed(2);
  const int64_t vocab = 7, rows = 5;
  const at::Tensor logits0 = torch::randn({rows, vocab}) * 3,
                   targets = torch::tensor({0, 6, 3, 3, 5});
  at::Tensor logits = logits0.clone().requires_grad_();
  const at::Tensor loss =
      F::cross_entropy(logits, targets, F::CrossEntropyFuncOptions().reduction(torch::kSum));
  (loss * 1.5).backward();

  for (int size : {1, 2, 3}) {
    SCOPED_TRACE("group of " + std::to_string(size));
    std::mutex mu;
    std::vector<int64_t> shares(size);
    ExpectNoErrors(OnRanks(size, [&](const ParallelGroup& g) {
      const Range columns = EvenSplit(vocab, g.size(), g.rank());
      at::Tensor mine = logits0.narrow(1, columns.begin, columns.size()).clone().requires_grad_();
      const at::Tensor local = VocabParallelCrossEntropySum(mine, targets, columns, g);
      (local * 1.5).backward();
      std::lock_guard<std::mutex> lock(mu);
      shares[g.rank()] = columns.size();
      ExpectClose(local, loss, "loss");
      ExpectClose(mine.grad(), logits.grad().narrow(1, columns.begin, columns.size()),
                  "logits gradient");
    }));
    if (size == 3) {
      EXPECT_EQ(shares, (std::vector<int64_t>{3, 2, 2}));
    }
  }
}

TEST(VocabParallel, EmbeddingMatchesTheWholeTableAndItsGradientIsTheRanksRows) {
  torch::manual_seed(3);
  const int64_t vocab = 7, hidden = 3;
  const at::Tensor table = torch::randn({vocab, hidden}),
                   tokens = torch::tensor({{0, 6, 2}, {2, 4, 1}});
  const at::Tensor c = torch::randn({2, 3, hidden});
  at::Tensor whole = table.clone().requires_grad_();
  const at::Tensor expected = F::embedding(tokens, whole);
  (expected * c).sum().backward();

  std::mutex mu;
  ExpectNoErrors(OnRanks(3, [&](const ParallelGroup& g) {
    const Range rows = EvenSplit(vocab, g.size(), g.rank());
    at::Tensor mine = table.narrow(0, rows.begin, rows.size()).clone().requires_grad_();
    const at::Tensor embedded = VocabParallelEmbedding(mine, tokens, rows, g);
    (embedded * c).sum().backward();
    std::lock_guard<std::mutex> lock(mu);
    ExpectClose(embedded, expected, "embeddings");
    ExpectClose(mine.grad(), whole.grad().narrow(0, rows.begin, rows.size()), "table gradient");
  }));
}

// DeepSpeed-Ulysses: each rank holds a slice of the sequence; attention over the whole sequence
// with its heads, between the two all-to-alls, gives the single-process output and gradients.
TEST(SequenceParallel, UlyssesAttentionMatchesTheWholeSequence) {
  torch::manual_seed(4);
  const int64_t batch = 2, seq = 6, heads = 6, dim = 2;
  const at::Tensor q0 = torch::randn({batch, seq, heads, dim}),
                   k0 = torch::randn({batch, seq, heads, dim}),
                   v0 = torch::randn({batch, seq, heads, dim}),
                   c = torch::randn({batch, seq, heads, dim});
  at::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(),
             v = v0.clone().requires_grad_();
  const auto attend = [](const at::Tensor& q, const at::Tensor& k,
                         const at::Tensor& v) {  // [B, S, H, D]
    const at::Tensor scores = torch::matmul(q.transpose(1, 2), k.transpose(1, 2).transpose(-1, -2));
    return torch::matmul(torch::softmax(scores, -1), v.transpose(1, 2)).transpose(1, 2);
  };
  const at::Tensor out = attend(q, k, v);
  (out * c).sum().backward();

  for (int size : {2, 3}) {
    SCOPED_TRACE("group of " + std::to_string(size));
    std::mutex mu;
    ExpectNoErrors(OnRanks(size, [&](const ParallelGroup& g) {
      const int64_t n = seq / size, begin = g.rank() * n;
      auto slice = [&](const at::Tensor& t) {
        return t.narrow(1, begin, n).clone().requires_grad_();
      };
      at::Tensor qr = slice(q0), kr = slice(k0), vr = slice(v0);
      const at::Tensor heads_q = SequenceToHeads(qr, g);
      const at::Tensor outr =
          HeadsToSequence(attend(heads_q, SequenceToHeads(kr, g), SequenceToHeads(vr, g)), g);
      (outr * c.narrow(1, begin, n)).sum().backward();
      std::lock_guard<std::mutex> lock(mu);
      const int64_t h = heads / size;
      ExpectClose(heads_q, q0.narrow(2, g.rank() * h, h), "the whole sequence, this rank's heads");
      ExpectClose(outr, out.narrow(1, begin, n), "output");
      ExpectClose(qr.grad(), q.grad().narrow(1, begin, n), "query gradient");
      ExpectClose(kr.grad(), k.grad().narrow(1, begin, n), "key gradient");
      ExpectClose(vr.grad(), v.grad().narrow(1, begin, n), "value gradient");
    }));
  }
}

// A replica without samples (the last evaluation batch) runs the model on an empty batch: every
// rank of the group holds the same empty shape and issues nothing.
TEST(SequenceParallel, AnEmptyBatchIssuesNoCollective) {
  engine::FakeGroup fake(2, parallel::ParallelGroupName(Role::kVision, 0));
  ExpectNoErrors(OnRanks(
      2,
      [](const ParallelGroup& g) {
        const at::Tensor heads = SequenceToHeads(torch::zeros({0, 3, 4, 2}), g);
        EXPECT_EQ(heads.sizes(), (std::vector<int64_t>{0, 6, 2, 2}));
        EXPECT_EQ(HeadsToSequence(heads, g).sizes(), (std::vector<int64_t>{0, 3, 4, 2}));
        EXPECT_EQ(ReduceFromGroup(torch::zeros({0, 5}), g).numel(), 0);
        EXPECT_EQ(g.comm->last_sequence(), 0);
      },
      &fake));
}

TEST(TensorParallel, GatherLastDimAssemblesUnevenShares) {
  const at::Tensor whole = torch::arange(14, torch::kFloat).view({2, 7});
  std::mutex mu;
  ExpectNoErrors(OnRanks(3, [&](const ParallelGroup& g) {
    const Range mine = EvenSplit(7, g.size(), g.rank());
    const at::Tensor gathered =
        GatherLastDim(whole.narrow(1, mine.begin, mine.size()).contiguous(), 7, g);
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(at::equal(gathered, whole)) << gathered;
  }));
}

TEST(TensorParallel, AFailedCollectiveThrowsItsStatusOnEveryRank) {
  engine::FakeGroup fake(2, parallel::ParallelGroupName(Role::kLlm, 0));
  fake.FailOperation(1, absl::UnavailableError("peer gone"));
  const auto errors = OnRanks(
      2, [](const ParallelGroup& g) { ReduceFromGroup(torch::ones({2}), g); }, &fake);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(
        errors[r].find("group 'llm/tp0' rank " + std::to_string(r) + ": all_reduce (sequence 1)"),
        std::string::npos)
        << errors[r];
    EXPECT_NE(errors[r].find("peer gone"), std::string::npos) << errors[r];
  }
}

TEST(TensorParallel, EvenSplitGivesTheFirstRanksTheRemainder) {
  EXPECT_EQ(EvenSplit(7, 3, 0).begin, 0);
  EXPECT_EQ(EvenSplit(7, 3, 0).end, 3);
  EXPECT_EQ(EvenSplit(7, 3, 1).begin, 3);
  EXPECT_EQ(EvenSplit(7, 3, 2).begin, 5);
  EXPECT_EQ(EvenSplit(7, 3, 2).end, 7);
  EXPECT_EQ(EvenSplit(8, 2, 1).begin, 4);
}

// The names of a rank's communicators come from its layout (parallel/layout.h), and only from it.
TEST(RankLayout, NamesEachRanksCommunicators) {
  const RankLayout llm{Role::kLlm, 3, 4, 2};
  EXPECT_EQ(llm.Describe(),
            "llm rank 3 of 4: replica 1 of 2, index 1 of 2; engine llm/dp1 rank 1 of 2; llm/tp1");
  const RankLayout vision{Role::kVision, 3, 4, 2};
  EXPECT_EQ(
      vision.Describe(),
      "vision rank 3 of 4: replica 1 of 2, index 1 of 2; engine vision rank 3 of 4; vision/sp1");
  const RankLayout plain{Role::kLlm, 1, 2, 1};
  EXPECT_EQ(plain.Describe(),
            "llm rank 1 of 2: replica 1 of 2, index 0 of 1; engine llm rank 1 of 2");
}

}  // namespace
}  // namespace tandem::parallel
