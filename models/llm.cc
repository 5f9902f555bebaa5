#include "models/llm.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/compat.h"
#include "models/parameter_list.h"
#include "parallel/collectives.h"
#include "parallel/vocab_parallel.h"

namespace tandem::models {
namespace {

namespace F = torch::nn::functional;

torch::nn::Linear Projection(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

torch::nn::Linear NoBias(int64_t in, int64_t out) { return Projection(in, out, false); }

using TensorParallel = std::shared_ptr<const parallel::ParallelGroup>;

// With fewer KV heads than tensor-parallel ranks every rank holds all of k and v and uses the KV
// head of its query heads (NOTE [Tensor-parallel LLM]).
bool ReplicatesKvHeads(const LlmConfig& c, int size) { return size > 1 && c.kv_heads % size != 0; }

// Causal grouped-query attention with rotary positions; projections q, k, v (with biases when
// attention_bias) and o. On a tensor-parallel rank heads_ and kv_heads_ count this rank's heads.
class LlmAttentionImpl : public torch::nn::Module {
 public:
  LlmAttentionImpl(const LlmConfig& c, TensorParallel tp)
      : tp_(std::move(tp)),
        heads_(c.heads / tp_->size()),
        kv_heads_(ReplicatesKvHeads(c, tp_->size()) ? 1 : c.kv_heads / tp_->size()),
        head_dim_(c.resolved_head_dim()),
        q_(register_module("q", Projection(c.hidden, c.heads * head_dim_, c.attention_bias))),
        k_(register_module("k", Projection(c.hidden, c.kv_heads * head_dim_, c.attention_bias))),
        v_(register_module("v", Projection(c.hidden, c.kv_heads * head_dim_, c.attention_bias))),
        o_(register_module("o", NoBias(c.heads * head_dim_, c.hidden))) {
    if (ReplicatesKvHeads(c, tp_->size())) {
      // Query head j reads KV head j / (heads / kv_heads); this rank's query heads all read one.
      shared_kv_head_ = tp_->rank() * heads_ / (c.heads / c.kv_heads);
    }
  }

  // x [B, S, hidden]; cos/sin [S, head_dim] for the positions of x. With a cache, the keys and
  // values of x are appended to it and the queries attend to all of them (KvCache in llm.h).
  // With `mask` (bool [B, 1, S, S], packed samples) attention follows it instead of being causal.
  at::Tensor forward(const at::Tensor& input, const at::Tensor& cos, const at::Tensor& sin,
                     KvCache::Layer* cache = nullptr, const at::Tensor& mask = {}) {
    const at::Tensor x = parallel::CopyToGroup(input, *tp_);
    const int64_t batch = x.size(0), seq = x.size(1);
    at::Tensor q = LinearAs(q_, x).view({batch, seq, heads_, head_dim_}).transpose(1, 2);
    at::Tensor k = KeysOrValues(k_, x).view({batch, seq, kv_heads_, head_dim_}).transpose(1, 2);
    at::Tensor v = KeysOrValues(v_, x).view({batch, seq, kv_heads_, head_dim_}).transpose(1, 2);
    q = ApplyRotary(q, cos, sin);
    k = ApplyRotary(k, cos, sin);
    bool causal = true;
    if (cache != nullptr) {
      if (cache->keys.defined()) {
        TORCH_CHECK(seq == 1,
                    "Llm: a cached forward after the first takes one token at a time, got ", seq);
        k = torch::cat({cache->keys, k}, 2);
        v = torch::cat({cache->values, v}, 2);
        causal = false;  // one query, after every cached position
      }
      cache->keys = k;
      cache->values = v;
    }
    // Query head h reads KV head h / (heads / kv_heads), as HF's repeat_kv.
    const at::Tensor out = compat::ScaledDotProductAttention(q, k, v, causal, mask);
    return parallel::ReduceFromGroup(
        LinearAs(o_, out.transpose(1, 2).reshape({batch, seq, heads_ * head_dim_})), *tp_);
  }

  void Init(double std, double residual_std) {
    InitLinear(q_, std);
    InitLinear(k_, std);
    InitLinear(v_, std);
    InitLinear(o_, residual_std);
  }

 private:
  // k or v of x. With KV heads replicated over the group, the rows of this rank's KV head of the
  // whole weight, whose gradient is summed over the group so that every rank holds all of it.
  at::Tensor KeysOrValues(const torch::nn::Linear& linear, const at::Tensor& x) const {
    if (shared_kv_head_ < 0) return LinearAs(linear, x);
    const auto rows = [&](const at::Tensor& t) {
      return parallel::CopyToGroup(t, *tp_)
          .narrow(0, shared_kv_head_ * head_dim_, head_dim_)
          .to(x.scalar_type());
    };
    return at::linear(x, rows(linear->weight),
                      linear->bias.defined() ? rows(linear->bias) : at::Tensor());
  }

  TensorParallel tp_;
  int64_t heads_, kv_heads_, head_dim_;
  int64_t shared_kv_head_ = -1;  // with KV heads replicated: the one this rank's queries read
  torch::nn::Linear q_, k_, v_, o_;
};
TORCH_MODULE(LlmAttention);

// SwiGLU: down(silu(gate(x)) * up(x)), no biases. gate and up column-parallel, down row-parallel.
class LlmMlpImpl : public torch::nn::Module {
 public:
  LlmMlpImpl(int64_t hidden, int64_t mlp_hidden, TensorParallel tp)
      : tp_(std::move(tp)),
        gate_(register_module("gate", NoBias(hidden, mlp_hidden))),
        up_(register_module("up", NoBias(hidden, mlp_hidden))),
        down_(register_module("down", NoBias(mlp_hidden, hidden))) {}

  at::Tensor forward(const at::Tensor& input) {
    const at::Tensor x = parallel::CopyToGroup(input, *tp_);
    return parallel::ReduceFromGroup(
        LinearAs(down_, torch::silu(LinearAs(gate_, x)) * LinearAs(up_, x)), *tp_);
  }

  void Init(double std, double residual_std) {
    InitLinear(gate_, std);
    InitLinear(up_, std);
    InitLinear(down_, residual_std);
  }

 private:
  TensorParallel tp_;
  torch::nn::Linear gate_, up_, down_;
};
TORCH_MODULE(LlmMlp);

// Decoder block. Inputs {x [B, S, hidden], cos [S, head_dim], sin [S, head_dim]}, outputs {x'};
// packed rows add a mask: {x, cos [B, 1, S, head_dim], sin (likewise), mask [B, 1, S, S]}.
class LlmBlock : public engine::BlockModule {
 public:
  LlmBlock(const LlmConfig& c, const TensorParallel& tp)
      : attn_norm_(register_module("attn_norm", RmsNorm(c.hidden, c.norm_eps))),
        attn_(register_module("attn", LlmAttention(c, tp))),
        mlp_norm_(register_module("mlp_norm", RmsNorm(c.hidden, c.norm_eps))),
        mlp_(register_module("mlp", LlmMlp(c.hidden, c.mlp_hidden, tp))) {
    const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(c.layers));
    attn_->Init(kInitStd, residual_std);
    mlp_->Init(kInitStd, residual_std);
  }

  std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs) override {
    return {RunCached(inputs[0], inputs[1], inputs[2], nullptr,
                      inputs.size() > 3 ? inputs[3] : at::Tensor())};
  }

  at::Tensor RunCached(at::Tensor x, const at::Tensor& cos, const at::Tensor& sin,
                       KvCache::Layer* cache, const at::Tensor& mask = {}) {
    x = x + attn_(attn_norm_(x), cos, sin, cache, mask);
    x = x + mlp_(mlp_norm_(x));
    return x;
  }

 private:
  RmsNorm attn_norm_;
  LlmAttention attn_;
  RmsNorm mlp_norm_;
  LlmMlp mlp_;
};

void CheckConfig(const LlmConfig& c) {
  TORCH_CHECK(c.vocab_size > 0, "Llm: vocab_size must be set (> 0), got ", c.vocab_size);
  TORCH_CHECK(c.hidden > 0 && c.layers >= 0 && c.heads > 0 && c.kv_heads > 0 && c.mlp_hidden > 0 &&
                  c.max_seq_len > 0,
              "Llm: sizes must be positive (hidden ", c.hidden, ", layers ", c.layers, ", heads ",
              c.heads, ", kv_heads ", c.kv_heads, ", mlp_hidden ", c.mlp_hidden, ", max_seq_len ",
              c.max_seq_len, ")");
  if (c.head_dim > 0) {
    TORCH_CHECK(c.head_dim % 2 == 0, "Llm: head_dim must be even, got ", c.head_dim);
  } else {
    TORCH_CHECK(c.hidden % c.heads == 0 && (c.hidden / c.heads) % 2 == 0, "Llm: hidden ", c.hidden,
                " must be a multiple of heads ", c.heads, " with an even head_dim");
  }
  TORCH_CHECK(c.image_token_id < c.vocab_size, "Llm: image_token_id ", c.image_token_id,
              " is outside the vocabulary of ", c.vocab_size);
  TORCH_CHECK(c.heads % c.kv_heads == 0, "Llm: heads ", c.heads, " must be a multiple of kv_heads ",
              c.kv_heads);
}

void CheckTensorParallel(const LlmConfig& c, int size) {
  if (size == 1) return;
  TORCH_CHECK(c.heads % size == 0, "Llm: ", c.heads, " heads do not split over ", size,
              " tensor-parallel ranks");
  TORCH_CHECK(c.kv_heads % size == 0 || size % c.kv_heads == 0, "Llm: ", c.kv_heads,
              " KV heads neither split over ", size,
              " tensor-parallel ranks nor replicate over them evenly");
  TORCH_CHECK(c.mlp_hidden % size == 0, "Llm: mlp_hidden ", c.mlp_hidden, " does not split over ",
              size, " tensor-parallel ranks");
  TORCH_CHECK(c.vocab_size >= size, "Llm: a vocabulary of ", c.vocab_size, " for ", size,
              " tensor-parallel ranks");
}

}  // namespace

parallel::Shard LlmParameterShard(const LlmConfig& c, std::string_view name, int size, int rank) {
  parallel::Shard shard;
  const TensorSplit split = LlmParameterSplit(c, name, size);
  if (split.dim < 0) return shard;
  shard.dim = split.dim;
  shard.full = split.full;
  shard.range = parallel::EvenSplit(split.full, size, rank);
  return shard;
}

void LlmImpl::TakeShards(torch::nn::Module& module, const std::string& prefix) {
  if (!tensor_parallel_->active()) return;
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string name = prefix + item.key();
    const parallel::Shard shard =
        LlmParameterShard(config_, name, tensor_parallel_->size(), tensor_parallel_->rank());
    if (!shard.split()) continue;
    item.value().set_data(parallel::TakeShard(item.value(), shard));
    shards_[name] = shard;
  }
}

LlmImpl::LlmImpl(const LlmConfig& config, parallel::ParallelGroup tensor_parallel)
    : config_(config),
      tensor_parallel_(
          std::make_shared<const parallel::ParallelGroup>(std::move(tensor_parallel))) {
  CheckConfig(config_);
  CheckTensorParallel(config_, tensor_parallel_->size());
  const auto& c = config_;
  vocab_columns_ =
      parallel::EvenSplit(c.vocab_size, tensor_parallel_->size(), tensor_parallel_->rank());
  // Each part is built whole, initialised in the single-process order and cut to this rank's shard
  // before the next is built (NOTE [Tensor-parallel LLM]).
  embed_ = register_module("embed", torch::nn::Embedding(c.vocab_size, c.hidden));
  InitNormal(embed_->weight, kInitStd);
  TakeShards(*embed_, "embed.");
  block_list_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.layers; ++i) {
    auto block = std::make_shared<LlmBlock>(c, tensor_parallel_);
    TakeShards(*block, "blocks." + std::to_string(i) + ".");
    block_list_->push_back(block);
    blocks_.push_back(block);
  }
  norm_ = register_module("norm", RmsNorm(c.hidden, c.norm_eps));
  if (!c.tie_embeddings) {
    head_ = register_module("head", NoBias(c.hidden, c.vocab_size));
    InitLinear(head_, kInitStd);
    TakeShards(*head_, "head.");
  }
  if (c.image_newline) {  // transformers' LlavaNextModel: randn(hidden) / sqrt(hidden)
    image_newline_ = register_parameter(
        "image_newline", torch::randn({c.hidden}) / std::sqrt(static_cast<double>(c.hidden)));
  }
  RotaryTables rope =
      MakeRotaryTables(c.resolved_head_dim(), c.max_seq_len, c.rope_theta, c.rope_scaling);
  rope_cos_ = register_buffer("rope_cos", rope.cos);
  rope_sin_ = register_buffer("rope_sin", rope.sin);
}

at::Tensor LlmImpl::forward(const at::Tensor& prefix, const at::Tensor& tokens,
                            const Packing* packing) {
  return Forward(prefix, tokens, nullptr, nullptr, nullptr, packing);
}

at::Tensor LlmImpl::ForwardLast(const at::Tensor& prefix, const at::Tensor& tokens,
                                const at::Tensor& last) {
  TORCH_CHECK(last.defined() && last.dim() == 1 && last.size(0) == tokens.size(0),
              "Llm: last must be [", tokens.size(0), "], got ",
              last.defined() ? last.sizes() : at::IntArrayRef{});
  return Forward(prefix, tokens, nullptr, &last, nullptr);
}

at::Tensor LlmImpl::ForwardRows(const at::Tensor& prefix, const at::Tensor& tokens,
                                const at::Tensor& rows, const Packing* packing) {
  TORCH_CHECK(rows.defined() && rows.dim() == 1 && rows.scalar_type() == at::kLong,
              "Llm: rows must be int64 [N], got ",
              rows.defined() ? rows.sizes() : at::IntArrayRef{});
  return Forward(prefix, tokens, nullptr, nullptr, &rows, packing);
}

at::Tensor LlmImpl::ForwardCached(const at::Tensor& prefix, const at::Tensor& tokens,
                                  KvCache& cache) {
  if (cache.layers.empty()) cache.layers.resize(blocks_.size());
  TORCH_CHECK(cache.layers.size() == blocks_.size(), "Llm: a KV cache of ", cache.layers.size(),
              " layers for a model of ", blocks_.size());
  return Forward(prefix, tokens, &cache, nullptr, nullptr);
}

at::Tensor LlmImpl::Forward(const at::Tensor& prefix, const at::Tensor& tokens, KvCache* cache,
                            const at::Tensor* last, const at::Tensor* rows,
                            const Packing* packing) {
  const auto& c = config_;
  TORCH_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.size(1) >= 1,
              "Llm: tokens must be [batch, text_len >= 1], got ",
              tokens.defined() ? tokens.sizes() : at::IntArrayRef{});
  TORCH_CHECK(tokens.scalar_type() == at::kLong, "Llm: tokens must be int64, got ",
              tokens.scalar_type());
  const int64_t batch = tokens.size(0), text = tokens.size(1);
  const bool has_prefix = prefix.defined() && prefix.numel() > 0;
  if (has_prefix && c.image_token_id < 0) {
    TORCH_CHECK(prefix.dim() == 3 && prefix.size(0) == batch && prefix.size(2) == c.hidden,
                "Llm: prefix must be [", batch, ", patches, ", c.hidden, "] to match tokens ",
                tokens.sizes(), ", got ", prefix.sizes());
  } else if (has_prefix) {
    TORCH_CHECK(prefix.dim() == 3 && prefix.size(2) == c.hidden,
                "Llm: image embeddings must be [images, positions, ", c.hidden, "], got ",
                prefix.sizes());
  }
  // LLaVA's layout puts the embeddings in place of the image tokens; otherwise they are a prefix.
  const int64_t patches = has_prefix && c.image_token_id < 0 ? prefix.size(1) : 0;
  const int64_t start = cache != nullptr ? cache->length : 0;
  TORCH_CHECK(start + patches + text <= c.max_seq_len, "Llm: sequence of ", start, " cached + ",
              patches, " prefix positions + ", text, " tokens = ", start + patches + text,
              " exceeds max_seq_len ", c.max_seq_len);

  // The residual stream runs in the compute dtype (NOTE [Model dtypes]); an autocast prefix (bf16)
  // is cast to it, and its gradient flows back in the prefix's own dtype.
  const auto dtype = compute_dtype_.value_or(embed_->weight.scalar_type());
  at::Tensor x =
      parallel::VocabParallelEmbedding(embed_->weight, tokens, vocab_columns_, *tensor_parallel_)
          .to(dtype);
  // While decoding (a cache and no image) a generated image token is embedded as any token, as
  // transformers does; otherwise the image tokens must match the embeddings given.
  if (c.image_token_id >= 0 && (has_prefix || cache == nullptr || cache->length == 0)) {
    const at::Tensor mask = tokens.eq(c.image_token_id);
    const int64_t placeholders = mask.sum().item<int64_t>();
    const int64_t rows = has_prefix ? prefix.size(0) * prefix.size(1) : 0;
    TORCH_CHECK(placeholders == rows, "Llm: the text holds ", placeholders, " image tokens (id ",
                c.image_token_id, ") for ", rows, " image embeddings",
                has_prefix ? "" : " (no image)");
    if (rows > 0) x = x.masked_scatter(mask.unsqueeze(-1).expand_as(x), prefix.to(dtype));
  } else if (patches > 0) {
    x = torch::cat({prefix.to(dtype), x}, 1);
  }
  const int64_t seq = patches + text;
  at::Tensor cos = rope_cos_.narrow(0, start, seq);
  at::Tensor sin = rope_sin_.narrow(0, start, seq);
  at::Tensor mask;
  if (packing != nullptr) {
    TORCH_CHECK(cache == nullptr && patches == 0,
                "Llm: packed rows need LLaVA's layout (images in place of their tokens) and no "
                "cache");
    TORCH_CHECK(packing->positions.defined() && packing->segments.defined() &&
                    packing->positions.sizes() == tokens.sizes() &&
                    packing->segments.sizes() == tokens.sizes(),
                "Llm: packing positions and segments must be ", tokens.sizes(), " like tokens");
    const at::Tensor positions = packing->positions.to(x.device());
    TORCH_CHECK(positions.numel() == 0 || (positions.min().item<int64_t>() >= 0 &&
                                           positions.max().item<int64_t>() < c.max_seq_len),
                "Llm: packed positions must lie in [0, max_seq_len ", c.max_seq_len, ")");
    const auto table = [&](const at::Tensor& rope) {
      return rope.index_select(0, positions.flatten()).view({batch, 1, text, rope.size(1)});
    };
    cos = table(rope_cos_);
    sin = table(rope_sin_);
    const at::Tensor segments = packing->segments.to(x.device());
    const at::Tensor causal = at::ones({text, text}, segments.options().dtype(at::kBool)).tril();
    mask = segments.unsqueeze(2).eq(segments.unsqueeze(1)).logical_and(causal).unsqueeze(1);
  }
  if (cache != nullptr) {
    for (size_t i = 0; i < blocks_.size(); ++i) {
      x = static_cast<LlmBlock&>(*blocks_[i]).RunCached(x, cos, sin, &cache->layers[i]);
    }
    cache->length = start + seq;
  } else {
    for (const auto& block : blocks_) {
      x = block->Forward(mask.defined() ? std::vector<at::Tensor>{x, cos, sin, mask}
                                        : std::vector<at::Tensor>{x, cos, sin})[0];
    }
  }
  // RMSNorm is per position, so normalising only the text positions gives the same logits. A
  // cached forward (decoding) needs the last position's only, ForwardLast one token's per row.
  if (cache != nullptr) {
    x = norm_(x.narrow(1, seq - 1, 1));
  } else if (last != nullptr) {
    const at::Tensor batch_rows =
        torch::arange(batch, torch::TensorOptions().dtype(torch::kLong).device(x.device()));
    x = norm_(x.narrow(1, patches, text).index({batch_rows, last->to(x.device())}).unsqueeze(1));
  } else if (rows != nullptr) {
    x = norm_(x.narrow(1, patches, text)
                  .reshape({batch * text, x.size(2)})
                  .index_select(0, rows->to(x.device())));
  } else {
    x = norm_(x.narrow(1, patches, text));
  }
  // The head is column-parallel over the vocabulary: this rank's logits.
  x = parallel::CopyToGroup(x, *tensor_parallel_);
  at::Tensor logits =
      c.tie_embeddings ? at::linear(x, embed_->weight.to(x.scalar_type())) : LinearAs(head_, x);
  if (cache == nullptr && last == nullptr) return logits;  // forward's, or ForwardRows
  return parallel::GatherLastDim(logits, c.vocab_size,
                                 *tensor_parallel_);  // generation reads all of them
}

void LlmImpl::set_compute_dtype(c10::optional<at::ScalarType> dtype) { compute_dtype_ = dtype; }

void LlmImpl::set_recompute(bool recompute) {
  for (const auto& block : blocks_) block->set_recompute(recompute);
}

namespace {

// The text positions that predict a target (position t of row b predicts labels[b, t + 1]) as flat
// indices b * T + t into [B, T], and their targets. Synchronises with the device (nonzero).
struct Targeted {
  at::Tensor rows;
  at::Tensor targets;
};

Targeted TargetedPositions(const at::Tensor& labels) {
  const int64_t length = labels.size(1);
  const at::Tensor next = labels.narrow(1, 1, std::max<int64_t>(length - 1, 0));
  const at::Tensor targeted = next.ne(kIgnoreLabel).nonzero();  // [N, 2]: (b, t)
  const at::Tensor b = targeted.select(1, 0), t = targeted.select(1, 1);
  return {b * length + t, next.index({b, t})};
}

}  // namespace

TokenLoss LabelLoss(const at::Tensor& logits, const at::Tensor& labels,
                    const parallel::ParallelGroup& group, const parallel::Range& columns) {
  TORCH_CHECK(logits.defined() && labels.defined() && logits.dim() == 3 && labels.dim() == 2 &&
                  logits.size(0) == labels.size(0) && logits.size(1) == labels.size(1),
              "LabelLoss: logits [batch, T, vocab] and labels [batch, T] must agree, got logits ",
              logits.defined() ? logits.sizes() : at::IntArrayRef{}, " and labels ",
              labels.defined() ? labels.sizes() : at::IntArrayRef{});
  const int64_t length = labels.size(1), vocab = logits.size(2);
  if (length < 2)
    return {logits.to(at::kFloat).sum() * 0.0, 0};  // nothing to predict; keeps the graph
  // Only the labelled positions are converted to fp32: prompts, images and padding are most of a
  // conversation, and a [B, T, vocab] fp32 copy is large with a real vocabulary.
  const Targeted targeted = TargetedPositions(labels);
  const at::Tensor predictions = logits.reshape({-1, vocab}).index_select(0, targeted.rows);
  // Without a group this is cross_entropy's sum (vocab_parallel.h).
  const parallel::Range whole{0, vocab};
  return {parallel::VocabParallelCrossEntropySum(predictions, targeted.targets,
                                                 group.active() ? columns : whole, group),
          targeted.rows.size(0)};
}

TokenLoss LabelLoss(const Llm& llm, const at::Tensor& logits, const at::Tensor& labels) {
  return LabelLoss(logits, labels, llm->tensor_parallel(), llm->vocab_columns());
}

TokenLoss ForwardLabelLoss(Llm& llm, const at::Tensor& prefix, const at::Tensor& tokens,
                           const at::Tensor& labels, const Packing* packing) {
  TORCH_CHECK(
      tokens.defined() && labels.defined() && tokens.dim() == 2 && labels.sizes() == tokens.sizes(),
      "ForwardLabelLoss: tokens and labels must both be [batch, T], got ",
      tokens.defined() ? tokens.sizes() : at::IntArrayRef{}, " and ",
      labels.defined() ? labels.sizes() : at::IntArrayRef{});
  const Targeted targeted = TargetedPositions(labels);
  const at::Tensor logits = llm->ForwardRows(prefix, tokens, targeted.rows, packing);
  // Without tensor parallelism vocab_columns() is the whole vocabulary.
  return {parallel::VocabParallelCrossEntropySum(logits, targeted.targets, llm->vocab_columns(),
                                                 llm->tensor_parallel()),
          targeted.rows.size(0)};
}

TokenLoss CaptionLoss(const at::Tensor& logits, const at::Tensor& tokens, int64_t pad_id) {
  TORCH_CHECK(tokens.defined(), "CaptionLoss: tokens are undefined");
  return LabelLoss(logits, tokens.masked_fill(tokens.eq(pad_id), kIgnoreLabel));
}

TokenLoss CaptionLoss(const Llm& llm, const at::Tensor& logits, const at::Tensor& tokens,
                      int64_t pad_id) {
  TORCH_CHECK(tokens.defined(), "CaptionLoss: tokens are undefined");
  return LabelLoss(llm, logits, tokens.masked_fill(tokens.eq(pad_id), kIgnoreLabel));
}

std::vector<std::vector<int64_t>> GenerateGreedyBatch(
    Llm& llm, const at::Tensor& images, const std::vector<std::vector<int64_t>>& prompts,
    int64_t pad_id, const std::vector<int64_t>& stop_ids, int64_t max_new_tokens,
    bool stop_when_done) {
  torch::NoGradGuard no_grad;
  const int64_t batch = static_cast<int64_t>(prompts.size());
  TORCH_CHECK(batch > 0, "GenerateGreedyBatch: no prompts");
  for (const auto& prompt : prompts)
    TORCH_CHECK(!prompt.empty(), "GenerateGreedyBatch: a prompt has no tokens");
  TORCH_CHECK(!images.defined() || images.size(0) == batch || llm->config().image_token_id >= 0,
              "GenerateGreedyBatch: ", images.size(0), " prefix rows for ", batch, " prompts");
  // A prefix adds its positions ahead of the tokens; LLaVA's image rows stand in for tokens.
  const int64_t prefix = images.defined() && llm->config().image_token_id < 0 ? images.size(1) : 0;
  const auto device = images.defined() ? images.device() : llm->parameters().front().device();
  const auto long_options = torch::TensorOptions().dtype(torch::kLong);

  // A row stops at a stop id or when it fills the positions; a stopped row no longer grows.
  const size_t capacity =
      static_cast<size_t>(std::max<int64_t>(llm->config().max_seq_len - prefix, 0));
  std::vector<std::vector<int64_t>> sequences = prompts;
  std::vector<std::vector<int64_t>> generated(static_cast<size_t>(batch));
  std::vector<bool> done(static_cast<size_t>(batch), false);
  int64_t remaining = batch;
  const auto finish = [&](int64_t b) {
    done[b] = true;
    --remaining;
  };
  for (int64_t b = 0; b < batch; ++b) {
    if (sequences[b].size() > capacity) finish(b);  // the prompt alone overflows
  }
  for (int64_t step = 0; step < max_new_tokens && (remaining > 0 || !stop_when_done); ++step) {
    size_t longest = 0;
    for (const auto& sequence : sequences) longest = std::max(longest, sequence.size());
    longest = std::min(longest, capacity);
    // Right-padded: a causal model's logits at a row's last token do not see the padding after it.
    at::Tensor tokens = torch::full({batch, static_cast<int64_t>(longest)}, pad_id, long_options);
    at::Tensor last = torch::empty({batch}, long_options);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t length = static_cast<int64_t>(std::min(sequences[b].size(), longest));
      tokens[b]
          .narrow(0, 0, length)
          .copy_(torch::tensor(sequences[b], long_options).narrow(0, 0, length));
      last[b] = length - 1;
    }
    const at::Tensor logits = llm->ForwardLast(images, tokens.to(device), last);  // [B, 1, vocab]
    const at::Tensor next = logits.select(1, 0).argmax(-1).to(torch::kCPU);
    const auto ids = next.accessor<int64_t, 1>();
    for (int64_t b = 0; b < batch; ++b) {
      if (done[b]) continue;
      if (std::find(stop_ids.begin(), stop_ids.end(), ids[b]) != stop_ids.end()) {
        finish(b);
        continue;
      }
      generated[b].push_back(ids[b]);
      // An image token the model writes has no image behind it: the row ends there, the token
      // kept in its output.
      if (ids[b] == llm->config().image_token_id) {
        finish(b);
        continue;
      }
      sequences[b].push_back(ids[b]);
      if (sequences[b].size() > capacity) finish(b);  // cannot be read again
    }
  }
  return generated;
}

std::vector<std::vector<int32_t>> GenerateGreedy(Llm& llm, const at::Tensor& prefix, int64_t bos_id,
                                                 int64_t eos_id, int64_t max_new_tokens,
                                                 bool stop_when_done) {
  const int64_t batch = prefix.defined() ? prefix.size(0) : 1;
  const auto rows =
      GenerateGreedyBatch(llm, prefix, std::vector<std::vector<int64_t>>(batch, {bos_id}),
                          /*pad_id=*/bos_id, {eos_id}, max_new_tokens, stop_when_done);
  std::vector<std::vector<int32_t>> generated;
  for (const auto& row : rows) generated.emplace_back(row.begin(), row.end());
  return generated;
}

std::vector<int64_t> GenerateGreedyCached(Llm& llm, const at::Tensor& images,
                                          const std::vector<int64_t>& prompt,
                                          const std::vector<int64_t>& stop_ids,
                                          int64_t max_new_tokens) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(!prompt.empty(), "GenerateGreedyCached: the prompt has no tokens");
  const auto device = llm->parameters().front().device();
  const auto long_options = torch::TensorOptions().dtype(torch::kLong);
  KvCache cache;
  at::Tensor tokens = torch::tensor(prompt, long_options).unsqueeze(0).to(device);
  at::Tensor prefix = images.defined() ? images.to(device) : images;
  std::vector<int64_t> generated;
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    if (step > 0 && cache.length + 1 > llm->config().max_seq_len) break;
    const at::Tensor logits = llm->ForwardCached(prefix, tokens, cache);
    const int64_t next = logits.select(1, -1).argmax(-1).item<int64_t>();
    generated.push_back(next);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
    tokens = torch::full({1, 1}, next, long_options.device(device));
    prefix = at::Tensor();
  }
  return generated;
}

}  // namespace tandem::models
