// The colocated trainer (colocated.h): both models and both engines in one process.
#include "trainer/colocated.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data/batch.h"
#include "data/caption_metrics.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/tokenizer.h"
#include "engine/communicator.h"
#include "engine/engine.h"
#include "engine_config/config.h"
#include "jobspec/job_spec.h"
#include "models/llm.h"
#include "models/vision_encoder.h"
#include "rundir/checkpoint_dir.h"
#include "rundir/progress.h"
#include "rundir/run_log.h"
#include "step/step_common.h"

namespace tandem::trainer {
namespace {

namespace fs = std::filesystem;
constexpr char kComponent[] = "trainer";

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

class ColocatedRun {
 public:
  ColocatedRun(const jobspec::JobConfig& job, const RunOptions& options)
      : job_(job), options_(options) {}

  absl::StatusOr<rundir::RunSummary> Run() {
    RETURN_IF_ERROR(Setup());
    RETURN_IF_ERROR(Train());
    return summary_;
  }

 private:
  absl::Status Setup();
  absl::Status Train();
  absl::StatusOr<double> TrainStep();
  absl::StatusOr<rundir::EvalRecord> Evaluate(int64_t step);
  absl::Status SaveCheckpoint(int64_t step);
  // Loads job_.resume_from into both engines and the sampler; sets first_step_.
  absl::Status Resume();
  absl::Status WritePlot();
  std::string RunPath(const std::string& name) const {
    return (fs::path(run_dir_) / name).string();
  }

  const jobspec::JobConfig& job_;
  RunOptions options_;
  std::string run_dir_;
  data::Datasets datasets_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::unique_ptr<data::Sampler> sampler_;
  models::VisionEncoder vision_{nullptr};
  models::Llm llm_{nullptr};
  std::unique_ptr<engine::Engine> vision_engine_, llm_engine_;
  double llm_grad_squares_ =
      0;  // the LLM's squared gradient norm of the current step (gradient_clipping)
  std::unique_ptr<rundir::MetricsLog> metrics_;
  rundir::RunSummary summary_;
  int64_t text_len_ = 0;
  int64_t first_step_ = 1;
};

absl::Status ColocatedRun::Setup() {
  run_dir_ = options_.run_dir;
  std::error_code ec;
  if (fs::exists(run_dir_, ec) && !fs::is_empty(run_dir_, ec)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "run directory ", run_dir_, " already exists and is not empty; choose another --run-dir"));
  }
  fs::create_directories(fs::path(run_dir_) / "checkpoints", ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot create ", run_dir_, ": ", ec.message()));
  RETURN_IF_ERROR(WriteFileAtomically(RunPath("job.json"), jobspec::JobConfigToJson(job_) + "\n"));
  if (options_.threads > 0) at::set_num_threads(options_.threads);

  const models::VisionConfig& vision_config = job_.vision.model;
  ASSIGN_OR_RETURN(datasets_,
                   data::OpenDatasets(job_.data, vision_config.image_size, job_.spec_dir));
  tokenizer_ =
      std::make_unique<data::Tokenizer>(data::Tokenizer::Build(data::AllTexts(*datasets_.train)));
  RETURN_IF_ERROR(tokenizer_->Save(RunPath("tokenizer.json")));
  text_len_ = job_.data.max_text_tokens;
  sampler_ = std::make_unique<data::Sampler>(datasets_.train->size(), job_.schedule.seed);

  models::LlmConfig llm_config = job_.llm.model;
  llm_config.vocab_size = tokenizer_->size();
  try {
    torch::manual_seed(step::VisionModelSeed(job_.schedule.seed));
    vision_ = models::VisionEncoder(vision_config);
    torch::manual_seed(step::LlmModelSeed(job_.schedule.seed));
    llm_ = models::Llm(llm_config);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot build the models: ", e.what_without_backtrace()));
  }
  summary_.vision_parameters = models::CountParameters(*vision_);
  summary_.llm_parameters = models::CountParameters(*llm_);
  summary_.vocab_size = tokenizer_->size();

  ASSIGN_OR_RETURN(engine::Config vision_engine_config,
                   step::GroupEngineConfig(job_.vision.engine_json, "vision.engine.", job_.schedule, 1));
  ASSIGN_OR_RETURN(engine::Config llm_engine_config,
                   step::GroupEngineConfig(job_.llm.engine_json, "llm.engine.", job_.schedule, 1));
  ASSIGN_OR_RETURN(
      vision_engine_,
      engine::Engine::Create(vision_.ptr(), engine::CreateSingleRankCommunicator("vision"),
                             vision_engine_config));
  ASSIGN_OR_RETURN(llm_engine_,
                   engine::Engine::Create(llm_.ptr(), engine::CreateSingleRankCommunicator("llm"),
                                          llm_engine_config));
  vision_->set_compute_dtype(vision_engine_->compute().activation_dtype);
  llm_->set_compute_dtype(llm_engine_->compute().activation_dtype);
  if (job_.schedule.gradient_clipping > 0) {
    // Whole-model clipping, as the actors exchange it: the LLM steps first and reads the vision
    // group's squares; the vision group then adds the LLM's.
    llm_engine_->SetGradNormCombiner([this](double llm_squares) -> absl::StatusOr<double> {
      ASSIGN_OR_RETURN(const double vision_squares, vision_engine_->GroupGradSquares());
      llm_grad_squares_ = llm_squares;
      return llm_squares + vision_squares;
    });
    vision_engine_->SetGradNormCombiner([this](double vision_squares) -> absl::StatusOr<double> {
      return vision_squares + llm_grad_squares_;
    });
  }
  if (!job_.resume_from.empty()) RETURN_IF_ERROR(Resume());
  ASSIGN_OR_RETURN(rundir::MetricsLog log, rundir::MetricsLog::Open(RunPath("metrics.jsonl")));
  metrics_ = std::make_unique<rundir::MetricsLog>(std::move(log));

  summary_.job_name = job_.name;
  summary_.run_dir = run_dir_;
  TANDEM_LOG(kInfo, kComponent) << job_.name << ": colocated run in " << run_dir_ << ", vision "
                                << summary_.vision_parameters << " and llm "
                                << summary_.llm_parameters << " parameters, vocabulary "
                                << tokenizer_->size() << ", " << datasets_.train->size()
                                << " training samples";
  return absl::OkStatus();
}

absl::Status ColocatedRun::Resume() {
  ASSIGN_OR_RETURN(rundir::CheckpointInfo checkpoint,
                   rundir::ReadCheckpoint(jobspec::SpecPath(job_.resume_from, job_.spec_dir)));
  if (checkpoint.step >= job_.schedule.steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resume_from: ", checkpoint.directory, " is at step ", checkpoint.step,
        ", and schedule.steps is ", job_.schedule.steps, ": nothing is left to train"));
  }
  ASSIGN_OR_RETURN(step::ResumePoint vision,
                   step::LoadGroupCheckpoint(*vision_engine_, checkpoint.directory, "vision"));
  ASSIGN_OR_RETURN(step::ResumePoint llm, step::LoadGroupCheckpoint(*llm_engine_, checkpoint.directory, "llm"));
  if (vision.step != checkpoint.step || llm.step != checkpoint.step ||
      !(vision.position == llm.position)) {
    return absl::DataLossError(absl::StrCat(
        "resume_from: ", checkpoint.directory, ": its groups disagree (vision at step ",
        vision.step, ", llm at step ", llm.step, ", marker at step ", checkpoint.step, ")"));
  }
  sampler_->Seek(llm.position);
  first_step_ = checkpoint.step + 1;
  summary_.samples = checkpoint.step * job_.schedule.global_batch;
  TANDEM_LOG(kInfo, kComponent) << job_.name << ": resumed from " << checkpoint.directory
                                << " (written by " << checkpoint.vision_actors << " vision x "
                                << checkpoint.llm_actors << " llm actors)";
  return absl::OkStatus();
}

absl::StatusOr<double> ColocatedRun::TrainStep() {
  const jobspec::ScheduleConfig& schedule = job_.schedule;
  const int64_t micro = schedule.global_batch / schedule.micro_batches;
  // The loss is normalised by the target tokens of the whole global batch, so all its micro-batches
  // are assembled first (DESIGN §2).
  std::vector<step::MicroBatch> batches;
  int64_t global_targets = 0;
  for (int64_t k = 0; k < schedule.micro_batches; ++k) {
    ASSIGN_OR_RETURN(data::Batch batch, data::MakeBatch(*datasets_.train, sampler_->Next(micro),
                                                        *tokenizer_, text_len_));
    batches.push_back(step::ToTensors(batch));
    global_targets += batches.back().targets;
  }
  double step_loss = 0;
  try {
    for (step::MicroBatch& mb : batches) {
      at::Tensor embeddings;
      {
        auto autocast = vision_engine_->Autocast();
        embeddings = vision_->forward(mb.images);
      }
      at::Tensor received = embeddings.detach().requires_grad_(true);
      at::Tensor loss;
      {
        auto autocast = llm_engine_->Autocast();
        at::Tensor logits = llm_->forward(received, mb.tokens);
        loss = models::CaptionLoss(logits, mb.tokens, data::Tokenizer::kPad).sum /
               static_cast<double>(global_targets);
      }
      loss.backward();
      embeddings.backward(received.grad());
      step_loss += loss.item<double>();
      RETURN_IF_ERROR(llm_engine_->Step());
      RETURN_IF_ERROR(vision_engine_->Step());
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("training step ", vision_engine_->global_steps() + 1,
                                            " failed: ", e.what_without_backtrace()));
  }
  return step_loss;
}

absl::StatusOr<rundir::EvalRecord> ColocatedRun::Evaluate(int64_t step) {
  const data::Dataset& eval = *datasets_.eval;
  int64_t count = eval.size();
  if (job_.schedule.eval_samples > 0) count = std::min(count, job_.schedule.eval_samples);
  const int64_t batch_size =
      std::max<int64_t>(1, job_.schedule.global_batch / job_.schedule.micro_batches);
  data::CaptionScore score;
  torch::NoGradGuard no_grad;
  for (int64_t begin = 0; begin < count; begin += batch_size) {
    std::vector<int64_t> indices;
    for (int64_t i = begin; i < std::min(count, begin + batch_size); ++i) indices.push_back(i);
    ASSIGN_OR_RETURN(data::Batch batch, data::MakeBatch(eval, indices, *tokenizer_, text_len_));
    step::MicroBatch mb = step::ToTensors(batch);
    try {
      at::Tensor prefix;
      {
        auto autocast = vision_engine_->Autocast();
        prefix = vision_->forward(mb.images);
      }
      std::vector<std::vector<int32_t>> generated;
      {
        auto autocast = llm_engine_->Autocast();
        generated = models::GenerateGreedy(llm_, prefix, data::Tokenizer::kBos,
                                           data::Tokenizer::kEos, text_len_ - 1);
      }
      for (size_t row = 0; row < indices.size(); ++row) {
        const int64_t length = batch.text_lengths[row];
        const int64_t* tokens = batch.tokens.data() + row * batch.text_len;
        std::vector<int32_t> reference(tokens + 1, tokens + length - 1);  // without <bos> and <eos>
        data::Accumulate(generated[row], reference, &score);
      }
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("evaluation at step ", step, " failed: ", e.what_without_backtrace()));
    }
  }
  return rundir::EvalRecord{step, score.exact_match(), score.token_accuracy()};
}

absl::Status ColocatedRun::SaveCheckpoint(int64_t step) {
  const fs::path dir = fs::path(run_dir_) / "checkpoints" / rundir::CheckpointName(step);
  const std::map<std::string, std::string> client_state =
      step::CheckpointClientState(step, sampler_->position());
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  RETURN_IF_ERROR(tokenizer_->Save((dir / "tokenizer.json").string()));
  RETURN_IF_ERROR(vision_engine_->SaveCheckpoint((dir / "vision").string(), client_state));
  RETURN_IF_ERROR(llm_engine_->SaveCheckpoint((dir / "llm").string(), client_state));
  RETURN_IF_ERROR(rundir::MarkCheckpointComplete({dir.string(), step, 1, 1}));
  summary_.last_checkpoint = dir.string();
  return absl::OkStatus();
}

absl::Status ColocatedRun::WritePlot() {
  return WriteFileAtomically(RunPath("loss.svg"),
                             rundir::RenderLossSvg(job_.name, metrics_->steps(), metrics_->evals()));
}

absl::Status ColocatedRun::Train() {
  const jobspec::ScheduleConfig& schedule = job_.schedule;
  rundir::ProgressPrinter printer(options_.progress, options_.interactive);
  const auto start = Clock::now();
  double train_seconds = 0, smoothed_rate = 0;
  const bool can_eval = datasets_.eval != nullptr && datasets_.eval->size() > 0;
  for (int64_t step = first_step_; step <= schedule.steps; ++step) {
    const auto step_start = Clock::now();
    ASSIGN_OR_RETURN(double loss, TrainStep());
    const double step_seconds = Seconds(Clock::now() - step_start);
    train_seconds += step_seconds;
    if (!std::isfinite(loss)) {
      return absl::InternalError(
          absl::StrFormat("loss is %f at step %d: training diverged (lower the learning rate or "
                          "enable gradient_clipping)",
                          loss, step));
    }
    const double rate = schedule.global_batch / std::max(step_seconds, 1e-9);
    smoothed_rate = step == first_step_ ? rate : 0.9 * smoothed_rate + 0.1 * rate;
    rundir::StepRecord record;
    record.step = step;
    record.loss = loss;
    record.lr = llm_engine_->last_lr();
    record.vision_lr = vision_engine_->last_lr();
    record.vision_grad_norm = vision_engine_->last_grad_norm();
    record.llm_grad_norm = llm_engine_->last_grad_norm();
    record.grad_norm = std::hypot(record.vision_grad_norm, record.llm_grad_norm);
    record.samples_per_s = rate;
    record.elapsed_s = Seconds(Clock::now() - start);
    RETURN_IF_ERROR(metrics_->Append(record));
    summary_.steps = step;
    summary_.samples += schedule.global_batch;
    summary_.final_loss = loss;
    printer.Update({step, schedule.steps, loss, smoothed_rate, record.elapsed_s, ""});

    const bool last = step == schedule.steps;
    if (can_eval && ((schedule.eval_every > 0 && step % schedule.eval_every == 0) || last)) {
      printer.Update({step, schedule.steps, loss, smoothed_rate, record.elapsed_s, "evaluating"});
      ASSIGN_OR_RETURN(rundir::EvalRecord eval, Evaluate(step));
      RETURN_IF_ERROR(metrics_->Append(eval));
      summary_.evaluated = true;
      summary_.caption_exact_match = eval.caption_exact_match;
      summary_.token_accuracy = eval.token_accuracy;
      printer.Finish();
      TANDEM_LOG(kInfo, kComponent)
          << job_.name << ": step " << step << " held-out caption exact match "
          << absl::StrFormat("%.3f", eval.caption_exact_match) << ", token accuracy "
          << absl::StrFormat("%.3f", eval.token_accuracy);
    }
    if ((schedule.checkpoint_every > 0 && step % schedule.checkpoint_every == 0) || last) {
      RETURN_IF_ERROR(SaveCheckpoint(step));
    }
    if (last || step % 50 == 0) RETURN_IF_ERROR(WritePlot());
  }
  printer.Finish();
  RETURN_IF_ERROR(vision_engine_->ExportSafetensors(RunPath("vision.safetensors")));
  RETURN_IF_ERROR(llm_engine_->ExportSafetensors(RunPath("llm.safetensors")));
  summary_.elapsed_s = Seconds(Clock::now() - start);
  summary_.samples_per_s = summary_.samples / std::max(train_seconds, 1e-9);
  return WriteFileAtomically(RunPath("summary.json"), rundir::SummaryJson(summary_) + "\n");
}

}  // namespace

absl::StatusOr<rundir::RunSummary> RunColocated(const jobspec::JobConfig& job, const RunOptions& options) {
  if (job.vision.actors != 1 || job.llm.actors != 1) {
    TANDEM_LOG(kInfo, kComponent) << job.name
                                  << ": --colocated runs each group as one rank (the spec asks for "
                                  << job.vision.actors << " vision and " << job.llm.actors
                                  << " llm actors); the global batch and its loss are the same";
  }
  RETURN_IF_ERROR(jobspec::ValidateJobConfig(job));
  ColocatedRun run(job, options);
  return run.Run();
}

}  // namespace tandem::trainer
