// Engine construction, buffers, the hooks that feed the gradient reducer (NOTE [Gradient flow] in
// engine.h; gradient_reducer.h) and the ZeRO-3 block gathers.
#include "engine/engine.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <exception>
#include <mutex>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/cuda_ops.h"

namespace tandem::engine {
namespace {

constexpr char kComponent[] = "engine";

at::ScalarType ToScalarType(DType dtype) {
  return dtype == DType::kBFloat16 ? at::kBFloat16 : at::kFloat;
}

// Forwards a parameter's "gradient accumulated" event to its engine while the engine lives.
class AccumulatedHook : public torch::autograd::FunctionPostHook {
 public:
  AccumulatedHook(std::shared_ptr<Engine*> engine, int index)
      : engine_(std::move(engine)), index_(index) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    if (Engine* engine = *engine_) engine->OnGradientAccumulated(index_);
    return outputs;
  }

 private:
  std::shared_ptr<Engine*> engine_;
  int index_;
};

// Hands memory freed since to the system: the CUDA caching allocator's free blocks, or glibc's free
// heap (which RSS would otherwise keep counting).
void ReleaseFreedMemory(const at::Device& device) {
  if (device.is_cuda()) {
    ReleaseCachedDeviceMemory();
    return;
  }
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

}  // namespace

int64_t ReductionUnitElements(const Config& config, int64_t trainable_elements) {
  const int64_t share = (trainable_elements + kUnitsPerModel - 1) / kUnitsPerModel;
  return std::min(config.zero.reduce_bucket_size, std::max(kMinUnitElements, share));
}

Engine::Engine(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<Communicator> communicator,
               Config config)
    : model_(std::move(model)),
      communicator_(std::move(communicator)),
      config_(std::move(config)),
      self_(std::make_shared<Engine*>(this)) {}

Engine::~Engine() {
  *self_ = nullptr;
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    if (accumulators_[i]) accumulators_[i]->del_post_hook(hook_keys_[i]);
  }
  for (BlockModule* block : blocks_) block->AttachHost(nullptr, -1);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::shared_ptr<torch::nn::Module> model,
                                                       std::shared_ptr<Communicator> communicator,
                                                       Config config) {
  if (model == nullptr) return absl::InvalidArgumentError("engine: model is null");
  if (communicator == nullptr) return absl::InvalidArgumentError("engine: communicator is null");
  std::unique_ptr<Engine> engine(
      new Engine(std::move(model), std::move(communicator), std::move(config)));
  try {
    RETURN_IF_ERROR(engine->Initialize());
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("engine: initialization failed: ", e.what()));
  }
  return engine;
}

absl::Status Engine::Initialize() {
  const int world = communicator_->world_size();
  // Batch arithmetic, as DeepSpeed: train_batch_size = micro * gas * world.
  if (config_.train_batch_size && config_.train_micro_batch_size_per_gpu) {
    const int64_t per_step = *config_.train_micro_batch_size_per_gpu * world;
    if (!config_.gradient_accumulation_steps_given) {
      if (*config_.train_batch_size % per_step != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "train_batch_size: ", *config_.train_batch_size,
            " is not divisible by train_micro_batch_size_per_gpu * world size = ", per_step));
      }
      config_.gradient_accumulation_steps = *config_.train_batch_size / per_step;
    } else if (*config_.train_batch_size != per_step * config_.gradient_accumulation_steps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train_batch_size: ", *config_.train_batch_size, " != train_micro_batch_size_per_gpu (",
          *config_.train_micro_batch_size_per_gpu, ") * gradient_accumulation_steps (",
          config_.gradient_accumulation_steps, ") * world size (", world, ")"));
    }
  }

  param_dtype_ = ToScalarType(config_.param_dtype());
  grad_dtype_ = ToScalarType(config_.grad_dtype());
  state_dtype_ = ToScalarType(config_.optimizer_state_dtype());
  comm_dtype_ = ToScalarType(config_.communication_data_type);
  gradient_scale_ = config_.gradient_reduction == GradientReduction::kMean
                        ? 1.0f / static_cast<float>(world * config_.gradient_accumulation_steps)
                        : 1.0f;

  // Blocks: every BlockModule below the root, numbered in traversal order. block_of_param maps
  // every parameter of a block (trainable or frozen) to it.
  std::map<const void*, int> block_of_param;
  for (const auto& named : model_->named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
    const auto& module = named.value();
    auto block = std::dynamic_pointer_cast<BlockModule>(module);
    if (!block) continue;
    if (block->host() != nullptr) {
      return absl::InvalidArgumentError(
          "engine: a BlockModule of this model already belongs to another engine");
    }
    const int id = static_cast<int>(blocks_.size());
    for (const auto& p : block->parameters(/*recurse=*/true)) {
      // Frozen parameters matter here only at stage 3, where they are gathered with their block.
      if (!p.requires_grad() && config_.zero.stage != 3) continue;
      if (block_of_param.count(p.unsafeGetTensorImpl())) {
        return absl::InvalidArgumentError(
            absl::StrCat("engine: BlockModules are nested or share parameters (block ", id, ")"));
      }
      block_of_param[p.unsafeGetTensorImpl()] = id;
    }
    blocks_.push_back(block.get());
    block_names_.push_back(named.key().empty() ? std::string("the model") : named.key());
  }

  std::vector<ParamSpec> specs;
  for (const auto& item : model_->named_parameters(/*recurse=*/true)) {
    const at::Tensor& p = item.value();
    if (!p.is_floating_point()) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine: parameter ", item.key(), " is not floating point"));
    }
    const bool in_block = block_of_param.count(p.unsafeGetTensorImpl()) > 0;
    if (!p.requires_grad()) {
      if (auto seen = frozen_index_of_.find(p.unsafeGetTensorImpl());
          seen != frozen_index_of_.end()) {
        if (config_.zero.stage == 3 && in_block) {
          return absl::InvalidArgumentError(absl::StrCat(
              "engine: parameter ", frozen_names_[seen->second], " is also ", item.key(),
              ", and ZeRO-3 gathers it only while its block runs; untie it or keep it out of "
              "BlockModules"));
        }
        frozen_aliases_.emplace_back(item.key(), seen->second);
        continue;
      }
      frozen_index_of_[p.unsafeGetTensorImpl()] = static_cast<int>(frozen_.size());
      frozen_.push_back(p);
      frozen_names_.push_back(item.key());
      frozen_shapes_.push_back(p.sizes().vec());
      continue;
    }
    if (auto seen = index_of_.find(p.unsafeGetTensorImpl()); seen != index_of_.end()) {
      // The same tensor under a second name (tied weights): one parameter, exported under both.
      const std::string& first = specs[seen->second].name;
      if (specs[seen->second].group >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "engine: parameter ", first, " is also ", item.key(),
            ", and ZeRO-3 gathers it only while its block runs; untie it or keep it out of "
            "BlockModules"));
      }
      aliases_.emplace_back(item.key(), seen->second);
      continue;
    }
    ParamSpec spec;
    spec.name = item.key();
    spec.shape = p.sizes().vec();
    spec.numel = p.numel();
    auto it = block_of_param.find(p.unsafeGetTensorImpl());
    spec.group = (config_.zero.stage == 3 && it != block_of_param.end()) ? it->second : -1;
    specs.push_back(std::move(spec));
    index_of_[p.unsafeGetTensorImpl()] = static_cast<int>(params_.size());
    params_.push_back(p);
  }
  if (params_.empty() && frozen_.empty()) {
    return absl::InvalidArgumentError("engine: the model has no parameters");
  }
  device_ = params_.empty() ? frozen_[0].device() : params_[0].device();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].device() != device_) {
      return absl::InvalidArgumentError(absl::StrCat("engine: parameter ", specs[i].name, " is on ",
                                                     params_[i].device().str(), ", expected ",
                                                     device_.str()));
    }
  }
  for (size_t i = 0; i < frozen_.size(); ++i) {
    if (frozen_[i].device() != device_) {
      return absl::InvalidArgumentError(absl::StrCat("engine: parameter ", frozen_names_[i],
                                                     " is on ", frozen_[i].device().str(),
                                                     ", expected ", device_.str()));
    }
  }
  {
    const platform::Bf16Support support = platform::DetectBf16Support(device_.str());
    compute_ = PlanCompute(config_, support);
    WarnOnce(EmulatedBf16Warning(compute_, config_, support, device_));
    if (communicator_->rank() == 0)
      TANDEM_LOG(kDebug, kComponent) << "compute: " << compute_.reason;
  }
  int64_t trainable_elements = 0;
  for (const ParamSpec& spec : specs) trainable_elements += spec.numel;
  ASSIGN_OR_RETURN(layout_, Layout::Build(std::move(specs), world,
                                          ReductionUnitElements(config_, trainable_elements)));
  RETURN_IF_ERROR(AssignOptimizerGroups());
  BuildUpdateSegments();
  InitStreamKeys();

  block_unit_.assign(blocks_.size(), -1);
  for (size_t u = 0; u < layout_.units().size(); ++u) {
    const int group = layout_.units()[u].group;
    if (group >= 0) block_unit_[group] = static_cast<int>(u);
  }
  RETURN_IF_ERROR(InitializeBuffers());
  GradientReducer::Options reduction;
  reduction.layout = &layout_;
  reduction.communicator = communicator_.get();
  reduction.stage = config_.zero.stage;
  reduction.overlap_comm = config_.zero.overlap_comm;
  reduction.accumulation_steps = config_.gradient_accumulation_steps;
  reduction.timeout = std::chrono::milliseconds(config_.collective_timeout_ms);
  reduction.device = device_;
  reduction.comm_dtype = comm_dtype_;
  reduction.grad_dtype = grad_dtype_;
  reduction.gradient_scale = gradient_scale_;
  reduction.unit_gradients = [this](int unit) { return UnitGradients(unit); };
  reduction.zero_gradients = [this] { grads_.zero_(); };
  reduction.at_boundary = [this] { return IsGradientAccumulationBoundary(); };
  reducer_ = std::make_unique<GradientReducer>(std::move(reduction));
  RETURN_IF_ERROR(InitializeFrozen(block_of_param));
  for (size_t b = 0; b < blocks_.size(); ++b) blocks_[b]->AttachHost(this, static_cast<int>(b));
  InstallHooks();

  last_lr_ = current_lr();
  ReleaseFreedMemory(device_);  // the frozen parameters' original storage
  TANDEM_LOG(kDebug, kComponent) << "group " << communicator_->group_name() << " rank " << rank()
                                 << ": " << layout_.num_elements() << " parameters in "
                                 << layout_.units().size() << " units, ZeRO stage "
                                 << config_.zero.stage;
  return absl::OkStatus();
}

bool Engine::IsResident(int unit) const {
  return !(config_.zero.stage == 3 && layout_.units()[unit].group >= 0);
}

int64_t Engine::DomainStart(int unit) const {
  return config_.zero.stage == 0 ? 0 : communicator_->rank() * layout_.units()[unit].shard;
}

int64_t Engine::DomainLength(int unit) const {
  const Unit& u = layout_.units()[unit];
  return config_.zero.stage == 0 ? u.padded : u.shard;
}

at::Tensor Engine::UnitWeights(int unit) const {
  if (IsResident(unit)) {
    return resident_.narrow(0, resident_offset_[unit] + DomainStart(unit), DomainLength(unit));
  }
  return owned_shards_.narrow(0, owned_offset_[unit], layout_.units()[unit].shard);
}

at::Tensor Engine::UnitGradients(int unit) const {
  const Unit& u = layout_.units()[unit];
  return config_.zero.stage <= 1 ? grads_.narrow(0, u.full_offset, u.padded)
                                 : grads_.narrow(0, u.shard_offset, u.shard);
}

at::Tensor Engine::UnitDomainGradients(int unit) const {
  if (config_.zero.stage == 2 || config_.zero.stage == 3) return UnitGradients(unit);
  return UnitGradients(unit).narrow(0, DomainStart(unit), DomainLength(unit));
}

absl::Status Engine::InitializeBuffers() {
  const auto& units = layout_.units();
  const auto options = at::TensorOptions().device(device_);
  int64_t resident_elements = 0, owned_elements = 0;
  resident_offset_.assign(units.size(), -1);
  owned_offset_.assign(units.size(), -1);
  domain_offset_.assign(units.size(), 0);
  gathered_.assign(units.size(), at::Tensor());
  for (size_t u = 0; u < units.size(); ++u) {
    if (IsResident(u)) {
      resident_offset_[u] = resident_elements;
      resident_elements += units[u].padded;
    } else {
      owned_offset_[u] = owned_elements;
      owned_elements += units[u].shard;
    }
    domain_offset_[u] = domain_elements_;
    domain_elements_ += DomainLength(u);
  }
  resident_ = at::zeros({resident_elements}, options.dtype(param_dtype_));
  owned_shards_ = at::zeros({owned_elements}, options.dtype(param_dtype_));
  if (config_.has_separate_master())
    master_ = at::zeros({domain_elements_}, options.dtype(at::kFloat));

  // Unit by unit: rank 0's initial values (in fp32, so a separate master starts exact) go into the
  // flat storage, and the unit's parameters are pointed at it (or, for stage-3 blocks, at nothing),
  // which frees the model's original storage before the next unit is copied.
  for (size_t u = 0; u < units.size(); ++u) {
    at::Tensor init = at::zeros({units[u].padded}, options.dtype(at::kFloat));
    for (int i = units[u].first_param; i < units[u].end_param; ++i) {
      init.narrow(0, layout_.slots()[i].offset, layout_.params()[i].numel)
          .copy_(params_[i].detach().reshape(-1));
    }
    RETURN_IF_ERROR(Wait(communicator_->Broadcast(init, 0)));
    if (IsResident(u)) {
      resident_.narrow(0, resident_offset_[u], units[u].padded).copy_(init);
    } else {
      owned_shards_.narrow(0, owned_offset_[u], units[u].shard)
          .copy_(init.narrow(0, DomainStart(u), DomainLength(u)));
    }
    if (master_.defined()) {
      master_.narrow(0, domain_offset_[u], DomainLength(u))
          .copy_(init.narrow(0, DomainStart(u), DomainLength(u)));
    }
    for (int i = units[u].first_param; i < units[u].end_param; ++i) {
      if (IsResident(u)) {
        params_[i].set_data(resident_
                                .narrow(0, resident_offset_[u] + layout_.slots()[i].offset,
                                        layout_.params()[i].numel)
                                .view(layout_.params()[i].shape));
      } else {
        params_[i].set_data(at::empty({0}, options.dtype(param_dtype_)));
      }
    }
  }

  // The storage the parameters were built in is free now, a whole model's worth of weights: hand
  // it back before the optimizer state is allocated, so the two never add up.
  ReleaseFreedMemory(device_);
  exp_avg_ = at::zeros({domain_elements_}, options.dtype(state_dtype_));
  exp_avg_sq_ = at::zeros({domain_elements_}, options.dtype(state_dtype_));
  if (config_.bf16_update == Bf16Update::kKahan) {
    compensation_ = at::zeros({domain_elements_}, options.dtype(at::kBFloat16));
  }
  grads_ = at::zeros({config_.zero.stage <= 1 ? layout_.full_elements() : layout_.shard_elements()},
                     options.dtype(grad_dtype_));
  return absl::OkStatus();
}

void Engine::InstallHooks() {
  // Accumulators are taken after set_data (a dtype change replaces a parameter's accumulator) and
  // kept alive here: a parameter holds its accumulator only weakly. Stage-3 block parameters get
  // none: their gradients come from the block's recomputation (AcceptBlockGradients), and an
  // accumulator made while they are released would record their empty shape as the gradient's
  // shape.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!IsResident(layout_.slots()[i].unit)) {
      hook_keys_.push_back(0);
      accumulators_.push_back(nullptr);
      continue;
    }
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
    hook_keys_.push_back(
        accumulator->add_post_hook(std::make_unique<AccumulatedHook>(self_, static_cast<int>(i))));
    accumulators_.push_back(std::move(accumulator));
  }
}

compat::AutocastScope Engine::Autocast() const {
  const auto device = device_.type();
  if (!compute_.autocast)
    return compat::AutocastScope(device, compat::AutocastState::Capture(device));
  return compat::AutocastScope(device, {true, compute_.autocast_dtype});
}

absl::Status Engine::Backward(const at::Tensor& loss) {
  try {
    loss.backward();
  } catch (const std::exception& e) {
    std::string message = e.what();
    if (const size_t end = message.find("\nException raised from"); end != std::string::npos) {
      message.resize(end);  // LibTorch's backtrace
    }
    reducer_->NoteBackwardFailure(
        absl::StrCat("the backward of micro step ", micro_steps_ + 1, " failed: ", message));
    return absl::InternalError(absl::StrCat("backward failed: ", message));
  }
  return reducer_->error();
}

// ---- Gradient flow: the hooks' entry points, forwarded to the reducer (gradient_reducer.h) ----

void Engine::OnGradientAccumulated(int index) {
  reducer_->AddFromHook(index, params_[index].mutable_grad());
}

void Engine::EnterBackward() { reducer_->EnterBackward(); }

std::string Engine::ParameterName(const at::Tensor& parameter) const {
  auto it = index_of_.find(parameter.unsafeGetTensorImpl());
  return it == index_of_.end() ? std::string() : layout_.params()[it->second].name;
}

void Engine::AcceptBlockGradients(int block_id, const std::vector<at::Tensor>& grads) {
  std::vector<std::pair<int, at::Tensor>> received;
  const std::vector<at::Tensor> block_params = blocks_[block_id]->trainable_parameters();
  for (size_t k = 0; k < block_params.size() && k < grads.size(); ++k) {
    auto it = index_of_.find(block_params[k].unsafeGetTensorImpl());
    if (it == index_of_.end()) continue;
    if (grads[k].defined()) {
      received.emplace_back(it->second, grads[k]);
    } else {
      // A parameter its block's Run does not use: it gets only weight decay. Said once, since a
      // silent zero gradient is how a broken recomputation looks too.
      WarnOnce(absl::StrCat("engine: block ", block_id, " parameter ",
                            layout_.params()[it->second].name,
                            " got no gradient from its block's recomputed backward; it is "
                            "treated as unused"));
    }
  }
  reducer_->Add(received);
}

absl::Status Engine::Wait(const std::shared_ptr<Work>& work) const {
  return work->Wait(std::chrono::milliseconds(config_.collective_timeout_ms));
}

// ---- ZeRO-3 blocks
// --------------------------------------------------------------------------------

absl::Status Engine::CheckBlockOrder(int block_id) {
  if (world_size() == 1) return absl::OkStatus();
  const bool backward = reducer_->in_backward();
  // Block 2b + phase, exact in fp32 up to 2^23 blocks.
  const float mine = static_cast<float>(2 * block_id + (backward ? 1 : 0));
  at::Tensor tag = at::full({1}, mine, at::TensorOptions().dtype(at::kFloat).device(device_));
  at::Tensor all = at::empty({world_size()}, tag.options());
  RETURN_IF_ERROR(Wait(communicator_->AllGather(tag, all)));
  const at::Tensor tags = all.cpu();
  auto describe = [&](float value) {
    const int block = static_cast<int>(value) / 2;
    const bool in_backward = static_cast<int>(value) % 2 == 1;
    return absl::StrCat("block ", block, " (",
                        block >= 0 && block < static_cast<int>(block_names_.size())
                            ? block_names_[block]
                            : std::string("?"),
                        ") for its ", in_backward ? "backward" : "forward");
  };
  for (int r = 0; r < world_size(); ++r) {
    const float theirs = tags[r].item<float>();
    if (theirs == mine) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "ZeRO-3: group ", communicator_->group_name(), " rank ", rank(), " gathers ",
        describe(mine), " while rank ", r, " gathers ", describe(theirs),
        ": every block must run on every rank of the group, in the same order (a rank without "
        "samples runs an empty forward), or the gathered parameters pair wrongly"));
  }
  return absl::OkStatus();
}

void Engine::GatherBlock(int block_id) {
  absl::Status status = CheckBlockOrder(block_id);
  if (status.ok()) status = GatherFrozenBlock(block_id);
  const int unit = block_unit_[block_id];
  if (status.ok() && unit >= 0) {
    const Unit& u = layout_.units()[unit];
    at::Tensor full = at::empty({u.padded}, owned_shards_.options());
    status =
        Wait(communicator_->AllGather(owned_shards_.narrow(0, owned_offset_[unit], u.shard), full));
    if (status.ok()) {
      gathered_[unit] = full;
      for (int i = u.first_param; i < u.end_param; ++i) {
        params_[i].set_data(full.narrow(0, layout_.slots()[i].offset, layout_.params()[i].numel)
                                .view(layout_.params()[i].shape));
      }
    }
  }
  if (!status.ok()) {
    reducer_->RecordError(status);
    throw std::runtime_error(std::string(status.message()));
  }
}

void Engine::ReleaseBlock(int block_id) {
  ReleaseFrozenBlock(block_id);
  const int unit = block_unit_[block_id];
  if (unit < 0) return;
  const Unit& u = layout_.units()[unit];
  for (int i = u.first_param; i < u.end_param; ++i) {
    params_[i].set_data(at::empty({0}, owned_shards_.options()));
  }
  gathered_[unit] = at::Tensor();
}

}  // namespace tandem::engine
