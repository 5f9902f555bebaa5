// The actor's LibTorch half (worker.h): one rank of a group running DESIGN §2's step.
//
// NOTE [Disaggregated step] Every actor of a job draws the same sample order (same sampler, same
// seed), so each rank knows the whole global batch without being told. Within micro-batch k of b
// samples, rank r of a group of N owns step::OwnedSamples(r, N, b); a vision rank sends each
// overlap of its block with an LLM rank's block to that rank, and gets the gradient of the same
// overlap back.
//
//   vision rank:  forward(k) -> send slices -> ... forward(k + depth - 1) ... -> await grads(k)
//                 -> embeddings(k).backward(grad) -> engine.Step()
//   LLM rank:     expect all slices of the step up front -> for k: await slices(k) into one leaf
//                 -> loss = token-loss sum / target tokens of the global batch -> loss.backward()
//                 -> send leaf.grad() slices back -> engine.Step()
//
// The vision side runs ahead by up to `kPipelineDepth` micro-batches so both groups stay busy. The
// loss and the engines' sum reduction make the group sums equal the colocated trainer's gradients.
#include "actors/worker.h"

#include <malloc.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data/batch.h"
#include "data/caption_metrics.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/tokenizer.h"
#include "engine/communicator.h"
#include "engine/cuda_ops.h"
#include "engine/engine.h"
#include "models/llm.h"
#include "models/vision_encoder.h"
#include "step/ownership.h"
#include "step/step_common.h"

namespace tandem::actors {

const char* RoleName(Role role) { return role == Role::kVision ? "vision" : "llm"; }

std::string TransferJobKey(const std::string& job_id, int64_t attempt) {
  return absl::StrCat(job_id, "#", attempt);
}

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using step::OwnedSamples;
using step::SampleRange;
using transport::TransferKind;
using transport::TransferTag;
constexpr char kComponent[] = "actor";
constexpr size_t kPipelineDepth = 2;  // vision micro-batches in flight

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The bytes of a contiguous CPU tensor, in place.
TensorBytes BytesOf(const at::Tensor& tensor) {
  TensorBytes bytes;
  switch (tensor.scalar_type()) {
    case at::kBFloat16:
      bytes.dtype = DType::kBFloat16;
      break;
    case at::kDouble:
      bytes.dtype = DType::kFloat64;
      break;
    default:
      bytes.dtype = DType::kFloat32;
  }
  bytes.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
  bytes.data = static_cast<std::byte*>(tensor.data_ptr());
  bytes.size = tensor.numel() * tensor.element_size();
  return bytes;
}

// A slice of a tensor along dim 0: a contiguous view of a contiguous tensor.
at::Tensor Rows(const at::Tensor& tensor, SampleRange rows, int64_t first_row) {
  return tensor.narrow(0, rows.begin - first_row, rows.size());
}

std::vector<int64_t> Sub(const std::vector<int64_t>& all, SampleRange range) {
  return {all.begin() + range.begin, all.begin() + range.end};
}

absl::Status TorchError(std::string_view what, const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  return absl::InternalError(absl::StrCat(absl::string_view(what.data(), what.size()), ": ",
                                          c10 ? c10->what_without_backtrace() : e.what()));
}

class TorchWorker : public Worker {
 public:
  explicit TorchWorker(WorkerOptions options) : options_(std::move(options)) {}

  absl::StatusOr<AssignResult> Assign(const Assignment& assignment,
                                      std::shared_ptr<KeyValueStore> store,
                                      std::shared_ptr<transport::Transport> transport) override;
  absl::StatusOr<StepResult> RunStep(int64_t step) override;
  absl::StatusOr<EvalCounts> Evaluate(int64_t step) override;
  absl::Status SaveCheckpoint(int64_t step, const std::string& directory) override;
  absl::Status Export(const std::string& path) override;
  void Release() override;
  WorkerStatus status() const override;

 private:
  struct VisionInFlight {
    int64_t micro_batch = 0;
    at::Tensor embeddings;  // keeps its graph until backward
    at::Tensor sent;        // host copy the sends read from
    at::Tensor grad;        // host buffer the gradient slices land in
    std::vector<TransferTag> grad_tags;
    std::vector<std::unique_ptr<transport::SendHandle>> sends;
  };

  absl::Status Setup(const Assignment& assignment, std::shared_ptr<KeyValueStore> store);
  absl::StatusOr<StepResult> VisionStep(int64_t step,
                                        const std::vector<std::vector<int64_t>>& batches);
  absl::StatusOr<StepResult> LlmStep(int64_t step,
                                     const std::vector<std::vector<int64_t>>& batches);
  // The images and tokens of `indices` (one micro-batch; this rank reads the rows `mine`), taken
  // from prefetched_ when it holds the same indices.
  absl::StatusOr<step::MicroBatch> VisionBatch(const std::vector<int64_t>& indices,
                                                  SampleRange mine);
  // Reads the next step's first micro-batch into prefetched_ without advancing the sampler, while
  // this step waits for its gradients (like a DataLoader's prefetch). A read that fails is dropped:
  // the step that needs the batch reads it again and reports the error.
  void PrefetchBatch(SampleRange mine);
  absl::Status FinishVisionMicroBatch(VisionInFlight& f, StepResult* result);
  absl::StatusOr<EvalCounts> EvaluateBatch(
      int64_t step, int64_t batch_index, const std::vector<int64_t>& indices,
      std::deque<std::pair<at::Tensor, std::vector<std::unique_ptr<transport::SendHandle>>>>*
          sends);
  absl::Status WaitSends(std::vector<std::unique_ptr<transport::SendHandle>>& sends);
  absl::Status AwaitTransfer(const TransferTag& tag, StepResult* result);
  // The engine's GradNormCombiner under schedule.gradient_clipping: exchanges the groups' squared
  // gradient norms for the step running (step_ + 1) and returns their sum.
  absl::StatusOr<double> CombineGradSquares(double group_squares);
  TransferTag Tag(TransferKind kind, int64_t step, int64_t micro_batch, SampleRange samples,
                  int source_rank) const;
  // The peer group's ranks whose blocks overlap `mine`, with the overlaps.
  std::vector<std::pair<int, SampleRange>> Overlaps(SampleRange mine, int64_t samples) const;
  // Runs on the command thread, which alone replaces communicator_.
  void SetPhase(const char* phase) {
    phase_.store(phase);
    if (communicator_) last_collective_.store(communicator_->last_sequence());
  }
  int64_t MicroBatchSize() const {
    return job().schedule.global_batch / job().schedule.micro_batches;
  }
  const jobspec::JobConfig& job() const { return assignment_->job; }
  bool collective_generation() const {
    return engine_->config().zero.stage == 3 && assignment_->group_size > 1;
  }

  WorkerOptions options_;
  std::optional<Assignment> assignment_;
  std::shared_ptr<transport::Transport> transport_;
  data::Datasets datasets_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::unique_ptr<data::Sampler> sampler_;
  struct Prefetched {
    std::vector<int64_t> indices;  // the whole micro-batch's, as the sampler draws them
    step::MicroBatch batch;
  };
  std::optional<Prefetched> prefetched_;
  models::VisionEncoder vision_{nullptr};
  models::Llm llm_{nullptr};
  std::shared_ptr<engine::Communicator> communicator_;
  std::unique_ptr<engine::Engine> engine_;
  at::Device device_{at::kCPU};
  at::ScalarType embedding_dtype_ = at::kFloat;
  int64_t patches_ = 0;
  int64_t width_ = 0;

  mutable std::mutex status_mu_;
  std::string job_id_;  // guarded by status_mu_ (the rest is the command thread's)
  std::atomic<int64_t> step_{0};
  std::atomic<const char*> phase_{"idle"};
  std::atomic<int64_t> last_collective_{0};
};

absl::StatusOr<AssignResult> TorchWorker::Assign(const Assignment& assignment,
                                                 std::shared_ptr<KeyValueStore> store,
                                                 std::shared_ptr<transport::Transport> transport) {
  if (assignment_) {
    return absl::FailedPreconditionError(
        absl::StrCat("actor already runs job ", assignment_->job_id, "; release it first"));
  }
  assignment_ = assignment;
  transport_ = std::move(transport);
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    job_id_ = assignment.job_id;
  }
  step_ = 0;
  SetPhase("setup");
  absl::Status status;
  try {
    status = Setup(assignment, std::move(store));
  } catch (const std::exception& e) {
    status = TorchError("cannot build the job", e);
  }
  SetPhase("idle");
  if (!status.ok()) {
    Release();
    return status;
  }
  AssignResult result;
  result.parameters = models::CountParameters(assignment.role == Role::kVision
                                                  ? static_cast<torch::nn::Module&>(*vision_)
                                                  : static_cast<torch::nn::Module&>(*llm_));
  result.vocab_size = tokenizer_->size();
  result.train_samples = datasets_.train->size();
  result.eval_samples = datasets_.eval ? datasets_.eval->size() : 0;
  result.step = step_.load();
  return result;
}

absl::Status TorchWorker::Setup(const Assignment& a, std::shared_ptr<KeyValueStore> store) {
  const jobspec::JobConfig& job = a.job;
  const std::string group = RoleName(a.role);
  if (a.threads > 0) at::set_num_threads(a.threads);
  device_ = at::Device(options_.device);

  ASSIGN_OR_RETURN(datasets_,
                   data::OpenDatasets(job.data, job.vision.model.image_size, job.spec_dir));
  tokenizer_ =
      std::make_unique<data::Tokenizer>(data::Tokenizer::Build(data::AllTexts(*datasets_.train)));
  sampler_ = std::make_unique<data::Sampler>(datasets_.train->size(), job.schedule.seed);
  patches_ = job.vision.model.num_patches();
  width_ = job.llm.model.hidden;

  std::shared_ptr<torch::nn::Module> model;
  if (a.role == Role::kVision) {
    torch::manual_seed(step::VisionModelSeed(job.schedule.seed));
    vision_ = models::VisionEncoder(job.vision.model);
    vision_->to(device_);
    model = vision_.ptr();
  } else {
    models::LlmConfig llm_config = job.llm.model;
    llm_config.vocab_size = tokenizer_->size();
    torch::manual_seed(step::LlmModelSeed(job.schedule.seed));
    llm_ = models::Llm(llm_config);
    llm_->to(device_);
    model = llm_.ptr();
  }
  const int vision_ranks = a.role == Role::kVision ? a.group_size : a.peer_group_size;
  ASSIGN_OR_RETURN(engine::Config vision_config,
                   step::GroupEngineConfig(job.vision.engine_json, "vision.engine.",
                                              job.schedule, vision_ranks));
  embedding_dtype_ = step::EmbeddingScalarType(vision_config, device_);
  engine::Config config = vision_config;
  if (a.role == Role::kLlm) {
    ASSIGN_OR_RETURN(config, step::GroupEngineConfig(job.llm.engine_json, "llm.engine.",
                                                        job.schedule, a.group_size));
  }

  if (a.group_size == 1) {
    communicator_ = engine::CreateSingleRankCommunicator(group);
  } else if (device_.is_cuda()) {
#ifdef TANDEM_HAVE_NCCL
    engine::NcclOptions nccl;
    nccl.group_name = group;
    nccl.device_index = device_.index();
    nccl.timeout = a.timeout;
    ASSIGN_OR_RETURN(communicator_,
                     engine::CreateNcclCommunicator(store, a.rank, a.group_size, nccl));
#else
    return absl::InvalidArgumentError(
        "this actor was built without NCCL; it cannot join a CUDA group");
#endif
  } else {
    engine::GlooOptions gloo;
    gloo.group_name = group;
    gloo.hostname = options_.collective_host;
    gloo.timeout = a.timeout;
    ASSIGN_OR_RETURN(communicator_,
                     engine::CreateGlooCommunicator(store, a.rank, a.group_size, gloo));
  }
  ASSIGN_OR_RETURN(engine_, engine::Engine::Create(model, communicator_, config));
  if (vision_) vision_->set_compute_dtype(engine_->compute().activation_dtype);
  if (llm_) llm_->set_compute_dtype(engine_->compute().activation_dtype);
  if (job.schedule.gradient_clipping > 0) {
    engine_->SetGradNormCombiner([this](double squares) { return CombineGradSquares(squares); });
  }
  if (a.role == Role::kLlm && a.rank == 0 && !a.run_dir.empty()) {
    RETURN_IF_ERROR(tokenizer_->Save((fs::path(a.run_dir) / "tokenizer.json").string()));
  }
  if (!a.resume_from.empty()) {
    ASSIGN_OR_RETURN(step::ResumePoint resume,
                     step::LoadGroupCheckpoint(*engine_, a.resume_from, group));
    sampler_->Seek(resume.position);
    step_ = resume.step;
    TANDEM_LOG(kInfo, kComponent) << a.job_id << " " << group << " rank " << a.rank
                                  << ": resumed from " << a.resume_from << " at step "
                                  << resume.step;
  }
  TANDEM_LOG(kInfo, kComponent) << a.job_id << " " << group << " rank " << a.rank << "/"
                                << a.group_size << ": ready, " << models::CountParameters(*model)
                                << " parameters on " << device_.str();
  return absl::OkStatus();
}

TransferTag TorchWorker::Tag(TransferKind kind, int64_t step, int64_t micro_batch,
                             SampleRange samples, int source_rank) const {
  TransferTag tag;
  tag.job_id = TransferJobKey(assignment_->job_id, assignment_->attempt);
  tag.kind = kind;
  tag.step = step;
  tag.micro_batch = micro_batch;
  tag.sample_begin = samples.begin;
  tag.sample_end = samples.end;
  tag.source_rank = source_rank;
  return tag;
}

std::vector<std::pair<int, SampleRange>> TorchWorker::Overlaps(SampleRange mine,
                                                               int64_t samples) const {
  std::vector<std::pair<int, SampleRange>> out;
  const int peers = assignment_->peer_group_size;
  for (int peer = 0; peer < peers; ++peer) {
    const SampleRange overlap = step::Intersect(mine, OwnedSamples(peer, peers, samples));
    if (!overlap.empty()) out.emplace_back(peer, overlap);
  }
  return out;
}

// Rank r sends its group's squares to every peer rank p with p % group_size == r, and receives the
// peer group's from peer rank r % peer_group_size: every rank of both groups hears from the other
// group once, and both groups add the same two numbers.
absl::StatusOr<double> TorchWorker::CombineGradSquares(double group_squares) {
  const int rank = assignment_->rank, size = assignment_->group_size,
            peers = assignment_->peer_group_size;
  const SampleRange whole{0, 1};
  const at::Tensor mine = at::full({1}, group_squares, at::kDouble);
  const at::Tensor theirs = at::empty({1}, at::kDouble);
  const TransferTag incoming = Tag(TransferKind::kGradSquares, step_ + 1, 0, whole, rank % peers);
  RETURN_IF_ERROR(transport_->Expect(incoming, BytesOf(theirs)));
  std::vector<std::unique_ptr<transport::SendHandle>> sends;
  for (int peer = rank; peer < peers; peer += size) {
    sends.push_back(transport_->Send(
        peer, Tag(TransferKind::kGradSquares, step_ + 1, 0, whole, rank), BytesOf(mine)));
  }
  absl::Status status = transport_->Await(incoming, assignment_->timeout);
  status.Update(WaitSends(sends));
  RETURN_IF_ERROR(status);
  return group_squares + theirs.item<double>();
}

absl::Status TorchWorker::AwaitTransfer(const TransferTag& tag, StepResult* result) {
  const auto start = Clock::now();
  absl::Status status = transport_->Await(tag, assignment_->timeout);
  if (result) result->wait_s += Seconds(Clock::now() - start);
  return status;
}

absl::Status TorchWorker::WaitSends(std::vector<std::unique_ptr<transport::SendHandle>>& sends) {
  absl::Status status;
  for (auto& send : sends) status.Update(send->Wait(assignment_->timeout));
  sends.clear();
  return status;
}

absl::StatusOr<StepResult> TorchWorker::RunStep(int64_t step) {
  if (!assignment_) return absl::FailedPreconditionError("actor has no job");
  if (step != step_ + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step, " requested, but the actor's next step is ", step_ + 1));
  }
  std::vector<std::vector<int64_t>> batches;
  for (int64_t k = 0; k < job().schedule.micro_batches; ++k)
    batches.push_back(sampler_->Next(MicroBatchSize()));
  const int64_t skipped_before = engine_->skipped_steps();
  absl::StatusOr<StepResult> result;
  try {
    result =
        assignment_->role == Role::kVision ? VisionStep(step, batches) : LlmStep(step, batches);
  } catch (const std::exception& e) {
    result = TorchError(
        absl::StrCat(RoleName(assignment_->role), " rank ", assignment_->rank, " step ", step), e);
  }
  SetPhase("idle");
  if (!result.ok()) {
    transport_->Reset();  // no transfer may land in this step's buffers once they are freed
    return result.status();
  }
  step_ = step;
  result->skipped = engine_->skipped_steps() != skipped_before;
  result->grad_norm = engine_->last_grad_norm();
  result->lr = engine_->last_lr();
  return result;
}

absl::StatusOr<StepResult> TorchWorker::VisionStep(
    int64_t step, const std::vector<std::vector<int64_t>>& batches) {
  StepResult result;
  const auto start = Clock::now();
  const int rank = assignment_->rank;
  const SampleRange mine = OwnedSamples(rank, assignment_->group_size, MicroBatchSize());
  std::deque<VisionInFlight> in_flight;
  for (int64_t k = 0; k < static_cast<int64_t>(batches.size()); ++k) {
    SetPhase("forward");
    ASSIGN_OR_RETURN(step::MicroBatch mb, VisionBatch(batches[k], mine));
    VisionInFlight f;
    f.micro_batch = k;
    {
      auto autocast = engine_->Autocast();
      f.embeddings = vision_->forward(mb.images.to(device_));
    }
    if (f.embeddings.scalar_type() != embedding_dtype_) {
      return absl::InternalError(absl::StrCat("vision embeddings are ",
                                              c10::toString(f.embeddings.scalar_type()),
                                              ", expected ", c10::toString(embedding_dtype_)));
    }
    f.sent = f.embeddings.detach().to(at::kCPU).contiguous();
    f.grad = at::empty_like(f.sent);
    SetPhase("transfer");
    for (const auto& [peer, overlap] : Overlaps(mine, MicroBatchSize())) {
      TransferTag grad_tag = Tag(TransferKind::kGradients, step, k, overlap, peer);
      RETURN_IF_ERROR(transport_->Expect(grad_tag, BytesOf(Rows(f.grad, overlap, mine.begin))));
      f.grad_tags.push_back(grad_tag);
      TensorBytes slice = BytesOf(Rows(f.sent, overlap, mine.begin));
      result.bytes_sent += static_cast<int64_t>(slice.size);
      f.sends.push_back(transport_->Send(
          peer, Tag(TransferKind::kEmbeddings, step, k, overlap, rank), std::move(slice)));
    }
    in_flight.push_back(std::move(f));
    if (k + 1 == static_cast<int64_t>(batches.size()) && step < job().schedule.steps) {
      PrefetchBatch(mine);
    }
    while (in_flight.size() >= kPipelineDepth ||
           (k + 1 == static_cast<int64_t>(batches.size()) && !in_flight.empty())) {
      RETURN_IF_ERROR(FinishVisionMicroBatch(in_flight.front(), &result));
      in_flight.pop_front();
    }
  }
  result.compute_s = Seconds(Clock::now() - start) - result.wait_s;
  return result;
}

absl::StatusOr<step::MicroBatch> TorchWorker::VisionBatch(const std::vector<int64_t>& indices,
                                                             SampleRange mine) {
  std::optional<Prefetched> prefetched = std::exchange(prefetched_, std::nullopt);
  if (prefetched && prefetched->indices == indices) return std::move(prefetched->batch);
  ASSIGN_OR_RETURN(data::Batch batch, data::MakeBatch(*datasets_.train, Sub(indices, mine),
                                                      *tokenizer_, job().data.max_text_tokens));
  return step::ToTensors(batch);
}

void TorchWorker::PrefetchBatch(SampleRange mine) {
  const data::Sampler::Position next = sampler_->position();
  std::vector<int64_t> indices = sampler_->Next(MicroBatchSize());
  sampler_->Seek(next);
  absl::StatusOr<data::Batch> batch = data::MakeBatch(*datasets_.train, Sub(indices, mine),
                                                      *tokenizer_, job().data.max_text_tokens);
  if (batch.ok()) prefetched_ = Prefetched{std::move(indices), step::ToTensors(*batch)};
}

absl::Status TorchWorker::FinishVisionMicroBatch(VisionInFlight& f, StepResult* result) {
  SetPhase("transfer");
  for (const TransferTag& tag : f.grad_tags) RETURN_IF_ERROR(AwaitTransfer(tag, result));
  RETURN_IF_ERROR(WaitSends(f.sends));
  SetPhase("backward");
  f.embeddings.backward(f.grad.to(device_));
  SetPhase("optimizer");
  return engine_->Step();
}

absl::StatusOr<StepResult> TorchWorker::LlmStep(int64_t step,
                                                const std::vector<std::vector<int64_t>>& batches) {
  StepResult result;
  const auto start = Clock::now();
  const int rank = assignment_->rank;
  const int64_t b = MicroBatchSize();
  const SampleRange mine = OwnedSamples(rank, assignment_->group_size, b);
  // Tokens of the whole global batch (text only): the loss divides by all its target tokens.
  std::vector<at::Tensor> tokens;
  int64_t global_targets = 0;
  std::vector<at::Tensor> leaves;
  std::vector<std::vector<TransferTag>> tags(batches.size());
  for (size_t k = 0; k < batches.size(); ++k) {
    ASSIGN_OR_RETURN(
        data::Batch text,
        data::MakeTextBatch(*datasets_.train, batches[k], *tokenizer_, job().data.max_text_tokens));
    step::MicroBatch mb = step::ToTensors(text);
    global_targets += mb.targets;
    tokens.push_back(Rows(mb.tokens, mine, 0).to(device_));
    leaves.push_back(
        at::empty({mine.size(), patches_, width_}, at::TensorOptions().dtype(embedding_dtype_)));
    for (const auto& [peer, overlap] : Overlaps(mine, b)) {
      TransferTag tag =
          Tag(TransferKind::kEmbeddings, step, static_cast<int64_t>(k), overlap, peer);
      RETURN_IF_ERROR(transport_->Expect(tag, BytesOf(Rows(leaves[k], overlap, mine.begin))));
      tags[k].push_back(tag);
    }
  }
  std::vector<at::Tensor> grads;
  std::vector<std::unique_ptr<transport::SendHandle>> sends;
  for (size_t k = 0; k < batches.size(); ++k) {
    SetPhase("transfer");
    for (const TransferTag& tag : tags[k]) RETURN_IF_ERROR(AwaitTransfer(tag, &result));
    SetPhase("forward");
    at::Tensor leaf = leaves[k].to(device_).detach().requires_grad_(true);
    at::Tensor loss;
    {
      auto autocast = engine_->Autocast();
      at::Tensor logits = llm_->forward(leaf, tokens[k]);
      loss = models::CaptionLoss(logits, tokens[k], data::Tokenizer::kPad).sum /
             static_cast<double>(global_targets);
    }
    SetPhase("backward");
    loss.backward();
    result.loss += loss.item<double>();
    grads.push_back(leaf.grad().to(at::kCPU).contiguous());
    SetPhase("transfer");
    for (const auto& [peer, overlap] : Overlaps(mine, b)) {
      TensorBytes slice = BytesOf(Rows(grads.back(), overlap, mine.begin));
      result.bytes_sent += static_cast<int64_t>(slice.size);
      sends.push_back(transport_->Send(
          peer, Tag(TransferKind::kGradients, step, static_cast<int64_t>(k), overlap, rank),
          std::move(slice)));
    }
    SetPhase("optimizer");
    RETURN_IF_ERROR(engine_->Step());
  }
  SetPhase("transfer");
  RETURN_IF_ERROR(WaitSends(sends));
  result.compute_s = Seconds(Clock::now() - start) - result.wait_s;
  return result;
}

absl::StatusOr<EvalCounts> TorchWorker::Evaluate(int64_t step) {
  if (!assignment_) return absl::FailedPreconditionError("actor has no job");
  EvalCounts total;
  if (!datasets_.eval || datasets_.eval->size() == 0) return total;
  int64_t count = datasets_.eval->size();
  if (job().schedule.eval_samples > 0) count = std::min(count, job().schedule.eval_samples);
  const int64_t batch_size = std::max<int64_t>(1, MicroBatchSize());
  std::deque<std::pair<at::Tensor, std::vector<std::unique_ptr<transport::SendHandle>>>> sends;
  SetPhase("evaluate");
  absl::Status status;
  try {
    torch::NoGradGuard no_grad;
    for (int64_t begin = 0, e = 0; begin < count && status.ok(); begin += batch_size, ++e) {
      std::vector<int64_t> indices;
      for (int64_t i = begin; i < std::min(count, begin + batch_size); ++i) indices.push_back(i);
      absl::StatusOr<EvalCounts> counts = EvaluateBatch(step, e, indices, &sends);
      if (!counts.ok()) {
        status = counts.status();
        break;
      }
      total.samples += counts->samples;
      total.exact += counts->exact;
      total.tokens += counts->tokens;
      total.correct_tokens += counts->correct_tokens;
    }
    for (auto& [tensor, handles] : sends) status.Update(WaitSends(handles));
  } catch (const std::exception& e) {
    status = TorchError(absl::StrCat("evaluation after step ", step), e);
  }
  SetPhase("idle");
  if (!status.ok()) {
    transport_->Reset();
    return status;
  }
  return total;
}

absl::StatusOr<EvalCounts> TorchWorker::EvaluateBatch(
    int64_t step, int64_t batch_index, const std::vector<int64_t>& indices,
    std::deque<std::pair<at::Tensor, std::vector<std::unique_ptr<transport::SendHandle>>>>* sends) {
  const int rank = assignment_->rank;
  const int64_t n = static_cast<int64_t>(indices.size());
  const SampleRange mine = OwnedSamples(rank, assignment_->group_size, n);
  const int64_t text_len = job().data.max_text_tokens;
  EvalCounts counts;
  if (assignment_->role == Role::kVision) {
    at::Tensor images =
        at::zeros({0, 3, job().vision.model.image_size, job().vision.model.image_size});
    if (!mine.empty()) {
      ASSIGN_OR_RETURN(data::Batch batch,
                       data::MakeBatch(*datasets_.eval, Sub(indices, mine), *tokenizer_, text_len));
      images = step::ToTensors(batch).images;
    }
    if (mine.empty() && !collective_generation()) return counts;
    at::Tensor embeddings;
    {
      auto autocast = engine_->Autocast();
      embeddings = vision_->forward(images.to(device_)).to(at::kCPU).contiguous();
    }
    std::vector<std::unique_ptr<transport::SendHandle>> handles;
    for (const auto& [peer, overlap] : Overlaps(mine, n)) {
      handles.push_back(transport_->Send(
          peer, Tag(TransferKind::kEvalEmbeddings, step, batch_index, overlap, rank),
          BytesOf(Rows(embeddings, overlap, mine.begin))));
    }
    sends->emplace_back(embeddings, std::move(handles));
    while (sends->size() > kPipelineDepth) {
      RETURN_IF_ERROR(WaitSends(sends->front().second));
      sends->pop_front();
    }
    return counts;
  }
  if (mine.empty() && !collective_generation()) return counts;
  at::Tensor prefix =
      at::empty({mine.size(), patches_, width_}, at::TensorOptions().dtype(embedding_dtype_));
  std::vector<TransferTag> tags;
  for (const auto& [peer, overlap] : Overlaps(mine, n)) {
    tags.push_back(Tag(TransferKind::kEvalEmbeddings, step, batch_index, overlap, peer));
    RETURN_IF_ERROR(transport_->Expect(tags.back(), BytesOf(Rows(prefix, overlap, mine.begin))));
  }
  for (const TransferTag& tag : tags) RETURN_IF_ERROR(AwaitTransfer(tag, nullptr));
  std::vector<std::vector<int32_t>> generated;
  {
    auto autocast = engine_->Autocast();
    generated = models::GenerateGreedy(llm_, prefix.to(device_), data::Tokenizer::kBos,
                                       data::Tokenizer::kEos, text_len - 1,
                                       /*stop_when_done=*/!collective_generation());
  }
  if (mine.empty()) return counts;
  ASSIGN_OR_RETURN(data::Batch text,
                   data::MakeTextBatch(*datasets_.eval, Sub(indices, mine), *tokenizer_, text_len));
  data::CaptionScore score;
  for (int64_t row = 0; row < mine.size(); ++row) {
    const int64_t length = text.text_lengths[row];
    const int64_t* ids = text.tokens.data() + row * text.text_len;
    std::vector<int32_t> reference(ids + 1, ids + length - 1);  // without <bos> and <eos>
    data::Accumulate(generated[row], reference, &score);
  }
  counts.samples = score.samples;
  counts.exact = score.exact;
  counts.tokens = score.tokens_total;
  counts.correct_tokens = score.tokens_correct;
  return counts;
}

absl::Status TorchWorker::SaveCheckpoint(int64_t step, const std::string& directory) {
  if (!assignment_) return absl::FailedPreconditionError("actor has no job");
  if (step != step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint of step ", step, " requested at step ", step_.load()));
  }
  SetPhase("checkpoint");
  const std::map<std::string, std::string> client_state =
      step::CheckpointClientState(step, sampler_->position());
  std::error_code ec;
  fs::create_directories(directory, ec);
  absl::Status status;
  if (ec)
    status = absl::UnavailableError(absl::StrCat("cannot create ", directory, ": ", ec.message()));
  if (status.ok() && assignment_->role == Role::kLlm && assignment_->rank == 0) {
    status = tokenizer_->Save((fs::path(directory) / "tokenizer.json").string());
  }
  // Every rank takes part even after a local error, so the group's collectives stay matched.
  status.Update(engine_->SaveCheckpoint(
      (fs::path(directory) / RoleName(assignment_->role)).string(), client_state));
  SetPhase("idle");
  return status;
}

absl::Status TorchWorker::Export(const std::string& path) {
  if (!assignment_) return absl::FailedPreconditionError("actor has no job");
  SetPhase("checkpoint");
  absl::Status status = engine_->ExportSafetensors(path);
  SetPhase("idle");
  return status;
}

void TorchWorker::Release() {
  if (transport_) transport_->Reset();
  engine_.reset();
  communicator_.reset();
  vision_ = models::VisionEncoder(nullptr);
  llm_ = models::Llm(nullptr);
  sampler_.reset();
  prefetched_.reset();
  tokenizer_.reset();
  datasets_ = data::Datasets();
  transport_.reset();
  assignment_.reset();
  // What the job held goes back to the system: the CUDA allocator's cache, and the heap glibc
  // keeps for reuse (common/malloc_tuning.h).
  engine::ReleaseCachedDeviceMemory();
  malloc_trim(0);
  step_ = 0;
  SetPhase("idle");
  std::lock_guard<std::mutex> lock(status_mu_);
  job_id_.clear();
}

WorkerStatus TorchWorker::status() const {
  WorkerStatus status;
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    status.job_id = job_id_;
  }
  status.step = step_.load();
  status.phase = phase_.load();
  status.last_collective = last_collective_.load();
  return status;
}

}  // namespace

std::unique_ptr<Worker> CreateWorker(const WorkerOptions& options) {
  return std::make_unique<TorchWorker>(options);
}

}  // namespace tandem::actors
