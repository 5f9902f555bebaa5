// A job group's least memory on one actor (memory_estimate.h): parameters from the models' lists
// (models/parameter_list.h), model states as engine/engine.cc allocates them.
#include "jobspec/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/strict_json.h"
#include "engine_config/config.h"
#include "engine_config/param_groups.h"
#include "models/parameter_list.h"
#include "nlohmann/json.hpp"

namespace tandem::jobspec {
namespace {

int64_t DtypeBytes(engine_config::DType dtype) {
  return dtype == engine_config::DType::kBFloat16 ? 2 : 4;
}

bool Frozen(const models::ParameterInfo& p, const std::vector<std::string>& freeze) {
  if (p.frozen) return true;
  return std::any_of(freeze.begin(), freeze.end(), [&](const std::string& pattern) {
    return engine_config::MatchesNamePattern(pattern, p.name);
  });
}

// `elements` (or bytes) split evenly over `ranks`; ZeRO's padding of uneven partitions aside.
double Split(double elements, int64_t ranks) {
  return elements / static_cast<double>(std::max<int64_t>(ranks, 1));
}

std::string Count(int64_t n) {
  if (n >= 1'000'000'000'000) return absl::StrFormat("%.2fT", n / 1e12);
  if (n >= 1'000'000'000) return absl::StrFormat("%.2fB", n / 1e9);
  if (n >= 1'000'000) return absl::StrFormat("%.2fM", n / 1e6);
  return absl::StrCat(n);
}

}  // namespace

std::string FormatBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= double(int64_t{1} << 40))
    return absl::StrFormat("%.1f TiB", b / double(int64_t{1} << 40));
  if (b >= double(1 << 30)) return absl::StrFormat("%.1f GiB", b / double(1 << 30));
  if (b >= double(1 << 20)) return absl::StrFormat("%.1f MiB", b / double(1 << 20));
  return absl::StrFormat("%.0f KiB", std::ceil(b / 1024));
}

absl::StatusOr<MemoryEstimate> EstimateGroupMemory(const JobConfig& job, Role role) {
  const bool vision = role == Role::kVision;
  const std::string& engine_json = vision ? job.vision.engine_json : job.llm.engine_json;
  absl::StatusOr<nlohmann::json> document = ParseJsonStrict(engine_json);
  if (!document.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(RoleName(role), ".engine: ", document.status().message()));
  }
  ASSIGN_OR_RETURN(
      const engine_config::Config config,
      engine_config::ParseConfigJson(*document, absl::StrCat(RoleName(role), ".engine.")));

  MemoryEstimate e;
  e.role = role;
  const std::vector<std::string>& freeze = vision ? job.vision.freeze : job.llm.freeze;
  const int tensor = vision ? 1 : job.llm.tensor_parallel;
  // The engine's data-parallel group: a vision group's every rank (sequence parallelism shares
  // the weights), an LLM group's ranks of one tensor index.
  const int64_t ranks = vision ? job.vision.actors : job.llm.replicas();
  const std::vector<models::ParameterInfo> list =
      vision ? models::VisionParameterList(job.vision.model)
             : models::LlmParameterList(job.llm.model);
  // Elements on tensor-parallel rank 0, which holds the most (an uneven vocabulary's extra row).
  double trainable_block = 0, trainable_other = 0, frozen_block = 0, frozen_other = 0;
  for (const models::ParameterInfo& p : list) {
    e.parameters += p.numel();
    const int64_t here = vision ? p.numel() : models::LlmShardElements(job.llm.model, p, tensor, 0);
    e.rank_parameters += here;
    double& bucket = Frozen(p, freeze) ? (p.in_block ? frozen_block : frozen_other)
                                       : (p.in_block ? trainable_block : trainable_other);
    bucket += static_cast<double>(here);
  }

  // Model states (engine.cc's InitializeBuffers; NOTE [Frozen parameters] in engine/frozen.cc).
  const int stage = config.zero.stage;
  e.zero_stage = stage;
  const double weight = DtypeBytes(config.param_dtype());
  const double trainable = trainable_block + trainable_other;
  const double weights = stage == 3
                             ? trainable_other * weight + Split(trainable_block * weight, ranks)
                             : trainable * weight;
  const double grads = stage <= 1 ? trainable * DtypeBytes(config.grad_dtype())
                                  : Split(trainable * DtypeBytes(config.grad_dtype()), ranks);
  const double per_owned = (config.has_separate_master() ? 4 : 0) +
                           2 * DtypeBytes(config.optimizer_state_dtype()) +
                           (config.bf16_update == engine_config::Bf16Update::kKahan ? 2 : 0);
  const double optimizer = stage == 0 ? trainable * per_owned : Split(trainable * per_owned, ranks);
  const double frozen = stage == 3 ? frozen_other * weight + Split(frozen_block * weight, ranks)
                                   : (frozen_block + frozen_other) * weight;
  const double states = weights + grads + optimizer;
  e.state_bytes_per_parameter = trainable > 0 ? states / trainable : 0;
  e.model_state_bytes = static_cast<int64_t>(std::ceil(states + frozen));

  // Activations of one micro-batch on one rank.
  const int64_t micro = job.schedule.global_batch / job.schedule.micro_batches;
  const int64_t replicas = vision ? job.vision.replicas() : job.llm.replicas();
  // A vision rank's rows are tiles: up to data.max_images_per_sample images a sample, each one tile
  // or LLaVA-NeXT's base and grid.
  const int64_t rows =
      vision ? micro * job.data.max_images_per_sample * MaxTilesPerImage(job.vision.model) : micro;
  e.samples_per_rank = (rows + replicas - 1) / replicas;
  const double compute = config.autocast_enabled ? 2 : weight;
  const double samples = static_cast<double>(e.samples_per_rank);
  if (vision) {
    const models::VisionConfig& m = job.vision.model;
    e.positions = m.num_positions();
    // Blocks after the feature layer never run, and a frozen tower keeps nothing for backward.
    const double layers = FreezesWholeGroup(freeze) ? 0 : static_cast<double>(m.feature_index());
    const double per_position = 8.0 * m.hidden + 2.0 * m.mlp_hidden;
    const double sequence_share = static_cast<double>(job.vision.sequence_parallel);
    e.activation_bytes = static_cast<int64_t>(samples * e.positions / sequence_share * layers *
                                              per_position * compute);
    e.data_bytes = static_cast<int64_t>(samples * m.channels * m.image_size * m.image_size * 4.0);
  } else {
    const models::LlmConfig& m = job.llm.model;
    const int64_t text = job.data.max_text_tokens;
    e.positions = LlmRowPositions(job);
    const double q = static_cast<double>(m.heads * m.resolved_head_dim());
    const double kv = static_cast<double>(m.kv_heads * m.resolved_head_dim());
    const double per_position = 4.0 * m.hidden + (2 * q + 2 * kv + 4.0 * m.mlp_hidden) / tensor;
    const double vocabulary = std::ceil(static_cast<double>(m.vocab_size) / tensor);
    e.activation_bytes =
        static_cast<int64_t>(samples * e.positions * m.layers * per_position * compute +
                             samples * text * vocabulary * 4.0 * 2);
  }
  if (job.data.kind == data::DataConfig::Kind::kShapes) {
    e.data_bytes += 8 * job.data.shapes.train_samples;  // data/sampler.h's EpochPermutation
  }
  return e;
}

std::string DescribeEstimate(const MemoryEstimate& e, const JobConfig& job) {
  const bool vision = e.role == Role::kVision;
  const std::string group = RoleName(e.role);
  const bool pretrained = !(vision ? job.vision.pretrained : job.llm.pretrained).empty();
  const int64_t ranks = vision ? job.vision.actors : job.llm.replicas();
  std::string model = absl::StrCat(group, pretrained ? ".pretrained" : ".model", ": ",
                                   Count(e.parameters), " parameters");
  if (e.rank_parameters != e.parameters) {
    absl::StrAppend(&model, ", ", Count(e.rank_parameters),
                    " on a rank of llm.parallel.tensor = ", job.llm.tensor_parallel);
  }
  std::string text = absl::StrCat(
      "an estimated ", FormatBytes(e.total()), " on each actor: model states ",
      FormatBytes(e.model_state_bytes), " (", model, "; ", group,
      ".engine: ", absl::StrFormat("%.1f", e.state_bytes_per_parameter),
      " bytes each at ZeRO stage ", e.zero_stage, " over ", ranks, " data-parallel rank",
      ranks == 1 ? "" : "s", "), activations ", FormatBytes(e.activation_bytes),
      " (schedule.global_batch / schedule.micro_batches: ", e.samples_per_rank, " sample",
      e.samples_per_rank == 1 ? "" : "s", " of ", e.positions, " positions a rank)");
  if (job.data.kind == data::DataConfig::Kind::kShapes) {
    absl::StrAppend(&text, ", data ", FormatBytes(e.data_bytes),
                    " (data.shapes.train_samples: the order of ", job.data.shapes.train_samples,
                    " samples)");
  } else {
    absl::StrAppend(&text, ", data ", FormatBytes(e.data_bytes), " (a micro-batch)");
  }
  return text;
}

absl::Status CheckEstimateFits(const MemoryEstimate& estimate, const JobConfig& job,
                               int64_t available, const std::string& where) {
  if (available <= 0 || estimate.total() <= available) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(RoleName(estimate.role), ": needs ", DescribeEstimate(estimate, job),
                   ", more than the ", FormatBytes(available), " of ", where));
}

}  // namespace tandem::jobspec
