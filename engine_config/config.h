// The engine's configuration: DeepSpeed's JSON keys, same names and meaning (docs/design.md §3).
//
// ParseConfig is strict: an unknown key, a wrong type, an out-of-range value or an unsupported
// combination is an InvalidArgument error whose message starts with the key path, e.g.
//   "zero_optimization.stage: must be 0..3, got 4".
// A user's ds_config.json for the features Tandem supports parses unchanged. Tandem's own
// extensions live under the "tandem" key. Every key, its default and its meaning is listed in
// engine_config/CONFIG.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace tandem::engine_config {

enum class OptimizerType { kAdam, kAdamW };

struct OptimizerConfig {
  OptimizerType type = OptimizerType::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // Decoupled weight decay (AdamW). "AdamW" is always true; "Adam" takes params.adam_w_mode
  // (default true, as DeepSpeed's FusedAdam); false gives classic Adam (L2 term added to the
  // gradient).
  bool adam_w_mode = true;
};

enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupType { kLog, kLinear };

// DeepSpeed's deepspeed/runtime/lr_schedules.py parameters, same defaults.
struct SchedulerConfig {
  SchedulerType type = SchedulerType::kNone;
  double warmup_min_lr = 0.0;       // WarmupLR, WarmupDecayLR
  double warmup_max_lr = 0.001;     // WarmupLR, WarmupDecayLR
  int64_t warmup_num_steps = 1000;  // all three
  WarmupType warmup_type = WarmupType::kLog;
  int64_t total_num_steps =
      0;  // WarmupDecayLR, WarmupCosineLR (required there, > warmup_num_steps)
  double warmup_min_ratio = 0.0;  // WarmupCosineLR: lr ratio at step 0
  double cos_min_ratio = 0.0001;  // WarmupCosineLR: lr ratio at the end
};

struct ZeroConfig {
  int stage = 0;  // 0 replicated, 1 optimizer states, 2 + grads, 3 + params
  int64_t reduce_bucket_size = 500000000;     // most elements per reduction unit (NOTE [Buckets])
  int64_t allgather_bucket_size = 500000000;  // most elements of post-step all-gathers in flight
  bool overlap_comm = true;                   // reduce buckets while backward still runs
  bool contiguous_gradients = true;  // always true in Tandem (flat buffers); false is rejected
};

enum class DType { kFloat32, kBFloat16 };

// torch_autocast.dtype: bf16, or "auto": bf16 where the device has native bf16, fp32 compute
// elsewhere (NOTE [Compute dtype] in compute.h).
enum class AutocastDType { kBFloat16, kAuto };

// How a bf16 master weight absorbs an update (Tandem extension, tandem.bf16_update).
enum class Bf16Update {
  kNearest,     // round to nearest even, as DeepSpeed: small updates are lost
  kKahan,       // Kahan-compensated: one extra bf16 buffer per parameter
  kStochastic,  // stochastic rounding: no extra memory, unbiased in expectation
};

// How bf16 Adam moments are stored after each update (Tandem extension,
// tandem.bf16_optimizer_states_rounding).
enum class MomentRounding {
  kStochastic,  // unbiased: v = beta2 * v decays even where the decrement is below half an ulp
  kNearest,     // DeepSpeed: a bf16 v never falls under beta2 = 0.999
};

// An optimizer parameter group (Tandem extension, tandem.param_groups[i]): the parameters whose
// names match one of `params` take the given hyperparameters; unset ones come from
// optimizer.params. A parameter belongs to the first group that matches it, or to the default
// group.
struct ParamGroupConfig {
  std::string path;                 // "tandem.param_groups[i]" with the config's prefix, for errors
  std::vector<std::string> params;  // name patterns: '*' any run of characters, '?' one
  std::optional<double> lr;         // the group's peak lr; schedules scale it (CONFIG.md)
  std::optional<double> weight_decay;
  std::optional<double> beta1, beta2;
  std::optional<double> eps;
};

// How gradients are combined across the group (Tandem extension, tandem.gradient_reduction).
enum class GradientReduction {
  kMean,  // DeepSpeed: divide by world size and by gradient_accumulation_steps
  kSum,   // no division: the caller normalised the loss over the global batch (docs/design.md §2)
};

struct Config {
  // Batch arithmetic. When all three are given they must satisfy
  // train_batch_size == micro * gas * world (checked by the engine, which knows the world size).
  std::optional<int64_t> train_batch_size;
  std::optional<int64_t> train_micro_batch_size_per_gpu;
  int64_t gradient_accumulation_steps = 1;
  bool gradient_accumulation_steps_given = false;

  double gradient_clipping = 0.0;  // max global L2 norm; 0 disables
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  ZeroConfig zero;

  // Precision. fp32: params, grads, moments all fp32 (16 B/param). bf16.enabled: bf16 params and
  // fp32 master + fp32 moments, grads accumulated in bf16 (16 B/param, DeepSpeed's default);
  // + bf16_master_weights_and_grads: the bf16 param is the master (no second copy);
  // + bf16_optimizer_states: bf16 moments. Both: 8 B/param.
  bool bf16_enabled = false;
  bool bf16_master_weights_and_grads = false;
  bool bf16_optimizer_states = false;
  // data_types.grad_accum_dtype: dtype of the accumulated gradient. Defaults to the param dtype.
  std::optional<DType> grad_accum_dtype;

  bool autocast_enabled = false;
  AutocastDType autocast_dtype = AutocastDType::kBFloat16;

  // Dtype on the wire for gradient reductions. Defaults to fp32.
  DType communication_data_type = DType::kFloat32;

  int64_t steps_per_print = 10;
  std::optional<uint64_t> seed;

  // Tandem extensions ("tandem": {...}).
  Bf16Update bf16_update = Bf16Update::kNearest;  // only with bf16_master_weights_and_grads
  MomentRounding bf16_optimizer_states_rounding = MomentRounding::kStochastic;
  std::vector<ParamGroupConfig> param_groups;
  // Weight decay 0 for biases, norm weights and embeddings unless their group sets weight_decay.
  bool no_decay = true;
  GradientReduction gradient_reduction = GradientReduction::kMean;
  int64_t collective_timeout_ms =
      300000;  // tandem.collective_timeout_s * 1000: deadline of every wait

  // Derived dtypes.
  DType param_dtype() const { return bf16_enabled ? DType::kBFloat16 : DType::kFloat32; }
  bool has_separate_master() const { return bf16_enabled && !bf16_master_weights_and_grads; }
  DType grad_dtype() const { return grad_accum_dtype.value_or(param_dtype()); }
  DType optimizer_state_dtype() const {
    return bf16_optimizer_states ? DType::kBFloat16 : DType::kFloat32;
  }
};

// Parses a JSON document (the text of a ds_config.json). A JSON syntax error is InvalidArgument
// with the line and column.
absl::StatusOr<Config> ParseConfig(std::string_view json_text);

// Parses an already-decoded JSON object (e.g. the `engine` block of a job spec). `path_prefix` is
// put in front of every key path in error messages ("llm.engine." gives
// "llm.engine.zero_optimization.stage: ...").
absl::StatusOr<Config> ParseConfigJson(const nlohmann::json& json,
                                       std::string_view path_prefix = "");

// Reads and parses a file; errors name the file.
absl::StatusOr<Config> LoadConfigFile(const std::string& path);

const char* DTypeName(DType dtype);  // "fp32" / "bf16"

}  // namespace tandem::engine_config
