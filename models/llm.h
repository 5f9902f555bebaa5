// Llm: a Llama-style decoder that reads image embeddings as a prefix before the text tokens (LLaVA
// style; DESIGN §4). Architecture, parameter names and count formula: models/README.md.
//
//   x = [prefix ; embed(tokens)]                      [B, P + T, hidden], one causal sequence
//   layers x block: x += o(Attn(RoPE(q(n)), RoPE(k(n)), v(n))) with n = RMSNorm(x), causal, GQA
//                   x += down(silu(gate(n)) * up(n))  with n = RMSNorm(x)
//   logits = head(RMSNorm(x[:, P:]))                  [B, T, vocab], text positions only
//
// Each decoder block is an engine::BlockModule called through Forward (ZeRO-3 gathering, recompute).
// Dtypes: NOTE [Model dtypes] in models/layers.h; under autocast the logits have the autocast dtype
// (CaptionLoss computes in fp32).
//
// Conventions (models/README.md): position p of the sequence attends to positions <= p, so every
// text position sees the whole prefix and the text before it; logits[:, t] predicts tokens[:, t + 1].
//
// Errors: the constructor, forward and the helpers throw c10::Error (TORCH_CHECK) for an inconsistent
// config or wrongly shaped inputs; messages name the sizes. Token ids are not range-checked here (that
// would synchronise with the device): an id outside [0, vocab_size) fails inside the embedding.
// Thread-compatible: one forward at a time.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/block.h"
#include "models/layers.h"
#include "models/model_config.h"

namespace tandem::models {

// The keys and values of the positions a generation has seen, per decoder block (GenerateGreedyCached).
struct KvCache {
  struct Layer {
    at::Tensor keys;    // [B, kv_heads, length, head_dim], after rotary
    at::Tensor values;  // [B, kv_heads, length, head_dim]
  };
  std::vector<Layer> layers;
  int64_t length = 0;  // positions cached
};

class LlmImpl : public torch::nn::Module {
 public:
  // Builds and initialises the model from the default generator (deterministic given
  // torch::manual_seed). REQUIRES: vocab_size > 0, hidden a multiple of heads with an even head_dim,
  // heads a multiple of kv_heads, max_seq_len > 0; sizes positive.
  explicit LlmImpl(const LlmConfig& config);

  // prefix [B, P, hidden] (any float dtype; undefined or P = 0 for text only), tokens [B, T] int64,
  // T >= 1, P + T <= max_seq_len. Returns logits [B, T, vocab_size] for the text positions.
  // With config.image_token_id >= 0 (LLaVA), `prefix` is instead [images, P, hidden], whose rows
  // replace, in order, the tokens equal to image_token_id (there must be images * P of them), and
  // the sequence is the T tokens.
  at::Tensor forward(const at::Tensor& prefix, const at::Tensor& tokens);

  // forward for inference with a KV cache: the positions continue from cache.length, and after the
  // first call tokens is one token [B, 1] (no prefix). Returns the logits of the last position only,
  // [B, 1, vocab_size]. Runs the blocks directly, so the model must not be partitioned by a ZeRO-3
  // engine. REQUIRES: no autograd is wanted (NoGradGuard).
  at::Tensor ForwardCached(const at::Tensor& prefix, const at::Tensor& tokens, KvCache& cache);

  const LlmConfig& config() const { return config_; }

  // The dtype the residual stream runs in (NOTE [Model dtypes]); nullopt (the default) is the
  // parameter dtype. Set it to Engine::compute().activation_dtype after the engine takes the model.
  void set_compute_dtype(c10::optional<at::ScalarType> dtype);
  // Activation checkpointing for every decoder block (engine/block.h).
  void set_recompute(bool recompute);
  const std::vector<std::shared_ptr<engine::BlockModule>>& blocks() const { return blocks_; }

 private:
  at::Tensor Forward(const at::Tensor& prefix, const at::Tensor& tokens, KvCache* cache);

  LlmConfig config_;
  torch::nn::Embedding embed_{nullptr};
  torch::nn::ModuleList block_list_{nullptr};
  std::vector<std::shared_ptr<engine::BlockModule>> blocks_;
  RmsNorm norm_{nullptr};
  torch::nn::Linear head_{nullptr};  // only when !tie_embeddings
  at::Tensor rope_cos_, rope_sin_;   // buffers [max_seq_len, head_dim], fp32
  c10::optional<at::ScalarType> compute_dtype_;
};
TORCH_MODULE(Llm);

// Summed token cross-entropy of a batch, and the number of tokens it sums over.
struct TokenLoss {
  at::Tensor sum;     // fp32 scalar, differentiable w.r.t. the logits
  int64_t count = 0;  // non-pad targets
};

// logits [B, T, V] from Llm::forward, tokens [B, T] = <bos> w1 .. wn <eos> <pad> ...: logits[:, t]
// predicts tokens[:, t + 1]; targets equal to pad_id are ignored (and the last position predicts
// nothing). Computed in fp32. The caller normalises (DESIGN §2: divide by the global batch's count).
// Synchronises with the device to read `count`.
TokenLoss CaptionLoss(const at::Tensor& logits, const at::Tensor& tokens, int64_t pad_id);

// Greedy decoding under NoGradGuard: starts every row from <bos> after `prefix` [B, P, hidden] (an
// undefined prefix decodes one text-only row) and appends the argmax token. Each step recomputes the
// whole sequence (no KV cache: captions are tiny, and it keeps one code path with training). Stops when
// every row has produced eos_id, after max_new_tokens steps, or when the sequence would exceed
// max_seq_len (at most max_seq_len - P new tokens). Row b holds its generated ids without <bos>, up to
// and excluding its first eos_id. Runs under the caller's autocast state. With `stop_when_done` false it
// always runs every step (same output): ranks of a ZeRO-3 group must call forward equally often.
std::vector<std::vector<int32_t>> GenerateGreedy(Llm& llm, const at::Tensor& prefix, int64_t bos_id,
                                                 int64_t eos_id, int64_t max_new_tokens,
                                                 bool stop_when_done = true);

// Greedy decoding of one sequence with a KV cache (transformers' generate with do_sample=False):
// `prompt` token ids, with `images` [N, P, hidden] as LLaVA places them (or as a prefix; undefined
// for text only). Returns the new ids, ending with the first of `stop_ids` if one was produced;
// stops after max_new_tokens or at max_seq_len. Runs under NoGradGuard and the caller's autocast.
std::vector<int64_t> GenerateGreedyCached(Llm& llm, const at::Tensor& images, const std::vector<int64_t>& prompt,
                                          const std::vector<int64_t>& stop_ids, int64_t max_new_tokens);

}  // namespace tandem::models
