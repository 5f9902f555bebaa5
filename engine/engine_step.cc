// The optimizer step at the accumulation boundary, and the collective reads built on the same
// views.
#include <ATen/ATen.h>

#include <cmath>
#include <deque>
#include <exception>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/cuda_ops.h"
#include "engine/engine.h"
#include "engine/lr_scheduler.h"
#include "engine/safetensors.h"
#include "kernels/adamw.h"
#include "kernels/bf16.h"

namespace tandem::engine {
namespace {

constexpr char kComponent[] = "engine";

// NOTE [Random streams]
// Stochastic rounding draws the random numbers of element i of parameter p at step t as
// CounterRandom(StreamSeed(seed_t, key_p), i), where seed_t comes from the config's seed and the
// step, key_p from the parameter's name (and, for a shard of a weight a tensor-parallel group
// splits, the shard's index: SetShardStream), and i is the element's index in the parameter. The
// stream belongs to the parameter, not to the element's place in this engine's flat buffers, so:
// - a parameter several engines hold whole (tensor parallelism's norms, or k and v below T KV
//   heads) rounds alike on every one of them, however large the shards before it in the buffers
//   are (the vocabulary's first V % T shards have a row more), and stays bit-identical;
// - two shards of one weight, and any two parameters, draw from different streams;
// - a rank's numbers depend neither on the ZeRO partition nor on the world size, so a checkpoint
//   resumed at another data-parallel degree continues with the same numbers.
// The optimizer then runs once per parameter (BuildUpdateSegments), which on a GPU is one kernel
// launch per parameter; without stochastic rounding consecutive parameters share a launch.

// FNV-1a: a hash of the name that is the same in every build and process.
uint64_t Fingerprint(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

// SplitMix64's finaliser.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t StreamSeed(uint64_t step_seed, uint64_t key) { return Mix(step_seed ^ Mix(key)); }

kernels::Dtype KernelDtype(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? kernels::Dtype::kBFloat16 : kernels::Dtype::kFloat32;
}

kernels::Rounding KernelRounding(Bf16Update update) {
  switch (update) {
    case Bf16Update::kKahan:
      return kernels::Rounding::kKahan;
    case Bf16Update::kStochastic:
      return kernels::Rounding::kStochastic;
    case Bf16Update::kNearest:
      break;
  }
  return kernels::Rounding::kNearest;
}

double SumOfSquares(const at::Tensor& t) {
  if (t.numel() == 0) return 0.0;
  if (t.is_cpu()) return kernels::SumOfSquaresCpu(t.data_ptr(), KernelDtype(t), t.numel());
  return at::linalg_vector_norm(t, 2, {}, false, at::kFloat).pow(2).item<double>();
}

}  // namespace

bool Engine::IsGradientAccumulationBoundary() const {
  return (micro_steps_ + 1) % config_.gradient_accumulation_steps == 0;
}

double Engine::current_lr() const {
  return LearningRate(config_.scheduler, config_.optimizer.lr, global_steps_);
}

// NOTE [Failed backward]
// A group's collectives pair up by order, so one rank that skips a reduction hangs the others until
// the collective timeout. Step() settles each micro-batch first (GradientReducer::SettleMicroStep):
// - a micro-batch whose backward never reached the engine (a loss that does not depend on the
//   model on this rank) reduces zeros, as if every parameter were unused, so its peers' reductions
//   complete and the result is what one process would compute;
// - a backward that threw left the engine "in backward" with some units launched: the rest are
//   launched (with what they hold), the reductions complete, the partial gradients are dropped, and
//   the failure is remembered. A Step() inside the accumulation window then returns Aborted.
// At the accumulation boundary every rank reports whether it failed in the all-reduce that also
// sums the squared gradient norm (world-size floats more; at stage 0, where the norm needs no
// collective, it is the step's one extra collective). If any rank failed, every rank drops the
// step's gradients, counts the step as skipped, passes a NaN to the whole-model norm exchange so
// the other group skips too, and returns Aborted naming the failed ranks. The engines are
// consistent and ready for the next step. At stage 3 the peers of a rank whose backward stopped
// early may still be gathering blocks for theirs, collectives this rank no longer issues: they wait
// for the collective timeout, which names the operation (engine_config/CONFIG.md, "Failures inside
// a step").

absl::Status Engine::Step() {
  const bool boundary = IsGradientAccumulationBoundary();
  const GradientReducer::Settled settled = reducer_->SettleMicroStep(micro_steps_ + 1, boundary);
  if (!settled.error.ok()) return settled.error;
  ++micro_steps_;
  const std::string& failure = settled.failure;
  if (!boundary) {
    if (failure.empty()) return absl::OkStatus();
    return absl::AbortedError(absl::StrCat(
        "engine: group ", communicator_->group_name(), " rank ", rank(), ": ", failure,
        "; its gradients are dropped and the group will skip optimizer step ", global_steps_ + 1));
  }

  try {
    ASSIGN_OR_RETURN(const GroupCheck check, CheckGroup(!failure.empty()));
    if (!check.failed_ranks.empty()) {
      ++skipped_steps_;
      grads_.zero_();
      if (combine_norm_) {
        // The other group skips too; its answer does not change ours.
        combine_norm_(std::numeric_limits<double>::quiet_NaN()).IgnoreError();
      }
      return absl::AbortedError(absl::StrCat(
          "engine: group ", communicator_->group_name(), ": the backward of rank",
          check.failed_ranks.size() > 1 ? "s " : " ", absl::StrJoin(check.failed_ranks, ", "),
          " failed in optimizer step ", global_steps_ + 1,
          failure.empty() ? std::string() : absl::StrCat(" (here: ", failure, ")"),
          "; every rank of the group dropped the step's gradients and skipped it"));
    }
    const double squares = check.squares;
    last_grad_norm_ = std::sqrt(squares);
    double global_squares = squares;
    if (combine_norm_) {
      ASSIGN_OR_RETURN(global_squares, combine_norm_(squares));
    }
    last_global_grad_norm_ = std::sqrt(global_squares);
    if (!std::isfinite(last_global_grad_norm_)) {
      ++skipped_steps_;
      grads_.zero_();
      TANDEM_LOG(kWarning, kComponent)
          << "group " << communicator_->group_name() << " rank " << rank() << ": step "
          << global_steps_ + 1 << " skipped, gradient norm is " << last_global_grad_norm_;
      return absl::OkStatus();
    }
    double scale = 1.0;
    if (config_.gradient_clipping > 0.0) {
      scale = std::min(1.0, config_.gradient_clipping / (last_global_grad_norm_ + 1e-6));
    }
    RETURN_IF_ERROR(ApplyUpdate(scale));
    RETURN_IF_ERROR(AllGatherResident());
    grads_.zero_();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("engine: step failed: ", e.what()));
  }
  ++global_steps_;
  return absl::OkStatus();
}

void Engine::LeaveOutOfGradNorm(const std::vector<std::string>& names) {
  left_out_of_norm_.assign(layout_.units().size(), {});
  for (const std::string& name : names) {
    for (size_t i = 0; i < layout_.params().size(); ++i) {
      if (layout_.params()[i].name != name) continue;
      const ParamSlot& slot = layout_.slots()[i];
      left_out_of_norm_[slot.unit].emplace_back(slot.offset,
                                                slot.offset + layout_.params()[i].numel);
    }
  }
}

double Engine::DomainSquares(int unit) const {
  const at::Tensor domain = UnitDomainGradients(unit);
  double squares = SumOfSquares(domain);
  if (left_out_of_norm_.empty()) return squares;
  const int64_t start = DomainStart(unit), end = start + domain.numel();
  for (const auto& [begin, stop] : left_out_of_norm_[unit]) {
    const int64_t lo = std::max(begin, start), hi = std::min(stop, end);
    if (lo < hi) squares -= SumOfSquares(domain.narrow(0, lo - start, hi - lo));
  }
  return squares;
}

absl::StatusOr<Engine::GroupCheck> Engine::CheckGroup(bool failed_here) {
  GroupCheck check;
  for (size_t u = 0; u < layout_.units().size(); ++u)
    check.squares += DomainSquares(static_cast<int>(u));
  if (world_size() == 1) {
    if (failed_here) check.failed_ranks.push_back(0);
    return check;
  }
  // [squares, failed(rank 0), ..., failed(rank w-1)], summed over the group.
  at::Tensor values = at::zeros({1 + world_size()}, at::TensorOptions().dtype(at::kFloat));
  values[0] = config_.zero.stage > 0 ? check.squares : 0.0;
  if (failed_here) values[1 + rank()] = 1.0f;
  values = values.to(device_);
  RETURN_IF_ERROR(Wait(communicator_->AllReduceSum(values)));
  values = values.cpu();
  if (config_.zero.stage > 0) check.squares = values[0].item<double>();
  for (int r = 0; r < world_size(); ++r) {
    if (values[1 + r].item<float>() > 0.0f) check.failed_ranks.push_back(r);
  }
  return check;
}

absl::StatusOr<double> Engine::GroupGradSquares() {
  // Each rank's domain, summed over the group (stage 0 holds all of it on every rank).
  double squares = 0.0;
  for (size_t u = 0; u < layout_.units().size(); ++u) squares += DomainSquares(static_cast<int>(u));
  if (config_.zero.stage > 0 && world_size() > 1) {
    at::Tensor total =
        at::full({1}, squares, at::TensorOptions().dtype(at::kFloat).device(device_));
    RETURN_IF_ERROR(Wait(communicator_->AllReduceSum(total)));
    squares = total.item<double>();
  }
  return squares;
}

absl::Status Engine::ApplyUpdate(double grad_scale) {
  last_lr_ = current_lr();
  const OptimizerConfig& opt = config_.optimizer;
  std::vector<kernels::AdamWHyper> hypers;
  for (const OptimizerGroup& group : optimizer_groups_) {
    kernels::AdamWHyper hyper;
    hyper.lr = static_cast<float>(GroupLr(group));
    hyper.beta1 = static_cast<float>(group.beta1);
    hyper.beta2 = static_cast<float>(group.beta2);
    hyper.eps = static_cast<float>(group.eps);
    hyper.weight_decay = static_cast<float>(group.weight_decay);
    hyper.decoupled = opt.type == OptimizerType::kAdamW || opt.adam_w_mode;
    hyper.step = global_steps_ + 1;
    hyper.grad_scale = static_cast<float>(grad_scale);
    hypers.push_back(hyper);
  }
  const uint64_t seed = kernels::CounterRandom(config_.seed.value_or(0), global_steps_);
  const kernels::Rounding moment_rounding =
      config_.bf16_optimizer_states_rounding == MomentRounding::kStochastic
          ? kernels::Rounding::kStochastic
          : kernels::Rounding::kNearest;

  // One kernel call per segment (NOTE [Optimizer groups] in optimizer_groups.cc).
  for (const UpdateSegment& segment : segments_) {
    const int u = segment.unit;
    const int64_t offset = domain_offset_[u] + segment.begin, length = segment.length;
    at::Tensor weights = UnitWeights(u).narrow(0, segment.begin, length);
    at::Tensor grads = UnitDomainGradients(u).narrow(0, segment.begin, length);
    at::Tensor m = exp_avg_.narrow(0, offset, length);
    at::Tensor v = exp_avg_sq_.narrow(0, offset, length);
    kernels::AdamWBuffers b;
    b.param = weights.data_ptr();
    b.param_dtype = KernelDtype(weights);
    b.master = master_.defined() ? master_.narrow(0, offset, length).data_ptr<float>() : nullptr;
    b.grad = grads.data_ptr();
    b.grad_dtype = KernelDtype(grads);
    b.exp_avg = m.data_ptr();
    b.exp_avg_sq = v.data_ptr();
    b.state_dtype = KernelDtype(m);
    b.state_rounding = moment_rounding;
    b.n = length;
    if (param_dtype_ == at::kBFloat16 && !master_.defined()) {
      b.rounding = KernelRounding(config_.bf16_update);
      if (compensation_.defined()) {
        b.compensation =
            reinterpret_cast<uint16_t*>(compensation_.narrow(0, offset, length).data_ptr());
      }
    }
    if (segment.param >= 0) {  // NOTE [Random streams]
      b.seed = StreamSeed(seed, stream_keys_[segment.param]);
      b.seed_offset = static_cast<uint64_t>(segment.param_offset);
    }
    if (device_.is_cpu()) {
      kernels::AdamWCpu(b, hypers[segment.group]);
    } else {
      RETURN_IF_ERROR(RunAdamWOnDevice(b, hypers[segment.group], device_));
    }
  }
  return absl::OkStatus();
}

void Engine::InitStreamKeys() {
  stream_keys_.clear();
  for (const ParamSpec& param : layout_.params()) stream_keys_.push_back(Fingerprint(param.name));
}

absl::Status Engine::SetShardStream(const std::string& name, int64_t shard) {
  const std::string key = absl::StrCat(name, "#shard", shard);
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    if (layout_.params()[i].name == name) {
      stream_keys_[i] = Fingerprint(key);
      return absl::OkStatus();
    }
  }
  for (const auto& [alias, index] : aliases_) {
    if (alias == name) {
      stream_keys_[index] = Fingerprint(key);
      return absl::OkStatus();
    }
  }
  for (const std::string& frozen : frozen_names_) {
    if (frozen == name) return absl::OkStatus();
  }
  for (const auto& [alias, index] : frozen_aliases_) {
    if (alias == name) return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("SetShardStream: the model has no parameter ", name));
}

absl::Status Engine::AllGatherResident() {
  if (config_.zero.stage == 0 || world_size() == 1) return absl::OkStatus();
  // At most allgather_bucket_size elements of all-gathers in flight (DeepSpeed's bound on the
  // memory of its all-gather buffers; each all-gather may need a staging copy, e.g. Gloo's bf16 in
  // fp32), and always at least one unit.
  std::deque<std::pair<std::shared_ptr<Work>, int64_t>> works;
  int64_t in_flight = 0;
  for (size_t i = 0; i < layout_.units().size(); ++i) {
    const int u = static_cast<int>(i);
    if (!IsResident(u)) continue;
    const int64_t elements = layout_.units()[u].padded;
    while (!works.empty() && in_flight + elements > config_.zero.allgather_bucket_size) {
      RETURN_IF_ERROR(Wait(works.front().first));
      in_flight -= works.front().second;
      works.pop_front();
    }
    at::Tensor full = resident_.narrow(0, resident_offset_[u], elements);
    works.emplace_back(communicator_->AllGather(UnitWeights(u), full), elements);
    in_flight += elements;
  }
  for (const auto& work : works) RETURN_IF_ERROR(Wait(work.first));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<at::Tensor>> Engine::GatherUnits(bool gradients) {
  if (reducer_->in_backward())
    return absl::FailedPreconditionError("engine: gather during backward");
  if (absl::Status error = reducer_->error(); !error.ok()) return error;
  std::vector<at::Tensor> result;
  for (size_t i = 0; i < layout_.units().size(); ++i) {
    const int u = static_cast<int>(i);
    const Unit& unit = layout_.units()[u];
    at::Tensor domain;
    if (gradients) {
      domain = UnitDomainGradients(u).to(at::kFloat);
    } else {
      domain = master_.defined() ? master_.narrow(0, domain_offset_[u], DomainLength(u)).clone()
                                 : UnitWeights(u).to(at::kFloat);
    }
    at::Tensor full;
    if (config_.zero.stage == 0) {
      full = domain.contiguous();
    } else if (gradients && config_.zero.stage == 1) {
      full = UnitGradients(u).to(at::kFloat);
    } else {
      full = at::empty({unit.padded}, domain.options());
      RETURN_IF_ERROR(Wait(communicator_->AllGather(domain.contiguous(), full)));
    }
    result.push_back(full);
  }
  return result;
}

absl::StatusOr<NamedTensors> Engine::GatherParameters() {
  ASSIGN_OR_RETURN(std::vector<at::Tensor> units, GatherUnits(/*gradients=*/false));
  NamedTensors named;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSlot& slot = layout_.slots()[i];
    const ParamSpec& spec = layout_.params()[i];
    named.emplace_back(spec.name,
                       units[slot.unit].narrow(0, slot.offset, spec.numel).view(spec.shape).cpu());
  }
  return named;
}

absl::StatusOr<NamedTensors> Engine::GatherGradients() {
  ASSIGN_OR_RETURN(std::vector<at::Tensor> units, GatherUnits(/*gradients=*/true));
  NamedTensors named;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSlot& slot = layout_.slots()[i];
    const ParamSpec& spec = layout_.params()[i];
    named.emplace_back(spec.name,
                       units[slot.unit].narrow(0, slot.offset, spec.numel).view(spec.shape).cpu());
  }
  return named;
}

absl::Status Engine::ExportSafetensors(const std::string& path) {
  std::map<std::string, std::string> metadata;
  ASSIGN_OR_RETURN(NamedTensors named, ExportTensors(&metadata));
  if (rank() != 0) return absl::OkStatus();
  return WriteSafetensors(path, named, metadata);
}

absl::StatusOr<NamedTensors> Engine::ExportTensors(std::map<std::string, std::string>* metadata) {
  NamedTensors named;
  try {
    ASSIGN_OR_RETURN(named, GatherParameters());
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("export: ", e.what()));
  }
  NamedTensors frozen;
  try {
    ASSIGN_OR_RETURN(frozen, GatherFrozenParameters());
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("export: ", e.what()));
  }
  for (const auto& [alias, index] : aliases_) named.emplace_back(alias, named[index].second);
  for (const auto& [alias, index] : frozen_aliases_)
    frozen.emplace_back(alias, frozen[index].second);
  // In the model's own order of names, as named_parameters() lists them.
  std::map<std::string, at::Tensor> by_name;
  for (auto& [name, tensor] : named) by_name.emplace(name, tensor);
  for (auto& [name, tensor] : frozen) by_name.emplace(name, tensor);
  named.clear();
  for (const auto& item : model_->named_parameters(/*recurse=*/true)) {
    auto it = by_name.find(item.key());
    if (it != by_name.end()) named.emplace_back(it->first, it->second);
  }
  if (metadata != nullptr) {
    *metadata = {
        {"format", "pt"}, {"producer", "tandem"}, {"global_steps", std::to_string(global_steps_)}};
  }
  return named;
}

MemoryReport Engine::Memory() const {
  MemoryReport report;
  report.rank = rank();
  report.num_parameters = layout_.num_elements();
  auto bytes = [](const at::Tensor& t) -> int64_t {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
  };
  report.param_bytes = bytes(resident_) + bytes(owned_shards_);
  report.grad_bytes = bytes(grads_);
  report.master_bytes = bytes(master_);
  report.optimizer_bytes = bytes(exp_avg_) + bytes(exp_avg_sq_) + bytes(compensation_);
  report.bucket_bytes = reducer_ != nullptr ? reducer_->peak_bucket_bytes() : 0;
  report.frozen_parameters = frozen_parameters();
  report.frozen_bytes = FrozenBytes();
  if (device_.is_cuda()) {
    report.peak_bytes = DevicePeakBytes(device_);
    report.peak_source = "cuda";
  } else {
    report.peak_bytes = PeakResidentBytes();
    report.peak_source = "rss";
  }
  return report;
}

}  // namespace tandem::engine
