// Optimizer parameter groups: which hyperparameters each parameter's update uses
// (tandem.param_groups and tandem.no_decay, engine_config/CONFIG.md), and the update segments that
// carry them through the flat partitions.
//
// NOTE [Optimizer groups]
// A parameter belongs to the first tandem.param_groups entry with a pattern matching its name, else
// to the default group (optimizer.params). Unless its group sets weight_decay, no_decay gives it a
// weight decay of 0 when it is 1-D (biases, norm weights), the weight of a torch::nn::Embedding, or
// its last name component contains "embed", "position" or "token" (learned position tables; class,
// distillation and register tokens: the vision encoder's class_token, timm's cls_token, dist_token
// and reg_token, which timm's no_weight_decay() exempts too).
// Each (group, no_decay) pair becomes an OptimizerGroup. The optimizer then runs once per segment:
// a run of consecutive parameters of one OptimizerGroup inside a unit's domain (the part of the
// unit this rank updates), so a ZeRO partition that splits a parameter splits its segment too, and
// padding elements, which belong to no parameter, are never updated (they stay zero).
// The group's lr follows the schedule as a ratio: lr = group.lr * schedule(step) / peak, where the
// peak is warmup_max_lr for WarmupLR and WarmupDecayLR and optimizer.params.lr otherwise; a group
// without lr uses the schedule's lr itself.
#include <torch/nn/modules/embedding.h>

#include <algorithm>
#include <map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "engine/lr_scheduler.h"
#include "engine_config/param_groups.h"

namespace tandem::engine {
namespace {

constexpr char kComponent[] = "engine";

bool NameSuggestsNoDecay(const std::string& name) {
  const size_t dot = name.rfind('.');
  const std::string last = dot == std::string::npos ? name : name.substr(dot + 1);
  return last.find("embed") != std::string::npos || last.find("position") != std::string::npos ||
         last.find("token") != std::string::npos;
}

double SchedulePeak(const Config& config) {
  switch (config.scheduler.type) {
    case SchedulerType::kWarmupLR:
    case SchedulerType::kWarmupDecayLR:
      return config.scheduler.warmup_max_lr;
    case SchedulerType::kWarmupCosineLR:
    case SchedulerType::kNone:
      break;
  }
  return config.optimizer.lr;
}

}  // namespace

absl::Status Engine::AssignOptimizerGroups() {
  std::unordered_set<const void*> embeddings;
  for (const auto& module : model_->modules(/*include_self=*/true)) {
    if (auto* embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(module.get())) {
      embeddings.insert(embedding->weight.unsafeGetTensorImpl());
    }
  }
  const OptimizerConfig& opt = config_.optimizer;
  std::vector<bool> group_used(config_.param_groups.size(), false);
  std::map<std::pair<int, bool>, int> index_of;  // (config group or -1, no_decay) -> group
  group_of_param_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& name = layout_.params()[i].name;
    int config_group = -1;
    for (size_t g = 0; g < config_.param_groups.size() && config_group < 0; ++g) {
      for (const std::string& pattern : config_.param_groups[g].params) {
        if (engine_config::MatchesNamePattern(pattern, name)) {
          config_group = static_cast<int>(g);
          break;
        }
      }
    }
    const ParamGroupConfig* group =
        config_group >= 0 ? &config_.param_groups[config_group] : nullptr;
    if (group != nullptr) group_used[config_group] = true;
    const bool no_decay =
        config_.no_decay && (group == nullptr || !group->weight_decay) &&
        (params_[i].dim() < 2 || embeddings.count(params_[i].unsafeGetTensorImpl()) ||
         NameSuggestsNoDecay(name));
    auto [it, added] = index_of.emplace(std::make_pair(config_group, no_decay),
                                        static_cast<int>(optimizer_groups_.size()));
    if (added) {
      OptimizerGroup g;
      g.name = group != nullptr ? group->path : "default";
      if (no_decay) g.name += " (no_decay)";
      g.lr = group != nullptr ? group->lr : std::nullopt;
      g.weight_decay = no_decay ? 0.0
                                : (group != nullptr ? group->weight_decay.value_or(opt.weight_decay)
                                                    : opt.weight_decay);
      g.beta1 = group != nullptr ? group->beta1.value_or(opt.beta1) : opt.beta1;
      g.beta2 = group != nullptr ? group->beta2.value_or(opt.beta2) : opt.beta2;
      g.eps = group != nullptr ? group->eps.value_or(opt.eps) : opt.eps;
      optimizer_groups_.push_back(std::move(g));
    }
    group_of_param_[i] = it->second;
  }
  for (size_t g = 0; g < group_used.size(); ++g) {
    if (group_used[g]) continue;
    const ParamGroupConfig& group = config_.param_groups[g];
    if (layout_.params().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          group.path, ".params: the model has no trainable parameters (all are frozen)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        group.path, ".params: [\"", absl::StrJoin(group.params, "\", \""),
        "\"] matches no trainable parameter of the model (or only parameters an earlier group "
        "took; names are as in named_parameters(), e.g. ",
        layout_.params().front().name, ")"));
  }
  // A bf16 master rounded to nearest keeps no update under half a bf16 spacing of the weight.
  if (param_dtype_ == at::kBFloat16 && !config_.has_separate_master() &&
      config_.bf16_update == Bf16Update::kNearest && rank() == 0) {
    for (const OptimizerGroup& group : optimizer_groups_) {
      const double decay = group.lr.value_or(SchedulePeak(config_)) * group.weight_decay;
      if (decay > 0.0 && decay < 1.0 / 512) {
        TANDEM_LOG(kWarning, kComponent)
            << "optimizer group " << group.name << ": weight decay shrinks each weight by " << decay
            << " a step, under half a bf16 spacing (1/512 of the weight), so bf16 master "
            << "weights rounded to nearest never decay; set tandem.bf16_update to \"kahan\" or "
            << "\"stochastic\" to keep it";
        break;
      }
    }
  }
  if (rank() == 0) {
    for (size_t g = 0; g < optimizer_groups_.size(); ++g) {
      const int64_t count = std::count(group_of_param_.begin(), group_of_param_.end(), g);
      TANDEM_LOG(kDebug, kComponent)
          << "optimizer group " << optimizer_groups_[g].name << ": " << count
          << " parameters, weight_decay " << optimizer_groups_[g].weight_decay;
    }
  }
  return absl::OkStatus();
}

bool Engine::RoundsStochastically() const {
  const bool weights = param_dtype_ == at::kBFloat16 && !config_.has_separate_master() &&
                       config_.bf16_update == Bf16Update::kStochastic;
  const bool moments = config_.optimizer_state_dtype() == DType::kBFloat16 &&
                       config_.bf16_optimizer_states_rounding == MomentRounding::kStochastic;
  return weights || moments;
}

void Engine::BuildUpdateSegments() {
  segments_.clear();
  // Under stochastic rounding each parameter draws from its own stream: one segment per parameter.
  const bool per_parameter = RoundsStochastically();
  for (size_t u = 0; u < layout_.units().size(); ++u) {
    const Unit& unit = layout_.units()[u];
    const int64_t domain_begin = DomainStart(static_cast<int>(u));
    const int64_t domain_end = domain_begin + DomainLength(static_cast<int>(u));
    for (int i = unit.first_param; i < unit.end_param; ++i) {
      const int64_t begin = std::max(layout_.slots()[i].offset, domain_begin);
      const int64_t end =
          std::min(layout_.slots()[i].offset + layout_.params()[i].numel, domain_end);
      if (begin >= end) continue;
      UpdateSegment* last = segments_.empty() ? nullptr : &segments_.back();
      if (!per_parameter && last != nullptr && last->unit == static_cast<int>(u) &&
          last->group == group_of_param_[i] && last->begin + last->length == begin - domain_begin) {
        last->length += end - begin;
      } else {
        UpdateSegment segment{static_cast<int>(u), begin - domain_begin, end - begin,
                              group_of_param_[i]};
        if (per_parameter) {
          segment.param = i;
          segment.param_offset = begin - layout_.slots()[i].offset;
        }
        segments_.push_back(segment);
      }
    }
  }
}

double Engine::GroupLr(const OptimizerGroup& group) const {
  const double scheduled = current_lr();
  if (!group.lr) return scheduled;
  const double peak = SchedulePeak(config_);
  return peak > 0.0 ? *group.lr * (scheduled / peak) : 0.0;
}

std::vector<std::pair<std::string, double>> Engine::group_lrs() const {
  std::vector<std::pair<std::string, double>> result;
  for (const OptimizerGroup& group : optimizer_groups_)
    result.emplace_back(group.name, GroupLr(group));
  return result;
}

}  // namespace tandem::engine
