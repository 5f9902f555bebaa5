// Each function is a torch::autograd::Function; its context keeps the communicator's address and
// the deadline (NOTE [Block recomputation] in engine/block.h keeps its block the same way), so the
// group must outlive the graph (collectives.h).
#include "parallel/collectives.h"

#include <torch/torch.h>

#include <string>

namespace tandem::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t Address(const ParallelGroup& group) { return reinterpret_cast<int64_t>(group.comm.get()); }

ParallelGroup FromContext(AutogradContext* ctx) {
  ParallelGroup group;
  auto* comm = reinterpret_cast<engine::Communicator*>(ctx->saved_data["comm"].toInt());
  // A non-owning handle: the group outlives the graph (collectives.h).
  group.comm = std::shared_ptr<engine::Communicator>(std::shared_ptr<engine::Communicator>(), comm);
  group.timeout = std::chrono::milliseconds(ctx->saved_data["timeout_ms"].toInt());
  return group;
}

void Remember(AutogradContext* ctx, const ParallelGroup& group) {
  ctx->saved_data["comm"] = Address(group);
  ctx->saved_data["timeout_ms"] = static_cast<int64_t>(group.timeout.count());
}

// x summed over the group into a fresh tensor (x itself is left alone). The ranks of a group hold
// tensors of one shape, so an empty one (a replica without samples) issues nothing on every rank.
at::Tensor SumOverGroup(const at::Tensor& x, const ParallelGroup& group) {
  at::Tensor sum = x.contiguous().clone();
  if (sum.numel() == 0) return sum;
  WaitOrThrow(group.comm->AllReduceSum(sum), group);
  return sum;
}

// [B, S/G, H, D] -> [B, S, H/G, D]
at::Tensor SwapToHeads(const at::Tensor& x, const ParallelGroup& group) {
  const int64_t g = group.size();
  TORCH_CHECK(x.dim() == 4, "SequenceToHeads: need [batch, sequence / ", g,
              ", heads, head_dim], got ", x.sizes());
  const int64_t batch = x.size(0), local = x.size(1), heads = x.size(2), dim = x.size(3);
  TORCH_CHECK(heads % g == 0, "SequenceToHeads: ", heads, " heads do not divide over ", g,
              " ranks of group '", group.comm->group_name(), "'");
  at::Tensor send =
      x.reshape({batch, local, g, heads / g, dim}).permute({2, 0, 1, 3, 4}).contiguous();
  at::Tensor received = at::empty_like(send);
  if (send.numel() > 0) WaitOrThrow(group.comm->AllToAll(send, received), group);
  // Chunk s holds rank s's positions: they come s-th in the sequence.
  return received.permute({1, 0, 2, 3, 4}).reshape({batch, g * local, heads / g, dim});
}

// [B, S, H/G, D] -> [B, S/G, H, D]
at::Tensor SwapToSequence(const at::Tensor& x, const ParallelGroup& group) {
  const int64_t g = group.size();
  TORCH_CHECK(x.dim() == 4, "HeadsToSequence: need [batch, sequence, heads / ", g,
              ", head_dim], got ", x.sizes());
  const int64_t batch = x.size(0), seq = x.size(1), heads = x.size(2), dim = x.size(3);
  TORCH_CHECK(seq % g == 0, "HeadsToSequence: a sequence of ", seq, " does not divide over ", g,
              " ranks of group '", group.comm->group_name(), "'");
  at::Tensor send =
      x.reshape({batch, g, seq / g, heads, dim}).permute({1, 0, 2, 3, 4}).contiguous();
  at::Tensor received = at::empty_like(send);
  if (send.numel() > 0) WaitOrThrow(group.comm->AllToAll(send, received), group);
  // Chunk s holds rank s's heads for this rank's positions.
  return received.permute({1, 2, 0, 3, 4}).reshape({batch, seq / g, g * heads, dim});
}

struct CopyToGroupFunction : public torch::autograd::Function<CopyToGroupFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const ParallelGroup& group) {
    Remember(ctx, group);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    return {SumOverGroup(grads[0], FromContext(ctx)), at::Tensor()};
  }
};

struct ReduceFromGroupFunction : public torch::autograd::Function<ReduceFromGroupFunction> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x, const ParallelGroup& group) {
    return SumOverGroup(x, group);
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

struct SequenceToHeadsFunction : public torch::autograd::Function<SequenceToHeadsFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const ParallelGroup& group) {
    Remember(ctx, group);
    return SwapToHeads(x, group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    return {SwapToSequence(grads[0], FromContext(ctx)), at::Tensor()};
  }
};

struct HeadsToSequenceFunction : public torch::autograd::Function<HeadsToSequenceFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const ParallelGroup& group) {
    Remember(ctx, group);
    return SwapToSequence(x, group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    return {SwapToHeads(grads[0], FromContext(ctx)), at::Tensor()};
  }
};

}  // namespace

Range EvenSplit(int64_t total, int parts, int rank) {
  const int64_t base = total / parts, extra = total % parts;
  Range range;
  range.begin = rank * base + std::min<int64_t>(rank, extra);
  range.end = range.begin + base + (rank < extra ? 1 : 0);
  return range;
}

void WaitOrThrow(const std::shared_ptr<engine::Work>& work, const ParallelGroup& group) {
  const absl::Status status = work->Wait(group.timeout);
  TORCH_CHECK(status.ok(), status.ToString());
}

at::Tensor CopyToGroup(const at::Tensor& x, const ParallelGroup& group) {
  if (!group.active()) return x;
  return CopyToGroupFunction::apply(x, group);
}

at::Tensor ReduceFromGroup(const at::Tensor& x, const ParallelGroup& group) {
  if (!group.active()) return x;
  return ReduceFromGroupFunction::apply(x, group);
}

at::Tensor SequenceToHeads(const at::Tensor& x, const ParallelGroup& group) {
  if (!group.active()) return x;
  return SequenceToHeadsFunction::apply(x, group);
}

at::Tensor HeadsToSequence(const at::Tensor& x, const ParallelGroup& group) {
  if (!group.active()) return x;
  return HeadsToSequenceFunction::apply(x, group);
}

at::Tensor GatherLastDim(const at::Tensor& x, int64_t total, const ParallelGroup& group) {
  if (!group.active()) return x;
  torch::NoGradGuard no_grad;
  const Range mine = EvenSplit(total, group.size(), group.rank());
  TORCH_CHECK(x.size(-1) == mine.size(), "GatherLastDim: rank ", group.rank(), " holds ",
              x.size(-1), " columns; its share of ", total, " is ", mine.size());
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = total;
  // Every other rank's columns are zero here: the sum is exact, also in bf16.
  at::Tensor full = at::zeros(sizes, x.options());
  full.narrow(-1, mine.begin, mine.size()).copy_(x);
  WaitOrThrow(group.comm->AllReduceSum(full), group);
  return full;
}

}  // namespace tandem::parallel
