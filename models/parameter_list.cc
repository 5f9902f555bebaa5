// The models' parameter lists (parameter_list.h), in the order their constructors register them:
// models/vision_encoder.cc and models/llm.cc.
#include "models/parameter_list.h"

#include <utility>

namespace tandem::models {
namespace {

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

class Lister {
 public:
  void Add(std::string name, std::vector<int64_t> shape) {
    list_.push_back({prefix_ + std::move(name), std::move(shape), frozen_, in_block_});
  }
  // torch::nn::Linear(in, out) under `name`: weight [out, in], bias [out].
  void Linear(const std::string& name, int64_t in, int64_t out, bool bias = true) {
    Add(name + ".weight", {out, in});
    if (bias) Add(name + ".bias", {out});
  }
  void LayerNorm(const std::string& name, int64_t dim) {
    Add(name + ".weight", {dim});
    Add(name + ".bias", {dim});
  }
  void Enter(std::string prefix, bool frozen, bool in_block) {
    prefix_ = std::move(prefix);
    frozen_ = frozen;
    in_block_ = in_block;
  }
  std::vector<ParameterInfo> Take() { return std::move(list_); }

 private:
  std::vector<ParameterInfo> list_;
  std::string prefix_;
  bool frozen_ = false;
  bool in_block_ = false;
};

void VisionMlp(Lister& out, const std::string& name, int64_t hidden, int64_t mlp_hidden) {
  out.Linear(name + ".fc1", hidden, mlp_hidden);
  out.Linear(name + ".fc2", mlp_hidden, hidden);
}

}  // namespace

int64_t ParameterInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ParameterInfo> VisionParameterList(const VisionConfig& c) {
  Lister out;
  const int64_t h = c.hidden;
  if (c.positions == "learned") out.Add("positions", {1, c.num_positions(), h});
  if (c.class_token) out.Add("class_token", {1, 1, h});
  out.Add("patch_embed.weight", {h, c.channels, c.patch_size, c.patch_size});
  if (c.patch_bias) out.Add("patch_embed.bias", {h});
  if (c.pre_norm) out.LayerNorm("pre_norm", h);
  for (int64_t i = 0; i < c.layers; ++i) {
    out.Enter("blocks." + std::to_string(i) + ".", /*frozen=*/i >= c.feature_index(),
              /*in_block=*/true);
    out.LayerNorm("norm1", h);
    out.Linear("attn.qkv", h, 3 * h);
    out.Linear("attn.proj", h, h);
    out.LayerNorm("norm2", h);
    VisionMlp(out, "mlp", h, c.mlp_hidden);
  }
  out.Enter("", false, false);
  if (c.final_norm) out.LayerNorm("norm", h);
  out.Enter("", /*frozen=*/true, false);
  if (c.post_norm) out.LayerNorm("post_norm", h);
  if (c.pooling_head) {
    out.Add("head.probe", {1, 1, h});
    out.Add("head.attention.in_proj_weight", {3 * h, h});
    out.Add("head.attention.in_proj_bias", {3 * h});
    out.Linear("head.attention.out_proj", h, h);
    out.LayerNorm("head.layernorm", h);
    VisionMlp(out, "head.mlp", h, c.mlp_hidden);
  }
  out.Enter("", false, false);
  if (c.projector == "linear") {
    out.Linear("projector", h, c.output_dim);
  } else {
    out.Linear("projector.linear_1", h, c.output_dim);
    out.Linear("projector.linear_2", c.output_dim, c.output_dim);
  }
  return out.Take();
}

std::vector<ParameterInfo> LlmParameterList(const LlmConfig& c) {
  Lister out;
  const int64_t h = c.hidden, head_dim = c.resolved_head_dim();
  // The module's own parameter comes before its children's in named_parameters().
  if (c.image_newline) out.Add("image_newline", {h});
  out.Add("embed.weight", {c.vocab_size, h});
  for (int64_t i = 0; i < c.layers; ++i) {
    out.Enter("blocks." + std::to_string(i) + ".", false, /*in_block=*/true);
    out.Add("attn_norm.weight", {h});
    out.Linear("attn.q", h, c.heads * head_dim, c.attention_bias);
    out.Linear("attn.k", h, c.kv_heads * head_dim, c.attention_bias);
    out.Linear("attn.v", h, c.kv_heads * head_dim, c.attention_bias);
    out.Linear("attn.o", c.heads * head_dim, h, false);
    out.Add("mlp_norm.weight", {h});
    out.Linear("mlp.gate", h, c.mlp_hidden, false);
    out.Linear("mlp.up", h, c.mlp_hidden, false);
    out.Linear("mlp.down", c.mlp_hidden, h, false);
  }
  out.Enter("", false, false);
  out.Add("norm.weight", {h});
  if (!c.tie_embeddings) out.Linear("head", h, c.vocab_size, false);
  return out.Take();
}

TensorSplit LlmParameterSplit(const LlmConfig& c, std::string_view name, int size) {
  if (size <= 1) return {};
  const int64_t head_dim = c.resolved_head_dim();
  // With fewer KV heads than ranks every rank holds all of k and v.
  const bool kv_replicated = c.kv_heads % size != 0;
  if (name == "embed.weight" || name == "head.weight") return {0, c.vocab_size};
  if (EndsWith(name, ".attn.q.weight") || EndsWith(name, ".attn.q.bias"))
    return {0, c.heads * head_dim};
  if ((EndsWith(name, ".attn.k.weight") || EndsWith(name, ".attn.k.bias") ||
       EndsWith(name, ".attn.v.weight") || EndsWith(name, ".attn.v.bias")) &&
      !kv_replicated) {
    return {0, c.kv_heads * head_dim};
  }
  if (EndsWith(name, ".attn.o.weight")) return {1, c.heads * head_dim};
  if (EndsWith(name, ".mlp.gate.weight") || EndsWith(name, ".mlp.up.weight"))
    return {0, c.mlp_hidden};
  if (EndsWith(name, ".mlp.down.weight")) return {1, c.mlp_hidden};
  return {};
}

int64_t LlmShardElements(const LlmConfig& config, const ParameterInfo& parameter, int size,
                         int rank) {
  const TensorSplit split = LlmParameterSplit(config, parameter.name, size);
  if (split.dim < 0 || split.full == 0)
    return parameter.numel();  // an empty vocabulary: nothing to split
  const int64_t rows = split.full / size + (rank < split.full % size ? 1 : 0);
  return parameter.numel() / split.full * rows;
}

}  // namespace tandem::models
