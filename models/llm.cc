#include "models/llm.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "engine/compat.h"

namespace tandem::models {
namespace {

namespace F = torch::nn::functional;

torch::nn::Linear NoBias(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

// Causal grouped-query attention with rotary positions; projections q, k, v, o without bias.
class LlmAttentionImpl : public torch::nn::Module {
 public:
  explicit LlmAttentionImpl(const LlmConfig& c)
      : heads_(c.heads),
        kv_heads_(c.kv_heads),
        head_dim_(c.hidden / c.heads),
        q_(register_module("q", NoBias(c.hidden, c.heads * head_dim_))),
        k_(register_module("k", NoBias(c.hidden, c.kv_heads * head_dim_))),
        v_(register_module("v", NoBias(c.hidden, c.kv_heads * head_dim_))),
        o_(register_module("o", NoBias(c.heads * head_dim_, c.hidden))) {}

  // x [B, S, hidden]; cos/sin [S, head_dim].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    const int64_t batch = x.size(0), seq = x.size(1);
    at::Tensor q = LinearAs(q_, x).view({batch, seq, heads_, head_dim_}).transpose(1, 2);
    at::Tensor k = LinearAs(k_, x).view({batch, seq, kv_heads_, head_dim_}).transpose(1, 2);
    at::Tensor v = LinearAs(v_, x).view({batch, seq, kv_heads_, head_dim_}).transpose(1, 2);
    q = ApplyRotary(q, cos, sin);
    k = ApplyRotary(k, cos, sin);
    if (kv_heads_ != heads_) {  // query head h reads kv head h / (heads / kv_heads), as HF repeat_kv
      const int64_t repeat = heads_ / kv_heads_;
      k = k.unsqueeze(2).expand({batch, kv_heads_, repeat, seq, head_dim_}).reshape({batch, heads_, seq, head_dim_});
      v = v.unsqueeze(2).expand({batch, kv_heads_, repeat, seq, head_dim_}).reshape({batch, heads_, seq, head_dim_});
    }
    const at::Tensor out = compat::ScaledDotProductAttention(q, k, v, /*is_causal=*/true);
    return LinearAs(o_, out.transpose(1, 2).reshape({batch, seq, heads_ * head_dim_}));
  }

  void Init(double std, double residual_std) {
    InitLinear(q_, std);
    InitLinear(k_, std);
    InitLinear(v_, std);
    InitLinear(o_, residual_std);
  }

 private:
  int64_t heads_, kv_heads_, head_dim_;
  torch::nn::Linear q_, k_, v_, o_;
};
TORCH_MODULE(LlmAttention);

// SwiGLU: down(silu(gate(x)) * up(x)), no biases.
class LlmMlpImpl : public torch::nn::Module {
 public:
  LlmMlpImpl(int64_t hidden, int64_t mlp_hidden)
      : gate_(register_module("gate", NoBias(hidden, mlp_hidden))),
        up_(register_module("up", NoBias(hidden, mlp_hidden))),
        down_(register_module("down", NoBias(mlp_hidden, hidden))) {}

  at::Tensor forward(const at::Tensor& x) { return LinearAs(down_, torch::silu(LinearAs(gate_, x)) * LinearAs(up_, x)); }

  void Init(double std, double residual_std) {
    InitLinear(gate_, std);
    InitLinear(up_, std);
    InitLinear(down_, residual_std);
  }

 private:
  torch::nn::Linear gate_, up_, down_;
};
TORCH_MODULE(LlmMlp);

// Decoder block. Inputs {x [B, S, hidden], cos [S, head_dim], sin [S, head_dim]}, outputs {x'}.
class LlmBlock : public engine::BlockModule {
 public:
  explicit LlmBlock(const LlmConfig& c)
      : attn_norm_(register_module("attn_norm", RmsNorm(c.hidden, c.norm_eps))),
        attn_(register_module("attn", LlmAttention(c))),
        mlp_norm_(register_module("mlp_norm", RmsNorm(c.hidden, c.norm_eps))),
        mlp_(register_module("mlp", LlmMlp(c.hidden, c.mlp_hidden))) {
    const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(c.layers));
    attn_->Init(kInitStd, residual_std);
    mlp_->Init(kInitStd, residual_std);
  }

  std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs) override {
    at::Tensor x = inputs[0];
    x = x + attn_(attn_norm_(x), inputs[1], inputs[2]);
    x = x + mlp_(mlp_norm_(x));
    return {x};
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
              "Llm: sizes must be positive (hidden ", c.hidden, ", layers ", c.layers, ", heads ", c.heads,
              ", kv_heads ", c.kv_heads, ", mlp_hidden ", c.mlp_hidden, ", max_seq_len ", c.max_seq_len, ")");
  TORCH_CHECK(c.hidden % c.heads == 0 && (c.hidden / c.heads) % 2 == 0, "Llm: hidden ", c.hidden,
              " must be a multiple of heads ", c.heads, " with an even head_dim");
  TORCH_CHECK(c.heads % c.kv_heads == 0, "Llm: heads ", c.heads, " must be a multiple of kv_heads ", c.kv_heads);
}

}  // namespace

LlmImpl::LlmImpl(const LlmConfig& config) : config_(config) {
  CheckConfig(config_);
  const auto& c = config_;
  embed_ = register_module("embed", torch::nn::Embedding(c.vocab_size, c.hidden));
  InitNormal(embed_->weight, kInitStd);
  block_list_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.layers; ++i) {
    auto block = std::make_shared<LlmBlock>(c);
    block_list_->push_back(block);
    blocks_.push_back(block);
  }
  norm_ = register_module("norm", RmsNorm(c.hidden, c.norm_eps));
  if (!c.tie_embeddings) {
    head_ = register_module("head", NoBias(c.hidden, c.vocab_size));
    InitLinear(head_, kInitStd);
  }
  RotaryTables rope = MakeRotaryTables(c.hidden / c.heads, c.max_seq_len, c.rope_theta);
  rope_cos_ = register_buffer("rope_cos", rope.cos);
  rope_sin_ = register_buffer("rope_sin", rope.sin);
}

at::Tensor LlmImpl::forward(const at::Tensor& prefix, const at::Tensor& tokens) {
  const auto& c = config_;
  TORCH_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.size(1) >= 1,
              "Llm: tokens must be [batch, text_len >= 1], got ",
              tokens.defined() ? tokens.sizes() : at::IntArrayRef{});
  TORCH_CHECK(tokens.scalar_type() == at::kLong, "Llm: tokens must be int64, got ", tokens.scalar_type());
  const int64_t batch = tokens.size(0), text = tokens.size(1);
  int64_t patches = 0;
  if (prefix.defined()) {
    TORCH_CHECK(prefix.dim() == 3 && prefix.size(0) == batch && prefix.size(2) == c.hidden,
                "Llm: prefix must be [", batch, ", patches, ", c.hidden, "] to match tokens ", tokens.sizes(),
                ", got ", prefix.sizes());
    patches = prefix.size(1);
  }
  TORCH_CHECK(patches + text <= c.max_seq_len, "Llm: sequence of ", patches, " prefix positions + ", text,
              " tokens = ", patches + text, " exceeds max_seq_len ", c.max_seq_len);

  // The residual stream runs in the compute dtype (NOTE [Model dtypes]); an autocast prefix (bf16)
  // is cast to it, and its gradient flows back in the prefix's own dtype.
  const auto dtype = compute_dtype_.value_or(embed_->weight.scalar_type());
  at::Tensor x = embed_(tokens).to(dtype);
  if (patches > 0) x = torch::cat({prefix.to(dtype), x}, 1);
  const int64_t seq = patches + text;
  const at::Tensor cos = rope_cos_.narrow(0, 0, seq);
  const at::Tensor sin = rope_sin_.narrow(0, 0, seq);
  for (const auto& block : blocks_) x = block->Forward({x, cos, sin})[0];
  // RMSNorm is per position, so normalising only the text positions gives the same logits.
  x = norm_(x.narrow(1, patches, text));
  return c.tie_embeddings ? at::linear(x, embed_->weight.to(x.scalar_type())) : LinearAs(head_, x);
}

void LlmImpl::set_compute_dtype(c10::optional<at::ScalarType> dtype) { compute_dtype_ = dtype; }

void LlmImpl::set_recompute(bool recompute) {
  for (const auto& block : blocks_) block->set_recompute(recompute);
}

TokenLoss CaptionLoss(const at::Tensor& logits, const at::Tensor& tokens, int64_t pad_id) {
  TORCH_CHECK(logits.defined() && tokens.defined() && logits.dim() == 3 && tokens.dim() == 2 &&
                  logits.size(0) == tokens.size(0) && logits.size(1) == tokens.size(1),
              "CaptionLoss: logits [batch, T, vocab] and tokens [batch, T] must agree, got logits ",
              logits.defined() ? logits.sizes() : at::IntArrayRef{}, " and tokens ",
              tokens.defined() ? tokens.sizes() : at::IntArrayRef{});
  const int64_t text = tokens.size(1), vocab = logits.size(2);
  if (text < 2) return {logits.to(at::kFloat).sum() * 0.0, 0};  // nothing to predict; keeps the graph
  const at::Tensor predictions = logits.narrow(1, 0, text - 1).reshape({-1, vocab}).to(at::kFloat);
  const at::Tensor targets = tokens.narrow(1, 1, text - 1).reshape({-1});
  TokenLoss loss;
  loss.sum = F::cross_entropy(predictions, targets,
                              F::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(pad_id));
  loss.count = targets.ne(pad_id).sum().item<int64_t>();
  return loss;
}

std::vector<std::vector<int32_t>> GenerateGreedy(Llm& llm, const at::Tensor& prefix, int64_t bos_id,
                                                 int64_t eos_id, int64_t max_new_tokens, bool stop_when_done) {
  torch::NoGradGuard no_grad;
  const int64_t batch = prefix.defined() ? prefix.size(0) : 1;
  const int64_t patches = prefix.defined() ? prefix.size(1) : 0;
  const auto device = prefix.defined() ? prefix.device() : llm->parameters().front().device();
  const int64_t steps = std::min(max_new_tokens, llm->config().max_seq_len - patches);

  std::vector<std::vector<int32_t>> generated(static_cast<size_t>(batch));
  std::vector<bool> done(static_cast<size_t>(batch), false);
  int64_t remaining = batch;
  at::Tensor tokens = torch::full({batch, 1}, bos_id, torch::TensorOptions().dtype(torch::kLong).device(device));
  for (int64_t step = 0; step < steps && (remaining > 0 || !stop_when_done); ++step) {
    const at::Tensor next = llm->forward(prefix, tokens).select(1, -1).argmax(-1);  // [B]
    const at::Tensor host = next.to(torch::kCPU);
    const auto ids = host.accessor<int64_t, 1>();
    for (int64_t b = 0; b < batch; ++b) {
      if (done[b]) continue;
      if (ids[b] == eos_id) {
        done[b] = true;
        --remaining;
      } else {
        generated[b].push_back(static_cast<int32_t>(ids[b]));
      }
    }
    tokens = torch::cat({tokens, next.unsqueeze(1)}, 1);
  }
  return generated;
}

}  // namespace tandem::models
