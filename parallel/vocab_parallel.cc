#include "parallel/vocab_parallel.h"

#include <torch/torch.h>

#include "parallel/collectives.h"

namespace tandem::parallel {
namespace {

namespace F = torch::nn::functional;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Forward: the loss per row [N] in fp32. Saves the local softmax and the one-hot's position.
struct VocabParallelCrossEntropyFunction
    : public torch::autograd::Function<VocabParallelCrossEntropyFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets, const Range& columns,
                            const ParallelGroup& group) {
    const int64_t rows = logits.size(0), g = group.size();
    const at::Tensor x = logits.to(at::kFloat);
    // The largest logit of each row over the whole vocabulary, for a stable exponential.
    at::Tensor maxima = at::empty({g * rows}, x.options());
    WaitOrThrow(group.comm->AllGather(std::get<0>(x.max(1)).contiguous(), maxima), group);
    const at::Tensor shifted = x - std::get<0>(maxima.view({g, rows}).max(0)).unsqueeze(1);
    const at::Tensor exponentials = shifted.exp();
    const at::Tensor local = targets - columns.begin;
    const at::Tensor mine = local.ge(0).logical_and(local.lt(columns.size()));
    const at::Tensor index = local.clamp(0, columns.size() - 1).unsqueeze(1);
    // One all-reduce: [sum of exponentials ; the target's shifted logit, from the rank holding it].
    at::Tensor sums =
        at::cat({exponentials.sum(1), shifted.gather(1, index).squeeze(1) * mine.to(at::kFloat)});
    WaitOrThrow(group.comm->AllReduceSum(sums), group);
    const at::Tensor total = sums.narrow(0, 0, rows);
    ctx->save_for_backward({exponentials / total.unsqueeze(1), index, mine});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return total.log() - sums.narrow(0, rows, rows);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    at::Tensor grad = saved[0].clone();  // softmax over the local columns
    grad.scatter_add_(1, saved[1], -saved[2].to(at::kFloat).unsqueeze(1));
    grad.mul_(grads[0].unsqueeze(1));
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grad.to(dtype), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor VocabParallelEmbedding(const at::Tensor& weight, const at::Tensor& tokens,
                                  const Range& rows, const ParallelGroup& group) {
  TORCH_CHECK(weight.dim() == 2 && weight.size(0) == rows.size(), "VocabParallelEmbedding: rank ",
              group.rank(), " holds rows [", rows.begin, ", ", rows.end, ") and a table of ",
              weight.sizes());
  if (!group.active()) return F::embedding(tokens, weight);
  const at::Tensor local = tokens - rows.begin;
  const at::Tensor outside = local.lt(0).logical_or(local.ge(rows.size()));
  at::Tensor embedded = F::embedding(local.masked_fill(outside, 0), weight);
  embedded = embedded.masked_fill(outside.unsqueeze(-1), 0);
  return ReduceFromGroup(embedded, group);
}

at::Tensor VocabParallelCrossEntropySum(const at::Tensor& logits, const at::Tensor& targets,
                                        const Range& columns, const ParallelGroup& group) {
  TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && logits.size(0) == targets.size(0) &&
                  logits.size(1) == columns.size(),
              "VocabParallelCrossEntropySum: logits [rows, ", columns.size(),
              "] and targets [rows] must agree, got ", logits.sizes(), " and ", targets.sizes());
  if (!group.active()) {
    return F::cross_entropy(logits.to(at::kFloat), targets,
                            F::CrossEntropyFuncOptions().reduction(torch::kSum));
  }
  if (logits.size(0) == 0) return logits.to(at::kFloat).sum();  // keeps the graph; issues nothing
  return VocabParallelCrossEntropyFunction::apply(logits, targets, columns, group).sum();
}

}  // namespace tandem::parallel
