// tandem-dataset-dump: writes what a job trains and evaluates on, as the trainer draws it, for a
// training loop outside Tandem (bench/pytorch_reference.py) to read: the same samples in the same
// order, the same tokenizer, the same model configs and seeds, the resolved optimizer, schedule and
// clipping of each group, and the compute dtype Tandem picks for each group on this machine.
//
//   tandem-dataset-dump JOB.json --out DIR [--steps N]
//
// DIR receives (arrays as NumPy .npy, little-endian, C order):
//   job.json             the job as read (paths absolute; `tandem run` accepts it) with
//                        schedule.steps set to N when --steps is given
//   manifest.json        everything else a training loop needs (below), and the file list
//   train_indices.npy    int64 [U]: the training samples the N steps draw, dataset indices, sorted
//   train_images.npy     float32 [U, 3, S, S]: their images in [0, 1], as data::MakeBatch reads
//                        them
//   train_tokens.npy     int64 [U, T]: <bos> caption <eos> <pad>..., as data::MakeBatch encodes
//                        them
//   train_lengths.npy    int64 [U]: tokens before the padding
//   order.npy            int64 [N, micro_batches, micro_batch]: the dataset index of every sample
//                        of every micro-batch of every step, in the order the trainer's Sampler
//                        hands them out (a step's micro-batches are consecutive Next(micro_batch)
//                        calls)
//   eval_images.npy, eval_tokens.npy, eval_lengths.npy: the held-out samples an evaluation reads
//                        (the first schedule.eval_samples, or all), in order; absent without a
//                        held-out set
//   init_vision/NAME.npy, init_llm/NAME.npy: each model's parameters as built from the job's seeds
//                        (before an engine converts them), fp32, one file per named_parameters()
//                        name
//
// The manifest's "render" entry is the time data::MakeBatch took per training sample here (image
// rendering or decoding plus tokenisation): the work Tandem's trainer does inside each step and a
// loop reading these arrays does not.
//
// Exit code 0 on success, 1 on any error (printed), CLI11's own codes (105 and up) for bad flags.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/tokenizer.h"
#include "engine/compute.h"
#include "engine_config/config.h"
#include "jobspec/job_spec.h"
#include "models/llm.h"
#include "models/vision_encoder.h"
#include "nlohmann/json.hpp"
#include "platform/bf16_support.h"
#include "step/step_common.h"

namespace tandem::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Writes a .npy file (format 1.0) whose data the caller streams in C order after the header.
class NpyWriter {
 public:
  static absl::StatusOr<NpyWriter> Open(const fs::path& path, const char* descr,
                                        const std::vector<int64_t>& shape) {
    NpyWriter writer;
    writer.path_ = path.string();
    writer.out_.open(path, std::ios::binary | std::ios::trunc);
    if (!writer.out_) return absl::UnavailableError(absl::StrCat("cannot write ", path.string()));
    std::string dims;
    for (int64_t d : shape) dims += std::to_string(d) + ", ";
    if (shape.size() > 1) dims.resize(dims.size() - 2);  // "(3,)" for one dim, "(3, 4)" else
    std::string header =
        absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (", dims, "), }");
    // magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of 64
    // and ended by a newline.
    const size_t unpadded = 10 + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header.push_back('\n');
    const uint16_t length = static_cast<uint16_t>(header.size());
    writer.out_.write("\x93NUMPY\x01\x00", 8);
    const char length_bytes[2] = {static_cast<char>(length & 0xff), static_cast<char>(length >> 8)};
    writer.out_.write(length_bytes, 2);
    writer.out_.write(header.data(), static_cast<std::streamsize>(header.size()));
    return writer;
  }

  template <typename T>
  void Write(const T* data, size_t count) {
    out_.write(reinterpret_cast<const char*>(data),
               static_cast<std::streamsize>(count * sizeof(T)));
  }

  absl::Status Close() {
    out_.close();
    if (!out_) return absl::DataLossError(absl::StrCat("writing ", path_, " failed"));
    return absl::OkStatus();
  }

 private:
  std::string path_;
  std::ofstream out_;
};

template <typename T>
absl::Status WriteNpy(const fs::path& path, const char* descr, const std::vector<int64_t>& shape,
                      const T* data, size_t count) {
  ASSIGN_OR_RETURN(NpyWriter writer, NpyWriter::Open(path, descr, shape));
  writer.Write(data, count);
  return writer.Close();
}

struct DumpedSet {
  int64_t samples = 0;
  double make_batch_seconds = 0;
};

// MakeBatch over `indices` in pieces, streamed into <prefix>_images/_tokens/_lengths.npy.
absl::StatusOr<DumpedSet> DumpSamples(const data::Dataset& dataset,
                                      const std::vector<int64_t>& indices,
                                      const data::Tokenizer& tokenizer, int64_t text_len,
                                      int64_t image_size, const fs::path& out,
                                      const std::string& prefix) {
  const int64_t n = static_cast<int64_t>(indices.size());
  ASSIGN_OR_RETURN(NpyWriter images, NpyWriter::Open(out / (prefix + "_images.npy"), "<f4",
                                                     {n, 3, image_size, image_size}));
  ASSIGN_OR_RETURN(NpyWriter tokens,
                   NpyWriter::Open(out / (prefix + "_tokens.npy"), "<i8", {n, text_len}));
  ASSIGN_OR_RETURN(NpyWriter lengths, NpyWriter::Open(out / (prefix + "_lengths.npy"), "<i8", {n}));
  DumpedSet dumped;
  constexpr int64_t kPiece = 256;
  for (int64_t begin = 0; begin < n; begin += kPiece) {
    const std::vector<int64_t> piece(indices.begin() + begin,
                                     indices.begin() + std::min(n, begin + kPiece));
    const auto start = Clock::now();
    ASSIGN_OR_RETURN(data::Batch batch, data::MakeBatch(dataset, piece, tokenizer, text_len));
    dumped.make_batch_seconds += std::chrono::duration<double>(Clock::now() - start).count();
    if (batch.image_size != image_size) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, " images are ", batch.image_size,
                                                     " pixels, the encoder takes ", image_size));
    }
    images.Write(batch.images.data(), batch.images.size());
    tokens.Write(batch.tokens.data(), batch.tokens.size());
    lengths.Write(batch.text_lengths.data(), batch.text_lengths.size());
  }
  RETURN_IF_ERROR(images.Close());
  RETURN_IF_ERROR(tokens.Close());
  RETURN_IF_ERROR(lengths.Close());
  dumped.samples = n;
  return dumped;
}

absl::Status DumpParameters(const torch::nn::Module& module, const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", dir.string()));
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const at::Tensor value = item.value().detach().to(at::kFloat).contiguous();
    std::vector<int64_t> shape(value.sizes().begin(), value.sizes().end());
    RETURN_IF_ERROR(WriteNpy(dir / (item.key() + ".npy"), "<f4", shape, value.data_ptr<float>(),
                             static_cast<size_t>(value.numel())));
  }
  return absl::OkStatus();
}

const char* ScalarName(at::ScalarType type) { return type == at::kBFloat16 ? "bf16" : "fp32"; }

const char* SchedulerName(engine_config::SchedulerType type) {
  switch (type) {
    case engine_config::SchedulerType::kWarmupLR:
      return "WarmupLR";
    case engine_config::SchedulerType::kWarmupDecayLR:
      return "WarmupDecayLR";
    case engine_config::SchedulerType::kWarmupCosineLR:
      return "WarmupCosineLR";
    case engine_config::SchedulerType::kNone:
      break;
  }
  return "none";
}

// A group's engine config as the trainer resolves it (defaults filled in), and the compute dtype
// its engine picks on this machine's CPU.
absl::StatusOr<nlohmann::json> GroupJson(const std::string& engine_json, const std::string& prefix,
                                         const jobspec::ScheduleConfig& schedule) {
  ASSIGN_OR_RETURN(engine_config::Config config,
                   step::GroupEngineConfig(engine_json, prefix, schedule, /*world=*/1));
  const engine::ComputePlan plan = engine::PlanCompute(config, c10::Device(c10::kCPU));
  const engine_config::OptimizerConfig& o = config.optimizer;
  const engine_config::SchedulerConfig& s = config.scheduler;
  nlohmann::json j;
  j["optimizer"] = {{"type", o.type == engine_config::OptimizerType::kAdamW ? "AdamW" : "Adam"},
                    {"lr", o.lr},
                    {"betas", {o.beta1, o.beta2}},
                    {"eps", o.eps},
                    {"weight_decay", o.weight_decay},
                    {"adam_w_mode", o.adam_w_mode}};
  j["scheduler"] = {
      {"type", SchedulerName(s.type)},
      {"warmup_min_lr", s.warmup_min_lr},
      {"warmup_max_lr", s.warmup_max_lr},
      {"warmup_num_steps", s.warmup_num_steps},
      {"warmup_type", s.warmup_type == engine_config::WarmupType::kLog ? "log" : "linear"},
      {"total_num_steps", s.total_num_steps},
      {"warmup_min_ratio", s.warmup_min_ratio},
      {"cos_min_ratio", s.cos_min_ratio}};
  // With schedule.gradient_clipping set this is the whole-model bound (GroupEngineConfig copies
  // it).
  j["gradient_clipping"] = config.gradient_clipping;
  j["storage"] = {
      {"params", engine_config::DTypeName(config.param_dtype())},
      {"grads", engine_config::DTypeName(config.grad_dtype())},
      {"master",
       config.has_separate_master() ? "fp32" : engine_config::DTypeName(config.param_dtype())},
      {"optimizer_states", engine_config::DTypeName(config.optimizer_state_dtype())}};
  j["compute"] = {{"autocast", plan.autocast},
                  {"autocast_dtype", ScalarName(plan.autocast_dtype)},
                  {"activation_dtype", ScalarName(plan.activation_dtype)},
                  {"emulated_bf16", plan.emulated_bf16},
                  {"reason", plan.reason}};
  return j;
}

struct DumpOptions {
  std::string job_path;
  std::string out;
  int64_t steps = 0;  // 0: the job's
};

absl::Status Dump(const DumpOptions& options) {
  ASSIGN_OR_RETURN(jobspec::ResolvedJobSpec spec, jobspec::ReadJobSpecFile(options.job_path));
  jobspec::JobConfig& job = spec.config;
  nlohmann::json spec_json = nlohmann::json::parse(spec.json);  // protobuf's own output
  if (options.steps > 0) {
    job.schedule.steps = options.steps;
    spec_json["schedule"]["steps"] =
        std::to_string(options.steps);  // int64 as proto3 JSON writes it
  }
  RETURN_IF_ERROR(jobspec::ValidateJobConfig(job));
  if (!job.resume_from.empty()) {
    return absl::InvalidArgumentError(
        "the job resumes from a checkpoint; dump a job that starts afresh");
  }
  const jobspec::ScheduleConfig& schedule = job.schedule;
  const fs::path out(options.out);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", out.string()));
  {
    std::ofstream file(out / "job.json", std::ios::trunc);
    file << spec_json.dump(2) << "\n";
    if (!file) return absl::DataLossError("cannot write job.json");
  }

  const int64_t image_size = job.vision.model.image_size;
  ASSIGN_OR_RETURN(data::Datasets datasets, data::OpenDatasets(job.data, image_size));
  const data::Tokenizer tokenizer = data::Tokenizer::Build(data::AllTexts(*datasets.train));
  const int64_t text_len = job.data.max_text_tokens;

  // The order: as the colocated trainer draws it (trainer/colocated.cc, TrainStep).
  const int64_t micro = schedule.global_batch / schedule.micro_batches;
  data::Sampler sampler(datasets.train->size(), schedule.seed);
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(schedule.steps * schedule.global_batch));
  for (int64_t step = 0; step < schedule.steps; ++step)
    for (int64_t k = 0; k < schedule.micro_batches; ++k) {
      const std::vector<int64_t> next = sampler.Next(micro);
      order.insert(order.end(), next.begin(), next.end());
    }
  RETURN_IF_ERROR(WriteNpy(out / "order.npy", "<i8",
                           {schedule.steps, schedule.micro_batches, micro}, order.data(),
                           order.size()));
  const std::set<int64_t> unique(order.begin(), order.end());
  const std::vector<int64_t> indices(unique.begin(), unique.end());
  RETURN_IF_ERROR(WriteNpy(out / "train_indices.npy", "<i8", {static_cast<int64_t>(indices.size())},
                           indices.data(), indices.size()));
  ASSIGN_OR_RETURN(DumpedSet train, DumpSamples(*datasets.train, indices, tokenizer, text_len,
                                                image_size, out, "train"));

  int64_t eval_count = 0;
  if (datasets.eval != nullptr && datasets.eval->size() > 0) {
    eval_count = datasets.eval->size();
    if (schedule.eval_samples > 0) eval_count = std::min(eval_count, schedule.eval_samples);
    std::vector<int64_t> eval_indices(static_cast<size_t>(eval_count));
    for (int64_t i = 0; i < eval_count; ++i) eval_indices[i] = i;
    RETURN_IF_ERROR(
        DumpSamples(*datasets.eval, eval_indices, tokenizer, text_len, image_size, out, "eval")
            .status());
  }

  // The models as the trainer builds them (same seeds, same construction order).
  models::LlmConfig llm_config = job.llm.model;
  llm_config.vocab_size = tokenizer.size();
  try {
    torch::manual_seed(step::VisionModelSeed(schedule.seed));
    models::VisionEncoder vision(job.vision.model);
    RETURN_IF_ERROR(DumpParameters(*vision, out / "init_vision"));
    torch::manual_seed(step::LlmModelSeed(schedule.seed));
    models::Llm llm(llm_config);
    RETURN_IF_ERROR(DumpParameters(*llm, out / "init_llm"));
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot build the models: ", e.what_without_backtrace()));
  }

  ASSIGN_OR_RETURN(nlohmann::json vision_group,
                   GroupJson(job.vision.engine_json, "vision.engine.", schedule));
  ASSIGN_OR_RETURN(nlohmann::json llm_group,
                   GroupJson(job.llm.engine_json, "llm.engine.", schedule));
  const models::VisionConfig& v = job.vision.model;
  vision_group["model"] = {{"image_size", v.image_size}, {"channels", v.channels},
                           {"patch_size", v.patch_size}, {"hidden", v.hidden},
                           {"layers", v.layers},         {"heads", v.heads},
                           {"mlp_hidden", v.mlp_hidden}, {"positions", v.positions},
                           {"norm_eps", v.norm_eps},     {"output_dim", v.output_dim}};
  vision_group["seed"] = step::VisionModelSeed(schedule.seed);
  vision_group["actors"] = job.vision.actors;
  const models::LlmConfig& l = llm_config;
  llm_group["model"] = {{"hidden", l.hidden},
                        {"layers", l.layers},
                        {"heads", l.heads},
                        {"kv_heads", l.kv_heads},
                        {"mlp_hidden", l.mlp_hidden},
                        {"max_seq_len", l.max_seq_len},
                        {"rope_theta", l.rope_theta},
                        {"norm_eps", l.norm_eps},
                        {"tie_embeddings", l.tie_embeddings},
                        {"vocab_size", l.vocab_size}};
  llm_group["seed"] = step::LlmModelSeed(schedule.seed);
  llm_group["actors"] = job.llm.actors;

  nlohmann::json manifest;
  manifest["format"] = "tandem-dataset-dump";
  manifest["version"] = 1;
  manifest["job"] = job.name;
  manifest["schedule"] = {{"steps", schedule.steps},
                          {"global_batch", schedule.global_batch},
                          {"micro_batches", schedule.micro_batches},
                          {"micro_batch", micro},
                          {"eval_every", schedule.eval_every},
                          {"eval_samples", eval_count},
                          {"eval_batch", std::max<int64_t>(1, micro)},
                          {"seed", schedule.seed},
                          {"gradient_clipping", schedule.gradient_clipping}};
  manifest["text_len"] = text_len;
  manifest["tokenizer"] = {{"words", tokenizer.words()},
                           {"pad", data::Tokenizer::kPad},
                           {"bos", data::Tokenizer::kBos},
                           {"eos", data::Tokenizer::kEos}};
  manifest["train_samples"] = datasets.train->size();
  manifest["vision"] = vision_group;
  manifest["llm"] = llm_group;
  manifest["render"] = {
      {"samples", train.samples},
      {"seconds", train.make_batch_seconds},
      {"us_per_sample", train.samples > 0 ? 1e6 * train.make_batch_seconds / train.samples : 0.0}};
  manifest["cpu_bf16"] = platform::DetectBf16Support("cpu").detail;
  std::ofstream file(out / "manifest.json", std::ios::trunc);
  file << manifest.dump(2) << "\n";
  if (!file) return absl::DataLossError("cannot write manifest.json");
  std::printf("%s: %lld steps, %lld training samples (%lld distinct), %lld held-out, into %s\n",
              job.name.c_str(), static_cast<long long>(schedule.steps),
              static_cast<long long>(order.size()), static_cast<long long>(indices.size()),
              static_cast<long long>(eval_count), out.string().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  tandem::bench::DumpOptions options;
  CLI::App app{
      "Writes a job's training and held-out samples, as Tandem's trainer draws them, as .npy "
      "files"};
  app.add_option("job", options.job_path, "job spec (JSON)")->required();
  app.add_option("--out", options.out, "output directory")->required();
  app.add_option("--steps", options.steps,
                 "train this many steps instead of the job's schedule.steps")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (const absl::Status bf16 = tandem::platform::ApplyCpuBf16OverrideFromEnvironment();
      !bf16.ok()) {
    std::fprintf(stderr, "%s\n", std::string(bf16.message()).c_str());
    return 2;
  }
  const absl::Status status = tandem::bench::Dump(options);
  if (!status.ok()) {
    std::fprintf(stderr, "tandem-dataset-dump: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
