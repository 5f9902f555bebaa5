// Strict parser for the engine's DeepSpeed-style configuration. The accepted keys, their defaults
// and the reasons for every rejection are listed in engine_config/CONFIG.md; keep the two in step.
// Over 500 lines on purpose: one parser per DeepSpeed section, in CONFIG.md's order, so that every
// key the engine accepts is read in this one file (the typed reading is object_reader.h's).
#include "engine_config/config.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strict_json.h"
#include "engine_config/object_reader.h"
#include "engine_config/param_groups.h"
#include "nlohmann/json.hpp"

namespace tandem::engine_config {
namespace {

using json = nlohmann::json;
using internal::Bound;
using internal::Contains;
using internal::Error;
using internal::Keys;
using internal::ObjectReader;
using internal::Quoted;
using internal::Sv;

// The keys each object may hold; anything else is an "unknown key" error.
constexpr std::string_view kTopLevelKeys[] = {"train_batch_size",
                                              "train_micro_batch_size_per_gpu",
                                              "gradient_accumulation_steps",
                                              "gradient_clipping",
                                              "optimizer",
                                              "scheduler",
                                              "zero_optimization",
                                              "bf16",
                                              "bfloat16",
                                              "fp16",
                                              "data_types",
                                              "torch_autocast",
                                              "communication_data_type",
                                              "steps_per_print",
                                              "seed",
                                              "wall_clock_breakdown",
                                              "zero_allow_untested_optimizer",
                                              "prescale_gradients",
                                              "gradient_predivide_factor",
                                              "tandem"};
constexpr std::string_view kOptimizerKeys[] = {"type", "params"};
constexpr std::string_view kAdamParamKeys[] = {"lr",           "betas",       "eps",
                                               "weight_decay", "adam_w_mode", "torch_adam"};
constexpr std::string_view kSchedulerKeys[] = {"type", "params"};
// Parameter names per schedule, as in deepspeed/runtime/lr_schedules.py.
constexpr std::string_view kWarmupLRKeys[] = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                                              "warmup_type", "last_batch_iteration"};
constexpr std::string_view kWarmupDecayLRKeys[] = {"warmup_min_lr",        "warmup_max_lr",
                                                   "warmup_num_steps",     "warmup_type",
                                                   "last_batch_iteration", "total_num_steps"};
constexpr std::string_view kWarmupCosineLRKeys[] = {"total_num_steps",  "warmup_min_ratio",
                                                    "warmup_num_steps", "cos_min_ratio",
                                                    "warmup_type",      "last_batch_iteration"};
constexpr std::string_view kZeroKeys[] = {"stage",
                                          "reduce_bucket_size",
                                          "allgather_bucket_size",
                                          "overlap_comm",
                                          "contiguous_gradients",
                                          "reduce_scatter",
                                          "allgather_partitions",
                                          "offload_optimizer",
                                          "offload_param",
                                          "stage3_param_persistence_threshold",
                                          "stage3_prefetch_bucket_size",
                                          "stage3_max_live_parameters",
                                          "stage3_max_reuse_distance",
                                          "stage3_gather_16bit_weights_on_model_save",
                                          "sub_group_size"};
// ZeRO tuning hints: validated, then ignored (CONFIG.md says why that cannot change results).
constexpr std::string_view kZeroHintKeys[] = {
    "stage3_param_persistence_threshold", "stage3_prefetch_bucket_size",
    "stage3_max_live_parameters", "stage3_max_reuse_distance", "sub_group_size"};
constexpr std::string_view kOffloadKeys[] = {"device", "pin_memory"};
constexpr std::string_view kBf16Keys[] = {"enabled", "bf16_master_weights_and_grads",
                                          "bf16_optimizer_states"};
constexpr std::string_view kFp16Keys[] = {"enabled",
                                          "auto_cast",
                                          "loss_scale",
                                          "initial_scale_power",
                                          "loss_scale_window",
                                          "hysteresis",
                                          "consecutive_hysteresis",
                                          "min_loss_scale"};
constexpr std::string_view kDataTypesKeys[] = {"grad_accum_dtype"};
constexpr std::string_view kAutocastKeys[] = {"enabled", "dtype", "lower_precision_safe_modules"};
constexpr std::string_view kTandemKeys[] = {"bf16_update",        "bf16_optimizer_states_rounding",
                                            "gradient_reduction", "collective_timeout_s",
                                            "param_groups",       "no_decay"};

absl::Status ParseOptimizer(const ObjectReader& root, OptimizerConfig* out) {
  ASSIGN_OR_RETURN(ObjectReader opt, root.Child("optimizer", kOptimizerKeys));
  std::string type;
  if (!opt.Has("type")) return Error(opt.PathOf("type"), "required");
  RETURN_IF_ERROR(opt.String("type", &type));
  // DeepSpeed compares optimizer names case-insensitively.
  std::string lower = absl::AsciiStrToLower(type);
  if (lower == "adam") {
    out->type = OptimizerType::kAdam;
  } else if (lower == "adamw") {
    out->type = OptimizerType::kAdamW;
  } else {
    return Error(opt.PathOf("type"), "must be \"Adam\" or \"AdamW\", got ", Quoted(type));
  }
  if (!opt.Has("params")) return absl::OkStatus();
  ASSIGN_OR_RETURN(ObjectReader params, opt.Child("params", kAdamParamKeys));
  RETURN_IF_ERROR(params.Number("lr", Bound::kNonNegative, &out->lr));
  RETURN_IF_ERROR(params.Number("eps", Bound::kPositive, &out->eps));
  RETURN_IF_ERROR(params.Number("weight_decay", Bound::kNonNegative, &out->weight_decay));
  RETURN_IF_ERROR(params.Betas("betas", &out->beta1, &out->beta2));
  bool torch_adam = false;  // Validated only: Tandem always runs its fused kernel.
  RETURN_IF_ERROR(params.Bool("torch_adam", &torch_adam));
  bool adam_w_mode = true;
  RETURN_IF_ERROR(params.Bool("adam_w_mode", &adam_w_mode));
  if (out->type == OptimizerType::kAdamW && !adam_w_mode) {
    return Error(params.PathOf("adam_w_mode"),
                 "must be true or absent for AdamW; use type \"Adam\" for Adam with L2 decay");
  }
  out->adam_w_mode = out->type == OptimizerType::kAdamW || adam_w_mode;
  return absl::OkStatus();
}

absl::Status ParseScheduler(const ObjectReader& root, SchedulerConfig* out) {
  ASSIGN_OR_RETURN(ObjectReader sched, root.Child("scheduler", kSchedulerKeys));
  std::string type;
  if (!sched.Has("type")) return Error(sched.PathOf("type"), "required");
  RETURN_IF_ERROR(sched.String("type", &type));
  // last_batch_iteration is every schedule's resume point; Tandem resumes from the checkpoint's
  // step count instead, so only DeepSpeed's default -1 is accepted.
  Keys names;
  if (type == "WarmupLR") {
    out->type = SchedulerType::kWarmupLR;
    names = kWarmupLRKeys;
  } else if (type == "WarmupDecayLR") {
    out->type = SchedulerType::kWarmupDecayLR;
    names = kWarmupDecayLRKeys;
  } else if (type == "WarmupCosineLR") {
    out->type = SchedulerType::kWarmupCosineLR;
    names = kWarmupCosineLRKeys;
  } else {
    return Error(sched.PathOf("type"),
                 "must be one of \"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\", got ",
                 Quoted(type));
  }
  const bool needs_total = out->type != SchedulerType::kWarmupLR;
  const json* params_json = sched.Find("params");
  if (params_json == nullptr) {
    if (needs_total) return Error(sched.PathOf("params.total_num_steps"), "required for ", type);
    return absl::OkStatus();
  }
  // A parameter of another schedule gets a message that says so, rather than "unknown key".
  if (params_json->is_object()) {
    for (const auto& item : params_json->items()) {
      const std::string& key = item.key();
      if (!Contains(names, key) &&
          (Contains(kWarmupDecayLRKeys, key) || Contains(kWarmupCosineLRKeys, key))) {
        return Error(sched.PathOf(absl::StrCat("params.", key)), "not a parameter of ", type);
      }
    }
  }
  ASSIGN_OR_RETURN(ObjectReader params, sched.Child("params", names));
  RETURN_IF_ERROR(params.Number("warmup_min_lr", Bound::kNonNegative, &out->warmup_min_lr));
  RETURN_IF_ERROR(params.Number("warmup_max_lr", Bound::kNonNegative, &out->warmup_max_lr));
  RETURN_IF_ERROR(params.Int("warmup_num_steps", 0, &out->warmup_num_steps));
  RETURN_IF_ERROR(params.Number("warmup_min_ratio", Bound::kNonNegative, &out->warmup_min_ratio));
  RETURN_IF_ERROR(params.Number("cos_min_ratio", Bound::kNonNegative, &out->cos_min_ratio));
  std::string warmup_type = "log";
  RETURN_IF_ERROR(params.String("warmup_type", &warmup_type));
  if (warmup_type == "log") {
    out->warmup_type = WarmupType::kLog;
  } else if (warmup_type == "linear") {
    out->warmup_type = WarmupType::kLinear;
  } else {
    return Error(params.PathOf("warmup_type"), "must be \"log\" or \"linear\", got ",
                 Quoted(warmup_type));
  }
  int64_t last_batch_iteration = -1;
  RETURN_IF_ERROR(params.Int("last_batch_iteration", std::numeric_limits<int64_t>::min(),
                             &last_batch_iteration));
  if (last_batch_iteration != -1) {
    return Error(params.PathOf("last_batch_iteration"), "must be -1, got ", last_batch_iteration,
                 ": Tandem resumes the schedule from the checkpoint's step count");
  }
  if (needs_total) {
    if (!params.Has("total_num_steps")) {
      return Error(params.PathOf("total_num_steps"), "required for ", type);
    }
    RETURN_IF_ERROR(params.Int("total_num_steps", 1, &out->total_num_steps));
    if (out->total_num_steps <= out->warmup_num_steps) {
      return Error(params.PathOf("total_num_steps"), "must be > warmup_num_steps (",
                   out->warmup_num_steps, "), got ", out->total_num_steps);
    }
  }
  return absl::OkStatus();
}

// offload_optimizer / offload_param: only "none" (DeepSpeed's default) is supported.
absl::Status ParseOffload(const ObjectReader& zero, std::string_view key) {
  ASSIGN_OR_RETURN(ObjectReader offload, zero.Child(key, kOffloadKeys));
  std::string device = "none";
  RETURN_IF_ERROR(offload.String("device", &device));
  if (device == "cpu" || device == "nvme") {
    return Error(offload.PathOf("device"), Quoted(device),
                 " offload is not supported yet; use \"none\"");
  }
  if (device != "none") {
    return Error(offload.PathOf("device"), "must be one of \"none\", \"cpu\", \"nvme\", got ",
                 Quoted(device));
  }
  bool pin_memory = false;  // Validated only: nothing is offloaded.
  return offload.Bool("pin_memory", &pin_memory);
}

// A DeepSpeed ZeRO switch whose false setting selects a code path Tandem does not have.
absl::Status RequireTrue(const ObjectReader& obj, std::string_view key, std::string_view why) {
  bool value = true;
  RETURN_IF_ERROR(obj.Bool(key, &value));
  if (!value) return Error(obj.PathOf(key), "false is not supported: ", Sv(why));
  return absl::OkStatus();
}

absl::Status ParseZero(const ObjectReader& root, ZeroConfig* out) {
  ASSIGN_OR_RETURN(ObjectReader zero, root.Child("zero_optimization", kZeroKeys));
  int64_t stage = out->stage;
  RETURN_IF_ERROR(zero.Int("stage", std::numeric_limits<int64_t>::min(), &stage));
  if (stage < 0 || stage > 3) return Error(zero.PathOf("stage"), "must be 0..3, got ", stage);
  out->stage = static_cast<int>(stage);
  RETURN_IF_ERROR(zero.Int("reduce_bucket_size", 1, &out->reduce_bucket_size));
  RETURN_IF_ERROR(zero.Int("allgather_bucket_size", 1, &out->allgather_bucket_size));
  RETURN_IF_ERROR(zero.Bool("overlap_comm", &out->overlap_comm));
  RETURN_IF_ERROR(RequireTrue(zero, "contiguous_gradients",
                              "Tandem always keeps gradients in contiguous buffers"));
  RETURN_IF_ERROR(RequireTrue(zero, "reduce_scatter",
                              "Tandem always reduces gradients with reduce-scatter or all-reduce"));
  RETURN_IF_ERROR(RequireTrue(zero, "allgather_partitions",
                              "Tandem always gathers updated partitions with all-gather"));
  if (zero.Has("offload_optimizer")) {
    RETURN_IF_ERROR(ParseOffload(zero, "offload_optimizer"));
  }
  if (zero.Has("offload_param")) RETURN_IF_ERROR(ParseOffload(zero, "offload_param"));
  // Validated as DeepSpeed does (integers >= 0), not stored.
  for (std::string_view hint : kZeroHintKeys) {
    int64_t unused = 0;
    RETURN_IF_ERROR(zero.Int(hint, 0, &unused));
  }
  bool gather_on_save = true;
  RETURN_IF_ERROR(zero.Bool("stage3_gather_16bit_weights_on_model_save", &gather_on_save));
  if (!gather_on_save) {
    return Error(zero.PathOf("stage3_gather_16bit_weights_on_model_save"),
                 "false is not supported: Tandem's consolidated export always gathers the full "
                 "weights");
  }
  return absl::OkStatus();
}

absl::Status ParseBf16(const ObjectReader& root, std::string_view key, Config* out) {
  ASSIGN_OR_RETURN(ObjectReader bf16, root.Child(key, kBf16Keys));
  RETURN_IF_ERROR(bf16.Bool("enabled", &out->bf16_enabled));
  RETURN_IF_ERROR(bf16.Bool("bf16_master_weights_and_grads", &out->bf16_master_weights_and_grads));
  RETURN_IF_ERROR(bf16.Bool("bf16_optimizer_states", &out->bf16_optimizer_states));
  if (!out->bf16_enabled) {
    if (out->bf16_master_weights_and_grads) {
      return Error(bf16.PathOf("bf16_master_weights_and_grads"), "requires ", Sv(key),
                   ".enabled = true");
    }
    if (out->bf16_optimizer_states) {
      return Error(bf16.PathOf("bf16_optimizer_states"), "requires ", Sv(key), ".enabled = true");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseFp16(const ObjectReader& root, bool bf16_enabled) {
  // The loss-scaling keys are accepted so that common configs with "enabled": false parse; with
  // fp16 off they have no effect.
  ASSIGN_OR_RETURN(ObjectReader fp16, root.Child("fp16", kFp16Keys));
  bool enabled = false, flag = false;
  double number = 0;
  int64_t integer = 0;
  RETURN_IF_ERROR(fp16.Bool("enabled", &enabled));
  if (enabled && bf16_enabled) {
    return Error(fp16.PathOf("enabled"), "fp16 and bf16 cannot both be enabled");
  }
  if (enabled) {
    return Error(fp16.PathOf("enabled"),
                 "fp16 needs dynamic loss scaling, which Tandem does not implement; use bf16");
  }
  RETURN_IF_ERROR(fp16.Bool("auto_cast", &flag));
  RETURN_IF_ERROR(fp16.Number("loss_scale", Bound::kNonNegative, &number));
  RETURN_IF_ERROR(fp16.Int("initial_scale_power", 0, &integer));
  RETURN_IF_ERROR(fp16.Int("loss_scale_window", 1, &integer));
  RETURN_IF_ERROR(fp16.Int("hysteresis", 1, &integer));
  RETURN_IF_ERROR(fp16.Bool("consecutive_hysteresis", &flag));
  return fp16.Number("min_loss_scale", Bound::kPositive, &number);
}

// "fp32" / "bf16" for a dtype key; "fp16" is a known DeepSpeed value that Tandem rejects.
absl::Status ParseDType(const ObjectReader& obj, std::string_view key, DType* out) {
  const json* v = obj.Find(key);
  if (v == nullptr) return absl::OkStatus();
  std::string name;
  RETURN_IF_ERROR(obj.String(key, &name));
  if (name == "fp32") {
    *out = DType::kFloat32;
  } else if (name == "bf16") {
    *out = DType::kBFloat16;
  } else if (name == "fp16") {
    return Error(obj.PathOf(key), "\"fp16\" is not supported; use \"fp32\" or \"bf16\"");
  } else {
    return Error(obj.PathOf(key), "must be \"fp32\" or \"bf16\", got ", Quoted(name));
  }
  return absl::OkStatus();
}

absl::Status ParseAutocast(const ObjectReader& root, Config* out) {
  ASSIGN_OR_RETURN(ObjectReader autocast, root.Child("torch_autocast", kAutocastKeys));
  if (autocast.Has("lower_precision_safe_modules")) {
    return Error(autocast.PathOf("lower_precision_safe_modules"),
                 "not supported: Tandem runs the whole forward under torch.autocast");
  }
  RETURN_IF_ERROR(autocast.Bool("enabled", &out->autocast_enabled));
  std::string dtype = "bfloat16";
  RETURN_IF_ERROR(autocast.String("dtype", &dtype));
  if (dtype == "bfloat16" || dtype == "torch.bfloat16" || dtype == "bf16") {
    out->autocast_dtype = AutocastDType::kBFloat16;
  } else if (dtype == "auto") {
    out->autocast_dtype = AutocastDType::kAuto;
  } else if (dtype == "float16" || dtype == "torch.float16" || dtype == "fp16" || dtype == "half" ||
             dtype == "torch.half") {
    return Error(autocast.PathOf("dtype"),
                 "fp16 autocast needs loss scaling, which Tandem does not implement; use "
                 "\"bfloat16\"");
  } else {
    return Error(autocast.PathOf("dtype"),
                 "must be one of \"auto\", \"bfloat16\", \"torch.bfloat16\", \"bf16\", got ",
                 Quoted(dtype));
  }
  return absl::OkStatus();
}

absl::Status ParseTandem(const ObjectReader& root, Config* out) {
  ASSIGN_OR_RETURN(ObjectReader tandem, root.Child("tandem", kTandemKeys));
  std::string update = "nearest";
  RETURN_IF_ERROR(tandem.String("bf16_update", &update));
  if (update == "nearest") {
    out->bf16_update = Bf16Update::kNearest;
  } else if (update == "kahan") {
    out->bf16_update = Bf16Update::kKahan;
  } else if (update == "stochastic") {
    out->bf16_update = Bf16Update::kStochastic;
  } else {
    return Error(tandem.PathOf("bf16_update"),
                 "must be one of \"nearest\", \"kahan\", \"stochastic\", got ", Quoted(update));
  }
  if (out->bf16_update != Bf16Update::kNearest && !out->bf16_master_weights_and_grads) {
    return Error(tandem.PathOf("bf16_update"), Quoted(update),
                 " requires bf16.bf16_master_weights_and_grads = true; with an fp32 master "
                 "weight every update is kept exactly");
  }
  std::string moments = "stochastic";
  RETURN_IF_ERROR(tandem.String("bf16_optimizer_states_rounding", &moments));
  if (moments == "stochastic") {
    out->bf16_optimizer_states_rounding = MomentRounding::kStochastic;
  } else if (moments == "nearest") {
    out->bf16_optimizer_states_rounding = MomentRounding::kNearest;
  } else {
    return Error(tandem.PathOf("bf16_optimizer_states_rounding"),
                 "must be \"stochastic\" or \"nearest\", got ", Quoted(moments));
  }
  RETURN_IF_ERROR(tandem.Bool("no_decay", &out->no_decay));
  RETURN_IF_ERROR(ParseParamGroups(tandem, &out->param_groups));
  std::string reduction = "mean";
  RETURN_IF_ERROR(tandem.String("gradient_reduction", &reduction));
  if (reduction == "mean") {
    out->gradient_reduction = GradientReduction::kMean;
  } else if (reduction == "sum") {
    out->gradient_reduction = GradientReduction::kSum;
  } else {
    return Error(tandem.PathOf("gradient_reduction"), "must be \"mean\" or \"sum\", got ",
                 Quoted(reduction));
  }
  double timeout_s = out->collective_timeout_ms / 1000.0;
  RETURN_IF_ERROR(tandem.Number("collective_timeout_s", Bound::kPositive, &timeout_s));
  if (timeout_s < 0.001 || timeout_s > 1e9) {
    return Error(tandem.PathOf("collective_timeout_s"), "must be in [0.001, 1e9], got ", timeout_s);
  }
  out->collective_timeout_ms = std::llround(timeout_s * 1000.0);
  return absl::OkStatus();
}

// Batch sizes: each >= 1, and whichever of them are given must fit some world size.
absl::Status ParseBatch(const ObjectReader& root, Config* out) {
  int64_t train = 0, micro = 0;
  RETURN_IF_ERROR(root.Int("train_batch_size", 1, &train));
  RETURN_IF_ERROR(root.Int("train_micro_batch_size_per_gpu", 1, &micro));
  RETURN_IF_ERROR(root.Int("gradient_accumulation_steps", 1, &out->gradient_accumulation_steps));
  if (root.Has("train_batch_size")) out->train_batch_size = train;
  if (root.Has("train_micro_batch_size_per_gpu")) out->train_micro_batch_size_per_gpu = micro;
  out->gradient_accumulation_steps_given = root.Has("gradient_accumulation_steps");
  if (!out->train_batch_size) return absl::OkStatus();
  const int64_t gas = out->gradient_accumulation_steps;
  // train must equal micro * gas * world for some world >= 1, i.e. be a multiple of the given ones.
  if (out->train_micro_batch_size_per_gpu && out->gradient_accumulation_steps_given) {
    if (train % micro != 0 || (train / micro) % gas != 0) {
      return Error(root.PathOf("train_batch_size"),
                   "must be a multiple of train_micro_batch_size_per_gpu * "
                   "gradient_accumulation_steps (",
                   micro, " * ", gas, "), got ", train);
    }
  } else if (out->train_micro_batch_size_per_gpu) {
    if (train % micro != 0) {
      return Error(root.PathOf("train_batch_size"),
                   "must be a multiple of train_micro_batch_size_per_gpu (", micro, "), got ",
                   train);
    }
  } else if (out->gradient_accumulation_steps_given && train % gas != 0) {
    return Error(root.PathOf("train_batch_size"),
                 "must be a multiple of gradient_accumulation_steps (", gas, "), got ", train);
  }
  return absl::OkStatus();
}

absl::Status ParseTopLevel(const ObjectReader& root, Config* out) {
  RETURN_IF_ERROR(ParseBatch(root, out));
  RETURN_IF_ERROR(root.Number("gradient_clipping", Bound::kNonNegative, &out->gradient_clipping));
  if (root.Has("optimizer")) RETURN_IF_ERROR(ParseOptimizer(root, &out->optimizer));
  if (root.Has("scheduler")) {
    RETURN_IF_ERROR(ParseScheduler(root, &out->scheduler));
    // DeepSpeed's WarmupLR warms up to the optimizer's lr when warmup_max_lr is not given.
    const json* params = root.Find("scheduler")->contains("params")
                             ? &root.Find("scheduler")->at("params")
                             : nullptr;
    if (out->scheduler.type == SchedulerType::kWarmupLR &&
        (params == nullptr || !params->contains("warmup_max_lr"))) {
      out->scheduler.warmup_max_lr = out->optimizer.lr;
    }
  }
  if (root.Has("zero_optimization")) RETURN_IF_ERROR(ParseZero(root, &out->zero));

  // "bfloat16" is DeepSpeed's older name for "bf16".
  if (root.Has("bf16") && root.Has("bfloat16")) {
    return Error(root.PathOf("bfloat16"), "is an alias of bf16; give only one of them");
  }
  std::string_view bf16_key = root.Has("bfloat16") ? "bfloat16" : "bf16";
  if (root.Has(bf16_key)) RETURN_IF_ERROR(ParseBf16(root, bf16_key, out));
  if (root.Has("fp16")) RETURN_IF_ERROR(ParseFp16(root, out->bf16_enabled));

  if (root.Has("data_types")) {
    ASSIGN_OR_RETURN(ObjectReader types, root.Child("data_types", kDataTypesKeys));
    DType dtype = DType::kFloat32;
    RETURN_IF_ERROR(ParseDType(types, "grad_accum_dtype", &dtype));
    if (types.Has("grad_accum_dtype")) {
      std::string path = types.PathOf("grad_accum_dtype");
      if (dtype == DType::kBFloat16 && !out->bf16_enabled) {
        return Error(path,
                     "\"bf16\" requires bf16.enabled = true; fp32 parameters accumulate "
                     "fp32 gradients");
      }
      out->grad_accum_dtype = dtype;
    }
  }

  if (root.Has("torch_autocast")) {
    // Autocast with bf16 model states is the low-precision recipe of DeepSpeed #7700 (and of Ray's
    // disaggregated multimodal example): bf16 params, grads and optimizer states, bf16 autocast.
    RETURN_IF_ERROR(ParseAutocast(root, out));
  }
  RETURN_IF_ERROR(ParseDType(root, "communication_data_type", &out->communication_data_type));
  RETURN_IF_ERROR(root.Int("steps_per_print", 1, &out->steps_per_print));
  if (const json* seed = root.Find("seed")) {
    // Seeds are unsigned 64-bit, beyond what Int reads.
    if (seed->is_number_unsigned()) {
      out->seed = seed->get<uint64_t>();
    } else {
      int64_t value = 0;
      RETURN_IF_ERROR(root.Int("seed", 0, &value));
      out->seed = static_cast<uint64_t>(value);
    }
  }

  // Accepted for compatibility; see CONFIG.md for what each does (nothing yet).
  bool flag = false;
  RETURN_IF_ERROR(root.Bool("wall_clock_breakdown", &flag));
  RETURN_IF_ERROR(root.Bool("zero_allow_untested_optimizer", &flag));
  // Tandem always scales before the reduction (CONFIG.md), so both values describe what it does
  // up to rounding in the fp32 bucket.
  RETURN_IF_ERROR(root.Bool("prescale_gradients", &flag));
  double predivide = 1.0;
  RETURN_IF_ERROR(root.Number("gradient_predivide_factor", Bound::kAny, &predivide));
  if (predivide != 1.0) {
    return Error(root.PathOf("gradient_predivide_factor"), "must be 1.0, got ", predivide,
                 ": Tandem does not pre-divide gradients");
  }

  if (root.Has("tandem")) RETURN_IF_ERROR(ParseTandem(root, out));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Config> ParseConfig(std::string_view json_text) {
  ASSIGN_OR_RETURN(json doc, ParseJsonStrict(json_text));
  return ParseConfigJson(doc);
}

absl::StatusOr<Config> ParseConfigJson(const json& document, std::string_view path_prefix) {
  std::string root_path(path_prefix);
  if (!root_path.empty() && root_path.back() == '.') root_path.pop_back();
  if (root_path.empty()) root_path = "(top level)";
  ASSIGN_OR_RETURN(ObjectReader root, ObjectReader::Open(document, root_path,
                                                         std::string(path_prefix), kTopLevelKeys));
  Config config;
  RETURN_IF_ERROR(ParseTopLevel(root, &config));
  return config;
}

absl::StatusOr<Config> LoadConfigFile(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open"));
  std::string text;
  char buffer[1 << 14];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) text.append(buffer, n);
  if (std::ferror(file.get())) {
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot read"));
  }
  absl::StatusOr<Config> config = ParseConfig(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "fp32";
    case DType::kBFloat16:
      return "bf16";
  }
  return "unknown";
}

}  // namespace tandem::engine_config
