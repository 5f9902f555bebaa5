// Llm: a Llama-style decoder that reads image embeddings as a prefix before the text tokens (LLaVA
// style; docs/design.md §4). Architecture, parameter names and count formula: models/README.md.
//
//   x = [prefix ; embed(tokens)]                      [B, P + T, hidden], one causal sequence
//   layers x block: x += o(Attn(RoPE(q(n)), RoPE(k(n)), v(n))) with n = RMSNorm(x), causal, GQA
//                   x += down(silu(gate(n)) * up(n))  with n = RMSNorm(x)
//   logits = head(RMSNorm(x[:, P:]))                  [B, T, vocab], text positions only
//
// Each decoder block is an engine::BlockModule called through Forward (ZeRO-3 gathering,
// recompute). Dtypes: NOTE [Model dtypes] in models/layers.h; under autocast the logits have the
// autocast dtype (CaptionLoss computes in fp32).
//
// Conventions (models/README.md): position p of the sequence attends to positions <= p, so every
// text position sees the whole prefix and the text before it; logits[:, t] predicts tokens[:, t +
// 1].
//
// Errors: the constructor, forward and the helpers throw c10::Error (TORCH_CHECK) for an
// inconsistent config or wrongly shaped inputs; messages name the sizes. Token ids are not
// range-checked here (that would synchronise with the device): an id outside [0, vocab_size) fails
// inside the embedding. Thread-compatible: one forward at a time.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/block.h"
#include "models/layers.h"
#include "models/model_config.h"
#include "parallel/parallel_group.h"
#include "parallel/shard.h"

namespace tandem::models {

// The keys and values of the positions a generation has seen, per decoder block
// (GenerateGreedyCached).
struct KvCache {
  struct Layer {
    at::Tensor keys;    // [B, kv_heads, length, head_dim], after rotary
    at::Tensor values;  // [B, kv_heads, length, head_dim]
  };
  std::vector<Layer> layers;
  int64_t length = 0;  // positions cached
};

// Several samples in one row (sequence packing, as transformers' position_ids with
// DataCollatorWithFlattening): `segments` numbers the sample each position belongs to (-1 for
// padding), `positions` restarts at 0 with each sample. A position attends only to the positions
// of its own sample up to itself, and its rotary phase is its position in the sample, so a packed
// row computes what its samples compute in rows of their own. Needs LLaVA's layout (images in
// place of their tokens) or no image.
struct Packing {
  at::Tensor positions;  // [B, T] int64
  at::Tensor segments;   // [B, T] int64
};

// NOTE [Tensor-parallel LLM]
// With a tensor-parallel group of T ranks (Megatron-LM), rank r holds:
// - q (and its bias) rows of heads [r H/T, (r+1) H/T), o the matching columns (row-parallel);
// - k and v rows of KV heads [r K/T, (r+1) K/T) when T divides the K KV heads; with fewer KV heads
//   than ranks (T a multiple of K), all of k and v, of which it uses the KV head its query heads
//   read; their gradients are summed over the group in backward, so every rank holds the same;
// - gate and up rows [r M/T, (r+1) M/T) of the MLP's M, down the matching columns;
// - embed (and an untied head) rows parallel::EvenSplit(V, T, r) of the vocabulary, which need not
//   divide: the first V % T ranks hold one row more. The logits are this rank's columns only.
// - the norms whole: their gradients come out equal on every rank.
// Each attention and MLP sub-block issues one all-reduce forward (after o, after down) and one
// backward (before q/k/v, before gate/up); the embedding one forward, the head one backward.
// Parameter names are those of the whole model; shards() says how each is split. The weights are
// cut from the whole model's seeded initialisation, block by block, so a tensor-parallel model
// starts from the weights of the single-process one.
class LlmImpl : public torch::nn::Module {
 public:
  // Builds and initialises the model from the default generator (deterministic given
  // torch::manual_seed). REQUIRES: vocab_size > 0, hidden a multiple of heads with an even
  // head_dim, heads a multiple of kv_heads, max_seq_len > 0; sizes positive. With a tensor-parallel
  // group of T ranks (NOTE [Tensor-parallel LLM]) also: T divides heads and mlp_hidden, T divides
  // kv_heads or kv_heads divides T, and vocab_size >= T. The group must outlive the model.
  explicit LlmImpl(const LlmConfig& config, parallel::ParallelGroup tensor_parallel = {});

  // prefix [B, P, hidden] (any float dtype; undefined or P = 0 for text only), tokens [B, T] int64,
  // T >= 1, P + T <= max_seq_len. Returns logits [B, T, vocab_size] for the text positions.
  // With config.image_token_id >= 0 (LLaVA), `prefix` is instead [images, P, hidden], whose rows
  // replace, in order, the tokens equal to image_token_id (there must be images * P of them), and
  // the sequence is the T tokens.
  // `packing` (may be null): the rows hold packed samples.
  at::Tensor forward(const at::Tensor& prefix, const at::Tensor& tokens,
                     const Packing* packing = nullptr);

  // forward for inference with a KV cache: the positions continue from cache.length, and after the
  // first call tokens is one token [B, 1] (no prefix). Returns the logits of the last position
  // only, [B, 1, vocab_size]. Runs the blocks directly, so the model must not be partitioned by a
  // ZeRO-3 engine. REQUIRES: no autograd is wanted (NoGradGuard).
  at::Tensor ForwardCached(const at::Tensor& prefix, const at::Tensor& tokens, KvCache& cache);

  // forward's logits at one token per row only, tokens[b, last[b]]: [B, 1, vocab_size]. The other
  // positions never reach the head (a [B, T, vocab] tensor is large with a real vocabulary). Whole
  // also on a tensor-parallel rank (gathered over the group), as are ForwardCached's.
  at::Tensor ForwardLast(const at::Tensor& prefix, const at::Tensor& tokens,
                         const at::Tensor& last);
  // forward's logits at the text positions rows (flat indices b * T + t into [B, T] tokens) only:
  // [N, this rank's vocabulary columns], as forward's (ForwardLabelLoss below).
  at::Tensor ForwardRows(const at::Tensor& prefix, const at::Tensor& tokens, const at::Tensor& rows,
                         const Packing* packing = nullptr);

  const LlmConfig& config() const { return config_; }

  // The dtype the residual stream runs in (NOTE [Model dtypes]); nullopt (the default) is the
  // parameter dtype. Set it to Engine::compute().activation_dtype after the engine takes the model.
  void set_compute_dtype(c10::optional<at::ScalarType> dtype);
  // Activation checkpointing for every decoder block (engine/block.h).
  void set_recompute(bool recompute);

  // The tensor-parallel group (a group of one without tensor parallelism), this rank's columns of
  // the vocabulary in the logits forward returns, and how each split parameter is split (by name;
  // a name not listed is replicated).
  const parallel::ParallelGroup& tensor_parallel() const { return *tensor_parallel_; }
  const parallel::Range& vocab_columns() const { return vocab_columns_; }
  const std::map<std::string, parallel::Shard>& shards() const { return shards_; }
  const std::vector<std::shared_ptr<engine::BlockModule>>& blocks() const { return blocks_; }
  // LLaVA-NeXT's newline embedding [hidden] (config.image_newline); undefined without.
  const at::Tensor& image_newline() const { return image_newline_; }

 private:
  at::Tensor Forward(const at::Tensor& prefix, const at::Tensor& tokens, KvCache* cache,
                     const at::Tensor* last, const at::Tensor* rows,
                     const Packing* packing = nullptr);

  // Replaces the data of the parameters of `module` (named `prefix` + their names) by this rank's
  // shards and records them in shards_.
  void TakeShards(torch::nn::Module& module, const std::string& prefix);

  LlmConfig config_;
  std::shared_ptr<const parallel::ParallelGroup> tensor_parallel_;
  parallel::Range vocab_columns_;
  std::map<std::string, parallel::Shard> shards_;
  torch::nn::Embedding embed_{nullptr};
  torch::nn::ModuleList block_list_{nullptr};
  std::vector<std::shared_ptr<engine::BlockModule>> blocks_;
  RmsNorm norm_{nullptr};
  torch::nn::Linear head_{nullptr};  // only when !tie_embeddings
  at::Tensor rope_cos_, rope_sin_;   // buffers [max_seq_len, head_dim], fp32
  at::Tensor image_newline_;
  c10::optional<at::ScalarType> compute_dtype_;
};
TORCH_MODULE(Llm);

// Summed token cross-entropy of a batch, and the number of tokens it sums over.
struct TokenLoss {
  at::Tensor sum;     // fp32 scalar, differentiable w.r.t. the logits
  int64_t count = 0;  // targets that are not kIgnoreLabel
};

// A label that is no target (PyTorch's cross_entropy ignore_index default, and transformers').
inline constexpr int64_t kIgnoreLabel = -100;

// How a tensor-parallel model's parameter `name` (a name of the whole model, as named_parameters
// gives it) is split over `size` ranks, for rank `rank` (NOTE [Tensor-parallel LLM]); dim -1 for a
// replicated one, and for every parameter when size is 1.
parallel::Shard LlmParameterShard(const LlmConfig& config, std::string_view name, int size,
                                  int rank);

// logits [B, T, V] from Llm::forward, labels [B, T]: logits[:, t] predicts labels[:, t + 1], and
// positions labelled kIgnoreLabel predict nothing (nor does the last). Computed in fp32. The caller
// normalises (docs/design.md §2: divide by the global batch's count). Synchronises with the device
// to read `count`. Of a tensor-parallel model (llm->tensor_parallel(), llm->vocab_columns()),
// logits holds this rank's columns of the vocabulary and the loss is
// parallel::VocabParallelCrossEntropySum's, the same on every rank.
TokenLoss LabelLoss(const at::Tensor& logits, const at::Tensor& labels,
                    const parallel::ParallelGroup& group = {}, const parallel::Range& columns = {});
TokenLoss LabelLoss(const Llm& llm, const at::Tensor& logits, const at::Tensor& labels);

// LabelLoss(llm, llm->forward(prefix, tokens), labels), with the head applied to the positions that
// predict a target only (Llm::ForwardRows): a caption's few tokens among a sequence of image and
// prompt positions need a few rows of [positions, vocabulary] logits, not all of them, and the
// gradient of the others is not filled with zeros.
// With `packing` the rows hold packed samples (Packing); a label at a sample's first position
// must be kIgnoreLabel, or the sample before it would predict it.
TokenLoss ForwardLabelLoss(Llm& llm, const at::Tensor& prefix, const at::Tensor& tokens,
                           const at::Tensor& labels, const Packing* packing = nullptr);

// LabelLoss with tokens [B, T] = <bos> w1 .. wn <eos> <pad> ... as their own labels, the pad_id
// targets ignored.
TokenLoss CaptionLoss(const at::Tensor& logits, const at::Tensor& tokens, int64_t pad_id);
TokenLoss CaptionLoss(const Llm& llm, const at::Tensor& logits, const at::Tensor& tokens,
                      int64_t pad_id);

// Greedy decoding of a batch under NoGradGuard, one full forward per new token (no KV cache, so
// the ranks of a ZeRO-3 group, which must call forward equally often, can run it): row b continues
// prompts[b], with `images` as forward takes them (a prefix [B, P, hidden], or LLaVA's rows for the
// prompts' image tokens; undefined for text only). Rows are right-padded with pad_id, which a
// causal model's last-token logits never see. Row b's result is its new ids up to and excluding the
// first of `stop_ids`; a row also stops when it fills max_seq_len (less a prefix), or after writing
// LLaVA's image token (kept in its result: no image stands behind it), and a stopped row no longer
// grows. Runs max_new_tokens steps, fewer once every row has stopped when `stop_when_done`
// (without it, exactly max_new_tokens forwards on every rank, same output). Runs under the
// caller's autocast state.
std::vector<std::vector<int64_t>> GenerateGreedyBatch(
    Llm& llm, const at::Tensor& images, const std::vector<std::vector<int64_t>>& prompts,
    int64_t pad_id, const std::vector<int64_t>& stop_ids, int64_t max_new_tokens,
    bool stop_when_done = true);

// GenerateGreedyBatch of captions: every row starts from <bos> after `prefix` [B, P, hidden] (an
// undefined prefix decodes one text-only row) and stops at eos_id.
std::vector<std::vector<int32_t>> GenerateGreedy(Llm& llm, const at::Tensor& prefix, int64_t bos_id,
                                                 int64_t eos_id, int64_t max_new_tokens,
                                                 bool stop_when_done = true);

// Greedy decoding of one sequence with a KV cache (transformers' generate with do_sample=False):
// `prompt` token ids, with `images` [N, P, hidden] as LLaVA places them (or as a prefix; undefined
// for text only). Returns the new ids, ending with the first of `stop_ids` if one was produced;
// stops after max_new_tokens or at max_seq_len. Runs under NoGradGuard and the caller's autocast.
std::vector<int64_t> GenerateGreedyCached(Llm& llm, const at::Tensor& images,
                                          const std::vector<int64_t>& prompt,
                                          const std::vector<int64_t>& stop_ids,
                                          int64_t max_new_tokens);

}  // namespace tandem::models
