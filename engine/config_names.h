// The engine's configuration types, which engine_config/ parses (its own namespace), named in the
// engine's namespace too: the engine's API (Engine::Create, the schedulers, the compute dtype)
// takes them, and code that drives an engine reads them as engine::Config, engine::DType, ...
#pragma once

#include "engine_config/config.h"

namespace tandem::engine {

using engine_config::AutocastDType;
using engine_config::Bf16Update;
using engine_config::Config;
using engine_config::DType;
using engine_config::DTypeName;
using engine_config::GradientReduction;
using engine_config::LoadConfigFile;
using engine_config::MomentRounding;
using engine_config::OptimizerConfig;
using engine_config::OptimizerType;
using engine_config::ParamGroupConfig;
using engine_config::ParseConfig;
using engine_config::ParseConfigJson;
using engine_config::SchedulerConfig;
using engine_config::SchedulerType;
using engine_config::WarmupType;
using engine_config::ZeroConfig;

}  // namespace tandem::engine
