// The stage's shared half (stage.h): setup, the step and evaluation drivers, checkpoints, the
// transfers and the whole-model gradient norm. The groups' own halves are vision_stage.cc and
// llm_stage.cc.
#include "step/stage.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data/batch.h"
#include "engine/communicator.h"
#include "engine/counting_communicator.h"
#include "engine/engine.h"
#include "models/layers.h"
#include "step/tensor_parallel_checkpoint.h"

namespace tandem::step {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using transport::TransferKind;
using transport::TransferTag;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

absl::Status TorchError(std::string_view what, const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  return absl::InternalError(absl::StrCat(absl::string_view(what.data(), what.size()), ": ",
                                          c10 ? c10->what_without_backtrace() : e.what()));
}

std::mutex& ModelInitMutex() {
  static std::mutex mu;
  return mu;
}

Stage::Stage(Role role, const jobspec::JobConfig& job, std::shared_ptr<const JobData> data,
             Placement placement, std::shared_ptr<transport::Transport> transport,
             StageProgress* progress)
    : role_(role),
      job_(job),
      data_(std::move(data)),
      placement_(std::move(placement)),
      transport_(std::move(transport)),
      progress_(progress),
      sampler_(data_->train_order, job.schedule.seed) {
  if (placement_.parallel_communicator) {
    counted_parallel_ =
        std::make_shared<engine::CountingCommunicator>(placement_.parallel_communicator);
    placement_.parallel_communicator = counted_parallel_;
  }
}

// An asynchronous save: its snapshot, written into `directory` by `writer`, which sets `written`.
struct Stage::PendingSave {
  int64_t step = 0;
  std::string directory;  // the checkpoint's, as SaveCheckpoint was given it
  std::string group_directory;
  engine::CheckpointSnapshot snapshot;
  absl::Status status;  // the local part's, before the write
  absl::Status written;
  std::thread writer;
};

Stage::~Stage() {
  if (pending_save_ && pending_save_->writer.joinable()) pending_save_->writer.join();
}

absl::Status Stage::Build(std::shared_ptr<torch::nn::Module> model,
                          std::shared_ptr<engine::Communicator> communicator,
                          const std::vector<std::string>& left_out_of_norm) {
  const bool vision = role_ == Role::kVision;
  const int vision_ranks = vision ? placement_.group_size : placement_.peer_group_size;
  ASSIGN_OR_RETURN(
      engine_config::Config vision_config,
      GroupEngineConfig(job_.vision.engine_json, "vision.engine.", job_.schedule, vision_ranks));
  embedding_dtype_ = EmbeddingScalarType(vision_config, placement_.device);
  engine_config::Config config = vision_config;
  if (!vision) {
    ASSIGN_OR_RETURN(config, GroupEngineConfig(job_.llm.engine_json, "llm.engine.", job_.schedule,
                                               communicator->world_size()));
  } else if (placement_.parallel > 1) {
    // The engine's group spans the sequence-parallel ranks, which share their samples: DeepSpeed's
    // batch arithmetic (train_batch_size = micro * accumulation * world) does not hold there. It is
    // a check only; jobspec validated the batch over the replicas.
    config.train_batch_size.reset();
    config.train_micro_batch_size_per_gpu.reset();
  }
  RETURN_IF_ERROR(FreezeParameters(*model, vision ? job_.vision.freeze : job_.llm.freeze, group()));
  model->to(placement_.device);
  model_ = std::move(model);
  communicator_ = std::make_shared<engine::CountingCommunicator>(std::move(communicator));
  ASSIGN_OR_RETURN(engine_, engine::Engine::Create(model_, communicator_, config));
  if (!left_out_of_norm.empty()) engine_->LeaveOutOfGradNorm(left_out_of_norm);
  if (tensor_parallel()) {
    engine_->SetGradNormCombiner(
        [this](double squares) { return CombineTensorParallelSquares(squares); });
  } else if (job_.schedule.gradient_clipping > 0) {
    engine_->SetGradNormCombiner([this](double squares) { return CombineGradSquares(squares); });
  }
  return absl::OkStatus();
}

int64_t Stage::parameters() const { return models::CountParameters(*model_); }

at::Tensor Stage::HostBuffer(at::IntArrayRef sizes, at::ScalarType dtype) const {
  return at::empty(sizes, at::TensorOptions().dtype(dtype).pinned_memory(device().is_cuda()));
}

at::Tensor Stage::ToHost(const at::Tensor& tensor) const {
  if (tensor.is_cpu()) return tensor.contiguous();
  at::Tensor host = HostBuffer(tensor.sizes(), tensor.scalar_type());
  host.copy_(tensor);
  return host;
}

at::Tensor Stage::ToDevice(const at::Tensor& host) const {
  return host.to(device(), /*non_blocking=*/host.is_pinned());
}

void Stage::SetPhase(const char* phase) {
  if (!progress_) return;
  progress_->phase.store(phase);
  if (communicator_) progress_->last_collective.store(communicator_->last_sequence());
}

absl::StatusOr<MicroBatchPlan> Stage::Plan(const data::Dataset& dataset,
                                           const std::vector<int64_t>& indices, bool training,
                                           const std::vector<int64_t>* encoded) const {
  const int llm_replicas = role_ == Role::kLlm ? replicas() : peer_replicas();
  const int vision_replicas = role_ == Role::kVision ? replicas() : peer_replicas();
  // Evaluation generates from unpacked prompts in contiguous blocks.
  const bool balance = training && job_.schedule.balance;
  const int64_t pack = training ? job_.data.pack_tokens : 0;
  PlanOptions options{llm_replicas, vision_replicas, balance, job_.llm.model.hidden, pack};
  // A sample costs an LLM rank its row. Packed, that is the positions it holds; unpacked, every
  // row has one length (data.max_images_per_sample images' and data.max_text_tokens positions:
  // data::MakeTokenBatch), so balancing evens the number of rows and needs no text encoded.
  const bool costs = pack > 0;
  const int64_t row = jobspec::LlmRowPositions(job_);
  const data::TextCodec& text = *data_->text;
  const data::AnyResGeometry& any_res = text.any_res();
  // A prefix layout's images are not among the tokens.
  const int64_t prefix = text.image_token_id() < 0 ? job_.vision.model.num_features() : 0;
  std::vector<SampleLoad> loads;
  loads.reserve(indices.size());
  std::vector<std::vector<data::AnyResLayout>> layouts;
  std::vector<int64_t> text_tokens;
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t index = indices[i];
    RETURN_IF_ERROR(dataset.Check(index));
    SampleLoad load{dataset.ImageCount(index), row};
    // LLaVA-NeXT: each image's tiles and positions follow from its size on file.
    ASSIGN_OR_RETURN(const std::vector<data::Resolution> sizes,
                     data::SampleImageSizes(dataset, index, text));
    if (any_res.enabled()) {
      std::vector<data::AnyResLayout>& mine = layouts.emplace_back();
      load.images = 0;
      for (const data::Resolution& size : sizes) {
        mine.push_back(any_res.Layout(size));
        load.images += mine.back().tiles();
      }
    }
    if (costs) {
      int64_t ids = 0;
      if (encoded != nullptr) {
        ids = (*encoded)[i];
      } else {
        ASSIGN_OR_RETURN(const data::EncodedConversation conversation,
                         text.Encode(dataset.Messages(index), dataset.Describe(index), sizes));
        ids = static_cast<int64_t>(conversation.ids.size());
      }
      text_tokens.push_back(ids);
      load.positions = ids + load.images * prefix;
      if (load.positions > pack) {
        return absl::InvalidArgumentError(
            absl::StrCat(dataset.Describe(index), ": needs ", load.positions,
                         " positions (images and text), more than data.pack_tokens = ", pack));
      }
    }
    loads.push_back(load);
  }
  MicroBatchPlan plan = PlanMicroBatch(loads, options);
  plan.text_tokens = std::move(text_tokens);
  if (any_res.enabled()) {
    // The plan numbers a sample's tiles 0, 1, ...: which image and which of its tiles each is.
    for (PlannedImage& unit : plan.images) {
      int64_t tile = unit.image, image = 0;
      const std::vector<data::AnyResLayout>& mine = layouts[unit.sample];
      while (tile >= mine[image].tiles()) tile -= mine[image++].tiles();
      unit.image = image;
      unit.tile = tile;
    }
    plan.layouts = std::move(layouts);
  }
  return plan;
}

bool Stage::collective_generation() const {
  return engine_->config().zero.stage == 3 && engine_->world_size() > 1;
}

absl::StatusOr<StepResult> Stage::RunStep(int64_t step) {
  // NOTE [Snapshots in memory]: a restart's restore comes first, the data position with it.
  if (pending_restore_) {
    absl::Status restored;
    try {
      restored = RestoreFromMemory(std::move(*std::exchange(pending_restore_, nullptr)));
    } catch (const std::exception& e) {
      restored = TorchError(absl::StrCat(group(), " rank ", placement_.rank, " restore"), e);
    }
    if (!restored.ok()) {
      SetPhase("idle");
      transport_->Reset();
      return restored;
    }
  }
  std::vector<std::vector<int64_t>> batches;
  for (int64_t k = 0; k < job_.schedule.micro_batches; ++k)
    batches.push_back(sampler_.Next(MicroBatchSize()));
  const int64_t skipped_before = engine_->skipped_steps();
  const double waited_before = WaitedSeconds();
  const auto start = Clock::now();
  absl::StatusOr<StepResult> result;
  try {
    result = [&]() -> absl::StatusOr<StepResult> {
      int64_t skipped = 0;
      if (skip_bad_samples()) {
        ASSIGN_OR_RETURN(skipped, LeaveOutBadSamples(step, batches));
      }
      ASSIGN_OR_RETURN(StepResult trained, Train(step, batches));
      trained.skipped_samples = skipped;
      // NOTE [Snapshots in memory]: the last snapshot's copies had this step to arrive.
      RETURN_IF_ERROR(FinishSnapshotExchange(/*harvest=*/false));
      const int64_t every = job_.snapshot_every;
      if (every > 0 && step % every == 0 && step < job_.schedule.steps) {
        RETURN_IF_ERROR(TakeMemorySnapshot(step));
      }
      trained.snapshot_bytes = held_.bytes();
      return trained;
    }();
  } catch (const std::exception& e) {
    result = TorchError(absl::StrCat(group(), " rank ", placement_.rank, " step ", step), e);
  }
  SetPhase("idle");
  if (!result.ok()) {
    transport_->Reset();  // no transfer may land in this step's buffers once they are freed
    return result.status();
  }
  step_ = step;
  // What the rank waited for, its peers' collectives and the other group's transfers, is not its
  // compute: an idle rank that waits in the gradient reduction for a busy one must not look busy.
  result->wait_s = WaitedSeconds() - waited_before;
  result->compute_s = std::max(0.0, Seconds(Clock::now() - start) - result->wait_s);
  result->skipped = engine_->skipped_steps() != skipped_before;
  // With tensor parallelism each engine group holds a part of the model: the replica's sum.
  result->grad_norm =
      tensor_parallel() ? std::sqrt(tensor_parallel_squares_) : engine_->last_grad_norm();
  result->lr = engine_->last_lr();
  return result;
}

absl::StatusOr<int64_t> Stage::LeaveOutBadSamples(int64_t step,
                                                  std::vector<std::vector<int64_t>>& batches) {
  SetPhase("data");
  ASSIGN_OR_RETURN(std::vector<float> flags, FindBadSamples(step, batches));
  ASSIGN_OR_RETURN(flags, ShareBadSamples(step, std::move(flags)));
  LogBadSamples(step, batches, flags);
  int64_t dropped = 0;
  size_t position = 0;
  bool emptied = false;
  for (std::vector<int64_t>& batch : batches) {
    std::vector<int64_t> kept;
    for (const int64_t index : batch) {
      if (flags[position++] > 0) {
        ++dropped;
      } else {
        kept.push_back(index);
      }
    }
    emptied |= kept.empty();
    batch = std::move(kept);
  }
  if (!emptied) return dropped;
  // A micro-batch of no sample: the step's samples, in order, spread evenly again.
  std::vector<int64_t> all;
  for (const std::vector<int64_t>& batch : batches)
    all.insert(all.end(), batch.begin(), batch.end());
  const auto count = static_cast<int64_t>(batches.size());
  if (static_cast<int64_t>(all.size()) < count) {
    return absl::DataLossError(
        absl::StrCat("step ", step, ": ", all.size(), " of its ", all.size() + dropped,
                     " samples can be read, fewer than schedule.micro_batches = ", count,
                     " (data.on_bad_sample \"skip\" left out the others; the log names them)"));
  }
  auto next = all.begin();
  for (int64_t k = 0; k < count; ++k) {
    const auto size = static_cast<int64_t>(all.size()) / count +
                      (k < static_cast<int64_t>(all.size()) % count ? 1 : 0);
    batches[k].assign(next, next + size);
    next += size;
  }
  return dropped;
}

absl::StatusOr<int64_t> Stage::SumOverGroup(int64_t value) {
  if (communicator_->world_size() == 1) return value;
  // Communicators reduce fp32 (and bf16): the count crosses in 12-bit digits, whose sums stay exact
  // (below 2^24) for up to 4096 ranks.
  constexpr int kDigits = 4, kBits = 12;
  if (value < 0 || value >= (int64_t{1} << (kDigits * kBits))) {
    return absl::OutOfRangeError(absl::StrCat("a count of ", value, " to sum over the group"));
  }
  at::Tensor digits = at::empty({kDigits}, at::kFloat);
  for (int d = 0; d < kDigits; ++d)
    digits[d] = static_cast<float>((value >> (d * kBits)) & ((1 << kBits) - 1));
  at::Tensor sum = digits.to(placement_.device);
  RETURN_IF_ERROR(communicator_->AllReduceSum(sum)->Wait(placement_.timeout));
  sum = sum.cpu();
  int64_t total = 0;
  for (int d = 0; d < kDigits; ++d)
    total += static_cast<int64_t>(std::llround(sum[d].item<double>())) << (d * kBits);
  return total;
}

absl::StatusOr<std::vector<float>> Stage::ShareBadSamples(int64_t step, std::vector<float> flags) {
  const auto samples = static_cast<int64_t>(flags.size());
  at::Tensor host = at::from_blob(flags.data(), {samples}, at::kFloat).clone();
  if (role_ == Role::kLlm) {
    ASSIGN_OR_RETURN(host, ReceiveFromVision(TransferKind::kBadSamples, step, samples));
  } else {
    if (placement_.group_size > 1) {
      at::Tensor summed = host.to(placement_.device);
      RETURN_IF_ERROR(communicator_->AllReduceSum(summed)->Wait(placement_.timeout));
      host = summed.cpu();
    }
    std::vector<std::unique_ptr<transport::SendHandle>> sends;
    RETURN_IF_ERROR(SendToLlmRanks(TransferKind::kBadSamples, step, host, &sends));
    RETURN_IF_ERROR(WaitSends(sends));
  }
  const float* summed = host.data_ptr<float>();
  return std::vector<float>(summed, summed + samples);
}

absl::Status Stage::SendToLlmRanks(TransferKind kind, int64_t step, const at::Tensor& values,
                                   std::vector<std::unique_ptr<transport::SendHandle>>* sends) {
  const int rank = placement_.rank;
  const SampleRange whole{0, values.numel()};
  for (int peer = rank; peer < placement_.peer_group_size; peer += placement_.group_size) {
    ASSIGN_OR_RETURN(auto send, Send(peer, Tag(kind, step, 0, whole, rank), values, nullptr));
    sends->push_back(std::move(send));
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> Stage::ReceiveFromVision(TransferKind kind, int64_t step,
                                                    int64_t count) {
  at::Tensor host = HostBuffer({count}, at::kFloat);
  const TransferTag incoming =
      Tag(kind, step, 0, SampleRange{0, count}, placement_.rank % placement_.peer_group_size);
  RETURN_IF_ERROR(Expect(incoming, host));
  RETURN_IF_ERROR(Await(incoming));
  return host;
}

absl::StatusOr<EvalCounts> Stage::Evaluate(int64_t step) {
  EvalCounts total;
  const data::Dataset* eval = data_->datasets.eval.get();
  if (!eval || eval->size() == 0) return total;
  int64_t count = eval->size();
  if (job_.schedule.eval_samples > 0) count = std::min(count, job_.schedule.eval_samples);
  const int64_t batch_size = std::max<int64_t>(1, MicroBatchSize());
  SetPhase("evaluate");
  absl::Status status;
  try {
    torch::NoGradGuard no_grad;
    for (int64_t begin = 0, e = 0; begin < count; begin += batch_size, ++e) {
      std::vector<int64_t> indices;
      for (int64_t i = begin; i < std::min(count, begin + batch_size); ++i) indices.push_back(i);
      absl::StatusOr<EvalCounts> counts = EvaluateBatch(step, e, indices);
      if (!counts.ok()) {
        status = counts.status();
        break;
      }
      total += *counts;
    }
  } catch (const std::exception& e) {
    status = TorchError(absl::StrCat("evaluation after step ", step), e);
  }
  status.Update(FinishEvaluation());
  SetPhase("idle");
  if (!status.ok()) {
    transport_->Reset();
    return status;
  }
  return total;
}

absl::Status Stage::SaveCheckpoint(int64_t step, const std::string& directory) {
  if (pending_save_) {
    RETURN_IF_ERROR(FinishCheckpoint(pending_save_->step, pending_save_->directory));
  }
  SetPhase("checkpoint");
  const std::map<std::string, std::string> client_state =
      CheckpointClientState(step, sampler_.position());
  std::error_code ec;
  fs::create_directories(directory, ec);
  absl::Status status;
  if (ec)
    status = absl::UnavailableError(absl::StrCat("cannot create ", directory, ": ", ec.message()));
  if (status.ok()) status = SaveExtras(directory);
  // The training shards, so that a resume can tell whether they changed.
  const std::vector<data::ShardInfo> shards = data_->datasets.train->Shards();
  if (status.ok() && role_ == Role::kLlm && placement_.rank == 0 && !shards.empty()) {
    status = WriteFileAtomically((fs::path(directory) / kDataManifest).string(),
                                 data::ShardManifestJson(shards));
  }
  // Every rank takes part even after a local error, so the group's collectives stay matched.
  const std::string group_directory = (fs::path(directory) / CheckpointGroupDirectory()).string();
  if (!job_.async_checkpoints) {
    status.Update(engine_->SaveCheckpoint(group_directory, client_state));
    SetPhase("idle");
    return status;
  }
  engine::CheckpointSnapshot reuse;
  if (reusable_snapshot_) reuse = std::move(*reusable_snapshot_);
  absl::StatusOr<engine::CheckpointSnapshot> snapshot =
      engine_->SnapshotCheckpoint(client_state, std::move(reuse));
  SetPhase("idle");
  if (!snapshot.ok()) return snapshot.status();
  auto pending = std::make_unique<PendingSave>();
  pending->step = step;
  pending->directory = directory;
  pending->group_directory = group_directory;
  pending->snapshot = *std::move(snapshot);
  pending->status = status;
  if (status.ok()) {
    PendingSave* save = pending.get();
    save->writer = std::thread([save] {
      save->written = engine::WriteCheckpointSnapshot(save->snapshot, save->group_directory);
    });
  }
  pending_save_ = std::move(pending);
  return status;
}

absl::Status Stage::FinishCheckpoint(int64_t step, const std::string& directory) {
  if (!pending_save_) {
    if (!job_.async_checkpoints) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("no checkpoint of step ", step, " is being written (into ", directory, ")"));
  }
  PendingSave& save = *pending_save_;
  if (save.step != step || save.directory != directory) {
    return absl::FailedPreconditionError(absl::StrCat("finishing the checkpoint of step ", step,
                                                      " into ", directory, ", but step ", save.step,
                                                      "'s is being written into ", save.directory));
  }
  SetPhase("checkpoint");
  if (save.writer.joinable()) save.writer.join();
  absl::Status status = save.status;
  status.Update(save.written);
  // Every rank takes part even after a local error, so the group's collectives stay matched.
  status.Update(engine_->CompleteCheckpoint(save.snapshot, save.group_directory));
  reusable_snapshot_ = std::make_unique<engine::CheckpointSnapshot>(std::move(save.snapshot));
  pending_save_.reset();
  SetPhase("idle");
  return status;
}

absl::Status Stage::Export(const std::string& path) {
  SetPhase("checkpoint");
  absl::Status status;
  try {
    status = ExportWeights(path);
  } catch (const std::exception& e) {
    status = TorchError(absl::StrCat(group(), " rank ", placement_.rank, ": export"), e);
  }
  SetPhase("idle");
  return status;
}

absl::Status Stage::ExportWeights(const std::string& path) {
  return engine_->ExportSafetensors(path);
}

std::string Stage::CheckpointGroupDirectory() const {
  return tensor_parallel() ? LlmCheckpointDirectory(placement_.parallel, parallel_index())
                           : group();
}

absl::StatusOr<ResumePoint> Stage::LoadGroup(const std::string& checkpoint) {
  return LoadGroupCheckpoint(*engine_, checkpoint, CheckpointGroupDirectory());
}

absl::StatusOr<ResumePoint> Stage::Resume(const std::string& checkpoint) {
  ASSIGN_OR_RETURN(ResumePoint resume, LoadGroup(checkpoint));
  RETURN_IF_ERROR(SeekData(resume));
  return resume;
}

absl::Status Stage::SeekData(const ResumePoint& resume) {
  sampler_.Seek(resume.position);
  // The shards the next step reads are checked byte for byte against their index (the checkpoint's
  // data.json has matched the index when the data opened): a shard rewritten in place would give
  // the same position other samples. Only those shards: reading every one would cost a pass over
  // the data set. The vision ranks, which read the shards' images, share them out (the k-th shard
  // to rank k mod group size), so each shard is read once; a rank's refusal fails the resume.
  const data::Dataset& train = *data_->datasets.train;
  const std::vector<int64_t> next = sampler_.Next(MicroBatchSize() * job_.schedule.micro_batches);
  sampler_.Seek(resume.position);
  int64_t shard_end = -1, shard = 0;
  for (int64_t index : std::set<int64_t>(next.begin(), next.end())) {
    if (index < shard_end) continue;  // a shard met already
    if (role_ == Role::kVision && shard++ % placement_.group_size == placement_.rank)
      RETURN_IF_ERROR(train.VerifyShard(index));
    shard_end = data_->train_order.ShardEnd(index);
  }
  step_ = resume.step;
  return absl::OkStatus();
}

absl::Status Stage::Expect(const TransferTag& tag, const at::Tensor& destination) {
  ASSIGN_OR_RETURN(TensorBytes bytes, BytesOf(destination));
  return transport_->Expect(tag, std::move(bytes));
}

absl::StatusOr<std::unique_ptr<transport::SendHandle>> Stage::Send(int peer, const TransferTag& tag,
                                                                   const at::Tensor& source,
                                                                   StepResult* result) {
  ASSIGN_OR_RETURN(TensorBytes bytes, BytesOf(source));
  if (result) result->bytes_sent += static_cast<int64_t>(bytes.size);
  return transport_->Send(peer, tag, std::move(bytes));
}

absl::Status Stage::Await(const TransferTag& tag) {
  const auto start = Clock::now();
  absl::Status status = transport_->Await(tag, placement_.timeout);
  transfer_wait_s_ += Seconds(Clock::now() - start);
  return status;
}

double Stage::WaitedSeconds() const {
  double waited = transfer_wait_s_;
  if (communicator_) waited += communicator_->wait_seconds();
  if (counted_parallel_) waited += counted_parallel_->wait_seconds();
  return waited;
}

absl::Status Stage::WaitSends(std::vector<std::unique_ptr<transport::SendHandle>>& sends) {
  const auto start = Clock::now();
  absl::Status status;
  for (auto& send : sends) status.Update(send->Wait(placement_.timeout));
  sends.clear();
  transfer_wait_s_ += Seconds(Clock::now() - start);
  return status;
}

absl::StatusOr<double> Stage::CombineTensorParallelSquares(double squares) {
  at::Tensor total =
      at::full({1}, squares, at::TensorOptions().dtype(at::kFloat).device(placement_.device));
  const absl::Status reduced =
      placement_.parallel_communicator->AllReduceSum(total)->Wait(placement_.timeout);
  if (!reduced.ok()) return reduced;
  tensor_parallel_squares_ = total.cpu().item<double>();
  if (job_.schedule.gradient_clipping > 0) return CombineGradSquares(tensor_parallel_squares_);
  return tensor_parallel_squares_;
}

// Rank r sends its group's squares to every peer rank p with p % group_size == r, and receives the
// peer group's from peer rank r % peer_group_size: every rank of both groups hears from the other
// group once, and both groups add the same two numbers.
absl::StatusOr<double> Stage::CombineGradSquares(double group_squares) {
  const int rank = placement_.rank, size = placement_.group_size,
            peers = placement_.peer_group_size;
  const SampleRange whole{0, 1};
  const at::Tensor mine = at::full({1}, group_squares, at::kDouble);
  const at::Tensor theirs = at::empty({1}, at::kDouble);
  const TransferTag incoming = Tag(TransferKind::kGradSquares, step_ + 1, 0, whole, rank % peers);
  RETURN_IF_ERROR(Expect(incoming, theirs));
  std::vector<std::unique_ptr<transport::SendHandle>> sends;
  for (int peer = rank; peer < peers; peer += size) {
    ASSIGN_OR_RETURN(
        auto send,
        Send(peer, Tag(TransferKind::kGradSquares, step_ + 1, 0, whole, rank), mine, nullptr));
    sends.push_back(std::move(send));
  }
  absl::Status status = Await(incoming);
  status.Update(WaitSends(sends));
  RETURN_IF_ERROR(status);
  return group_squares + theirs.item<double>();
}

}  // namespace tandem::step
