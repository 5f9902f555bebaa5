// DeepSpeed's learning-rate schedules (deepspeed/runtime/lr_schedules.py): WarmupLR, WarmupDecayLR,
// WarmupCosineLR, with the same formulas and defaults. The schedule is a pure function of the
// number of optimizer steps taken, so a checkpoint only needs that count.
#pragma once

#include <cstdint>

#include "engine/config_names.h"

namespace tandem::engine {

// Learning rate for the optimizer step that follows `steps_taken` completed steps (0 for the first
// step), as DeepSpeed's scheduler after `steps_taken` calls of scheduler.step(). `base_lr` is
// optimizer.params.lr (WarmupCosineLR is relative to it; the others ignore it). kNone returns
// base_lr.
double LearningRate(const SchedulerConfig& config, double base_lr, int64_t steps_taken);

}  // namespace tandem::engine
