// The few LibTorch APIs that differ between Debian's 1.13 and 2.x, behind one set of names.
//
// Autocast: 1.13 has per-device functions (set_cpu_enabled, set_autocast_cpu_dtype, is_enabled for
// CUDA); 2.4 introduced the device-generic set_autocast_enabled(device, ...) and deprecated the old names.
// Attention: at::scaled_dot_product_attention is public from 2.0; on 1.13 the math is written out.
#pragma once

#include <ATen/autocast_mode.h>
#include <ATen/ATen.h>
#include <torch/version.h>

#define TANDEM_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace tandem::compat {

inline bool IsAutocastEnabled(c10::DeviceType device) {
#if TANDEM_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
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

// softmax(q k^T / sqrt(d) + causal mask) v over the last two dims; q, k, v [..., seq, head_dim].
inline at::Tensor ScaledDotProductAttention(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, bool is_causal) {
#if TANDEM_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, is_causal);
#else
  auto scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (is_causal) {
    auto mask = at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  }
  return at::matmul(at::softmax(scores, -1), v);
#endif
}

}  // namespace tandem::compat
