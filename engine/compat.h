// The few LibTorch APIs that differ between Debian's 1.13 and 2.x, behind one set of names.
//
// Autocast: 1.13 has per-device functions (set_cpu_enabled, set_autocast_cpu_dtype, is_enabled for
// CUDA); 2.4 introduced the device-generic set_autocast_enabled(device, ...) and deprecated the old
// names. Attention: at::scaled_dot_product_attention is public from 2.0 and serves CUDA tensors;
// CPU tensors (and 1.13) get the math written out (ScaledDotProductAttention below). CUDA allocator
// statistics: StatType moved from c10::cuda::CUDACachingAllocator to c10/core in 2.x. Gloo: what
// ProcessGroupGloo can do natively (NOTE [Gloo emulation] in gloo_communicator.cc). Optimizer
// state: torch::optim::Optimizer::state() is keyed by a string in 1.13, a void* in 2.x.
#pragma once

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <sstream>
#include <string>
#include <type_traits>

#define TANDEM_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// The enum indexing the arrays of c10::cuda::CUDACachingAllocator::DeviceStats (AGGREGATE,
// SMALL_POOL, LARGE_POOL), for translation units that include <c10/cuda/CUDACachingAllocator.h>.
// 1.13 declares it there; 2.x in c10/core, reachable as c10::CachingDeviceAllocator::StatType (the
// name PyTorch's own bindings use) in every version that has that header.
#if __has_include(<c10/core/CachingDeviceAllocator.h>)
#define TANDEM_CUDA_ALLOCATOR_STAT_TYPE ::c10::CachingDeviceAllocator::StatType
#else
#define TANDEM_CUDA_ALLOCATOR_STAT_TYPE ::c10::cuda::CUDACachingAllocator::StatType
#endif

// ProcessGroupGloo sums bf16 tensors from 2.2 (pytorch#113557; each addition rounds to bf16, as in
// NCCL's bf16 reductions) and gathers into one tensor (_allgather_base) from 2.3 (pytorch#118911).
// 1.13 has neither ("Invalid scalar type", "no support for _allgather_base in Gloo process group").
#define TANDEM_GLOO_HAS_BF16 TANDEM_TORCH_AT_LEAST(2, 2)
#define TANDEM_GLOO_HAS_ALLGATHER_BASE TANDEM_TORCH_AT_LEAST(2, 3)

namespace tandem::compat {

inline bool IsAutocastEnabled(c10::DeviceType device) {
#if TANDEM_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                         : at::autocast::is_cpu_enabled();
#endif
}

inline void SetAutocastEnabled(c10::DeviceType device, bool enabled) {
#if TANDEM_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

inline at::ScalarType GetAutocastDtype(c10::DeviceType device) {
#if TANDEM_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void SetAutocastDtype(c10::DeviceType device, at::ScalarType dtype) {
#if TANDEM_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

// Autocast state of one device type, captured so a recomputation can run under the same state.
struct AutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;

  static AutocastState Capture(c10::DeviceType device) {
    return {IsAutocastEnabled(device), GetAutocastDtype(device)};
  }
};

// Sets an autocast state for a scope and restores the previous one (and clears the cast cache when
// leaving an enabled region, as torch.autocast does).
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, AutocastState state)
      : device_(device), previous_(AutocastState::Capture(device)) {
    SetAutocastDtype(device_, state.dtype);
    SetAutocastEnabled(device_, state.enabled);
    entered_enabled_ = state.enabled;
  }
  ~AutocastScope() {
    SetAutocastEnabled(device_, previous_.enabled);
    SetAutocastDtype(device_, previous_.dtype);
    if (entered_enabled_ && !previous_.enabled) at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  AutocastState previous_;
  bool entered_enabled_ = false;
};

// The key of `param` in an optimizer's state() map: the address of its TensorImpl, printed into a
// string by 1.13 (c10::guts::to_string, an ostream <<) and the pointer itself in 2.x.
template <class StateMap>
typename StateMap::key_type OptimizerStateKey(const StateMap&, const at::Tensor& param) {
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
    std::ostringstream key;
    key << param.unsafeGetTensorImpl();
    return key.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

// k or v [B, kv_heads, S, d] repeated to q's `heads` [B, heads, S, d]: query head h reads KV head
// h / (heads / kv_heads), as HF's repeat_kv.
inline at::Tensor RepeatKvHeads(const at::Tensor& kv, int64_t heads) {
  const int64_t batch = kv.size(0), kv_heads = kv.size(1), seq = kv.size(2), dim = kv.size(3);
  if (kv_heads == heads) return kv;
  return kv.unsqueeze(2)
      .expand({batch, kv_heads, heads / kv_heads, seq, dim})
      .reshape({batch, heads, seq, dim});
}

// softmax(q k^T / sqrt(d) + causal mask) v over the last two dims; q [B, heads, seq, head_dim], k
// and v [B, kv_heads, keys, head_dim] with heads a multiple of kv_heads (grouped-query attention:
// query head h reads KV head h / (heads / kv_heads)).
// On CUDA with LibTorch 2.x, at::scaled_dot_product_attention (cuDNN's, flash or memory-efficient
// kernels), from 2.5 with enable_gqa, so that the kernel reads each KV head for its group of query
// heads instead of copies made for each (and summed again in backward). On the CPU, every version
// runs the math written out: 2.x's CPU flash kernel, which at::scaled_dot_product_attention picks
// there, trained the shapes example at half the speed (bench/README.md, "Tandem against plain
// PyTorch"), and a CPU run then does the same arithmetic on 1.13 and 2.x. The math holds a
// [seq, seq] score matrix per head, which CPU-sized models afford.
// `attn_mask` (bool, true where a query may attend to a key, broadcast to [B, heads, S, keys])
// replaces the causal mask when given: sequence packing's block-diagonal causal mask. On CUDA it
// rules out the flash kernel (the memory-efficient one takes it).
inline at::Tensor ScaledDotProductAttention(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, bool is_causal,
                                            const at::Tensor& attn_mask = {}) {
  const int64_t heads = q.size(1);
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.size(1) == v.size(1) &&
                  k.size(1) > 0 && heads % k.size(1) == 0,
              "attention: q [B, heads, S, d] and k, v [B, kv_heads, S, d] with heads a multiple of "
              "kv_heads, got ",
              q.sizes(), ", ", k.sizes(), " and ", v.sizes());
  const bool masked = attn_mask.defined();
#if TANDEM_TORCH_AT_LEAST(2, 5)
  if (!q.device().is_cpu()) {
    return at::scaled_dot_product_attention(
        q, k, v, masked ? c10::optional<at::Tensor>(attn_mask) : c10::nullopt, /*dropout_p=*/0.0,
        is_causal && !masked, /*scale=*/{}, /*enable_gqa=*/k.size(1) != heads);
  }
#elif TANDEM_TORCH_AT_LEAST(2, 0)
  if (!q.device().is_cpu()) {
    return at::scaled_dot_product_attention(
        q, RepeatKvHeads(k, heads), RepeatKvHeads(v, heads),
        masked ? c10::optional<at::Tensor>(attn_mask) : c10::nullopt, /*dropout_p=*/0.0,
        is_causal && !masked);
  }
#endif
  const at::Tensor keys = RepeatKvHeads(k, heads), values = RepeatKvHeads(v, heads);
  auto scores = at::matmul(q, keys.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (masked) {
    scores = scores.masked_fill(attn_mask.logical_not(), -std::numeric_limits<float>::infinity());
  } else if (is_causal) {
    auto mask = at::ones({q.size(-2), keys.size(-2)}, q.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  }
  return at::matmul(at::softmax(scores, -1), values);
}

}  // namespace tandem::compat
