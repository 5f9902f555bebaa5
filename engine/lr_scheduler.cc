// LearningRate: DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR as a pure function of the
// number of completed optimizer steps.
//
// NOTE [DeepSpeed step count] The classes in deepspeed/runtime/lr_schedules.py keep
// `last_batch_iteration`, constructed as -1. __init__ does not call step(): it writes
// get_lr() at last_batch_iteration == -1 into the optimizer, which is the "not started" branch
// (WarmupLR / WarmupDecayLR: warmup_min_lr; WarmupCosineLR: 0.0). DeepSpeedEngine._take_model_step
// calls lr_scheduler.step() after each applied optimizer step (not after one skipped for overflow),
// and step() increments last_batch_iteration before computing the new lr. So the update that
// follows n completed steps uses the formulas below at
//   last_batch_iteration = n - 1.
// In particular the first two updates both use warmup_min_lr (n = 0: "not started"; n = 1:
// gamma(0) = 0), and WarmupCosineLR's first update uses lr 0.
//
// The formulas, with w = max(2, warmup_num_steps), T = total_num_steps, i = last_batch_iteration:
//
// WarmupLR._get_gamma:
//   i < w, log:     gamma = (1 / ln w) * ln(i + 1)
//   i < w, linear:  gamma = i / w
//   i >= w:         gamma = 1
// WarmupLR.get_lr:
//   i < 0:   warmup_min_lr
//   i >= 0:  warmup_min_lr + (warmup_max_lr - warmup_min_lr) * gamma
//
// WarmupDecayLR._get_gamma: as WarmupLR while i < w, then
//   gamma = max(0, (T - i) / max(1, T - w))
// WarmupDecayLR.get_lr: WarmupLR.get_lr
//
// WarmupCosineLR.get_lr_ratio:
//   i < w:   r = gamma_warmup(i) (the WarmupLR warmup gamma above);
//            ratio = warmup_min_ratio + r * (1 - warmup_min_ratio)
//   i >= w:  progress = min(1, (i - w + 1) / max(1, T - w))
//            ratio = max(0, cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi * progress)) / 2)
// WarmupCosineLR.get_lr: i < 0 -> 0.0; else org_lr * ratio (org_lr: the optimizer's lr).
#include "engine/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tandem::engine {
namespace {

// The warmup gamma in [0, 1] at `iteration` < `warmup_steps`, as WarmupLR._get_gamma. The log form
// multiplies by a precomputed 1 / ln(w) as DeepSpeed does, so the rounding is the same.
double WarmupGamma(WarmupType type, int64_t iteration, int64_t warmup_steps) {
  if (type == WarmupType::kLinear) {
    return static_cast<double>(iteration) / static_cast<double>(warmup_steps);
  }
  const double inverse_log_warm_up = 1.0 / std::log(static_cast<double>(warmup_steps));
  return inverse_log_warm_up * std::log(static_cast<double>(iteration + 1));
}

}  // namespace

double LearningRate(const SchedulerConfig& config, double base_lr, int64_t steps_taken) {
  if (config.type == SchedulerType::kNone) return base_lr;

  const int64_t iteration = steps_taken - 1;  // DeepSpeed's last_batch_iteration
  const int64_t warmup_steps = std::max<int64_t>(2, config.warmup_num_steps);
  const int64_t total_steps = config.total_num_steps;

  if (config.type == SchedulerType::kWarmupCosineLR) {
    if (iteration < 0) return 0.0;
    double ratio;
    if (iteration < warmup_steps) {
      const double gamma = WarmupGamma(config.warmup_type, iteration, warmup_steps);
      ratio = config.warmup_min_ratio + gamma * (1.0 - config.warmup_min_ratio);
    } else {
      const int64_t real_last_step = iteration - warmup_steps + 1;
      const int64_t real_total_steps = std::max<int64_t>(1, total_steps - warmup_steps);
      const double progress = std::min(
          1.0, static_cast<double>(real_last_step) / static_cast<double>(real_total_steps));
      const double cosine = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
      ratio = std::max(0.0, config.cos_min_ratio + (1.0 - config.cos_min_ratio) * cosine);
    }
    return base_lr * ratio;
  }

  // WarmupLR and WarmupDecayLR.
  if (iteration < 0) return config.warmup_min_lr;
  double gamma = 1.0;
  if (iteration < warmup_steps) {
    gamma = WarmupGamma(config.warmup_type, iteration, warmup_steps);
  } else if (config.type == SchedulerType::kWarmupDecayLR) {
    gamma = std::max(0.0, static_cast<double>(total_steps - iteration) /
                              std::max(1.0, static_cast<double>(total_steps - warmup_steps)));
  }
  const double delta = config.warmup_max_lr - config.warmup_min_lr;
  return config.warmup_min_lr + delta * gamma;
}

}  // namespace tandem::engine
