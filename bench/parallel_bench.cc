// tandem-parallel-bench: memory and traffic per rank of tensor parallelism in the LLM and sequence
// parallelism in the vision encoder (docs/parallelism.md). For each degree it trains a few steps
// in a fresh group of rank processes over Gloo (one replica: the degree is the group), fp32, and
// prints one JSON line per case with the largest rank's figures, then each case's ratios against
// degree 1 measured in the same command. Peak memory is measured as in tandem-engine-bench: RSS
// high-water mark after the model is built, less the RSS before it (LibTorch's own).
//
// Traffic per optimizer step and per dimension: the bytes each rank hands to the collectives of its
// tensor- or sequence-parallel group (all-reduce buffers, all-gather outputs, all-to-all inputs;
// engine/counting_communicator.h) and of its engine's group.
#include <malloc.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/kv_store.h"
#include "common/rank_launcher.h"
#include "engine/communicator.h"
#include "engine/counting_communicator.h"
#include "engine/engine.h"
#include "engine/memory.h"
#include "engine_config/config.h"
#include "jobspec/presets.h"
#include "models/layers.h"
#include "models/llm.h"
#include "models/vision_encoder.h"
#include "nlohmann/json.hpp"
#include "parallel/layout.h"

namespace {

using tandem::engine::CountingCommunicator;
using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<std::string> cases{"llm", "vision"};
  std::vector<int> tensor{1, 2, 4};
  std::vector<int> sequence{1, 2};
  std::string llm_preset = "llm-160m";
  int64_t vocab = 32000;
  int64_t prefix = 64;  // image embeddings ahead of the text
  int64_t text = 192;
  std::string vision_preset = "vit-s16";
  int64_t image_size = 448;  // 28 x 28 = 784 patches of 16 pixels
  int64_t batch = 1;
  int warmup = 1;
  int steps = 2;
  int threads = 1;
  // A rank's part, set by the launcher.
  int rank = -1;
  std::string store, run_case, result;
  int degree = 1;
};

void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

absl::StatusOr<std::shared_ptr<tandem::engine::Communicator>> Group(
    std::shared_ptr<tandem::KeyValueStore> store, const std::string& name, int rank, int size) {
  if (size == 1) return tandem::engine::CreateSingleRankCommunicator(name);
  tandem::engine::GlooOptions gloo;
  gloo.group_name = name;
  return tandem::engine::CreateGlooCommunicator(std::move(store), rank, size, gloo);
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "%s\n", status.ToString().c_str());
  return 1;
}

int RunRank(const Options& o) {
  torch::set_num_threads(o.threads);
  const bool llm = o.run_case == "llm";
  const int64_t baseline = tandem::engine::CurrentResidentBytes();
  auto store = tandem::OpenFileStore(o.store);
  if (!store.ok()) return Fail(store.status());
  // One replica: the engine's group is the rank alone for tensor parallelism (ZeRO over replicas
  // only), the whole group for sequence parallelism (NOTE [Parallel sets] in step/stage.h).
  const tandem::parallel::RankLayout layout{llm ? tandem::Role::kLlm : tandem::Role::kVision,
                                            o.rank, o.degree, o.degree};
  auto parallel = Group(*store, layout.parallel_group(), layout.index(), o.degree);
  auto engine_group =
      Group(*store, layout.engine_group(), layout.engine_rank(), layout.engine_size());
  if (!parallel.ok() || !engine_group.ok())
    return Fail(parallel.ok() ? engine_group.status() : parallel.status());
  auto parallel_counts = std::make_shared<CountingCommunicator>(*parallel);
  auto engine_counts = std::make_shared<CountingCommunicator>(*engine_group);
  const tandem::parallel::ParallelGroup group{o.degree > 1 ? parallel_counts : nullptr,
                                              std::chrono::minutes(10)};

  torch::manual_seed(0);
  std::shared_ptr<torch::nn::Module> model;
  tandem::models::Llm language{nullptr};
  tandem::models::VisionEncoder vision{nullptr};
  if (llm) {
    tandem::models::LlmConfig config = *tandem::jobspec::LlmPreset(o.llm_preset);
    config.vocab_size = o.vocab;
    config.max_seq_len = std::max<int64_t>(config.max_seq_len, o.prefix + o.text);
    language = tandem::models::Llm(config, group);
    model = language.ptr();
  } else {
    tandem::models::VisionConfig config = *tandem::jobspec::VisionPreset(o.vision_preset);
    config.image_size = o.image_size;
    vision = tandem::models::VisionEncoder(config, group);
    model = vision.ptr();
  }
  const int64_t parameters = tandem::models::CountParameters(*model);
  auto config = tandem::engine_config::ParseConfig(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "zero_optimization": {"stage": 1},
          "bf16": {"enabled": false}, "tandem": {"gradient_reduction": "sum"}})");
  if (!config.ok()) return Fail(config.status());
  malloc_trim(0);
  ResetPeakRss();
  auto engine = tandem::engine::Engine::Create(model, engine_counts, *config);
  if (!engine.ok()) return Fail(engine.status());

  std::vector<double> step_ms;
  int64_t parallel_bytes = 0, engine_bytes = 0;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    parallel_counts->ResetCounts();
    engine_counts->ResetCounts();
    const auto start = Clock::now();
    auto g = at::detail::createCPUGenerator(s);  // the same data on every rank of the replica
    if (llm) {
      const int64_t hidden = language->config().hidden;
      const at::Tensor prefix = at::randn({o.batch, o.prefix, hidden}, g) * 0.02;
      const at::Tensor tokens = at::randint(o.vocab, {o.batch, o.text}, g);
      const at::Tensor logits = language->forward(prefix, tokens);
      const tandem::models::TokenLoss loss = tandem::models::LabelLoss(language, logits, tokens);
      (loss.sum / static_cast<double>(loss.count)).backward();
    } else {
      const at::Tensor images = at::rand({o.batch, 3, o.image_size, o.image_size}, g);
      vision->forward(images).square().mean().backward();
    }
    if (absl::Status status = (*engine)->Step(); !status.ok()) return Fail(status);
    if (s >= o.warmup) {
      step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      parallel_bytes += parallel_counts->counts().bytes();
      // A group of one rank moves nothing.
      if ((*engine_group)->world_size() > 1) engine_bytes += engine_counts->counts().bytes();
    }
  }
  std::sort(step_ms.begin(), step_ms.end());
  const auto report = (*engine)->Memory();
  const int64_t peak = tandem::engine::PeakResidentBytes();
  nlohmann::ordered_json line = {{"rank", o.rank},
                                 {"parameters", parameters},
                                 {"model_state_bytes", report.model_state_bytes()},
                                 {"peak_rss_bytes", peak},
                                 {"peak_above_baseline_bytes", peak - baseline},
                                 {"parallel_bytes_per_step", parallel_bytes / o.steps},
                                 {"engine_bytes_per_step", engine_bytes / o.steps},
                                 {"step_ms_median", step_ms[step_ms.size() / 2]}};
  std::ofstream(o.result + "." + std::to_string(o.rank)) << line.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Tensor- and sequence-parallel benchmark: model state, peak memory and bytes moved per step "
      "per rank for each degree, and their ratios to degree 1. Prints JSON lines."};
  app.add_option("--cases", o.cases, "llm (tensor parallelism), vision (sequence parallelism)");
  app.add_option("--tensor", o.tensor, "Tensor-parallel degrees of the llm case");
  app.add_option("--sequence", o.sequence, "Sequence-parallel degrees of the vision case");
  app.add_option("--llm-preset", o.llm_preset, "LLM shape");
  app.add_option("--vocab", o.vocab, "LLM vocabulary");
  app.add_option("--prefix", o.prefix, "Image embeddings ahead of the text");
  app.add_option("--text", o.text, "Text tokens");
  app.add_option("--vision-preset", o.vision_preset, "Vision shape");
  app.add_option("--image-size", o.image_size,
                 "Image side in pixels (positions: (side / patch)^2)");
  app.add_option("--batch", o.batch, "Samples per step");
  app.add_option("--warmup", o.warmup, "Untimed steps");
  app.add_option("--steps", o.steps, "Timed steps");
  app.add_option("--threads", o.threads, "Intra-op threads per rank");
  app.add_option("--rank", o.rank)->group("");
  app.add_option("--store", o.store)->group("");
  app.add_option("--run-case", o.run_case)->group("");
  app.add_option("--degree", o.degree)->group("");
  app.add_option("--result", o.result)->group("");
  CLI11_PARSE(app, argc, argv);
  if (o.rank >= 0) return RunRank(o);

  char pattern[] = "/tmp/tandem-parallel-bench-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return 1;
  int failures = 0;
  for (const std::string& name : o.cases) {
    const bool llm = name == "llm";
    nlohmann::json first;
    for (int degree : llm ? o.tensor : o.sequence) {
      const std::string result = std::string(pattern) + "/" + name + std::to_string(degree);
      if (tandem::LaunchLocalRanks(
              argv, degree,
              {"--run-case", name, "--degree", std::to_string(degree), "--result", result}) != 0) {
        ++failures;
        continue;
      }
      // The largest rank's figures (ranks differ by the vocabulary's remainder, and by the
      // class token or a dropped feature in the vision encoder).
      nlohmann::ordered_json line = {
          {"bench", "parallel"}, {"case", name}, {llm ? "tensor" : "sequence", degree}};
      for (int r = 0; r < degree; ++r) {
        std::ifstream in(result + "." + std::to_string(r));
        const nlohmann::json rank = nlohmann::json::parse(in, nullptr, false);
        if (rank.is_discarded()) {
          ++failures;
          continue;
        }
        for (const auto& [key, value] : rank.items()) {
          if (key == "rank") continue;
          if (!line.contains(key) || value.get<double>() > line[key].get<double>())
            line[key] = value;
        }
      }
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
      if (degree == 1) first = line;
      if (degree > 1 && !first.is_null()) {
        nlohmann::ordered_json ratio = {
            {"bench", "parallel_ratio"},
            {"case", name},
            {llm ? "tensor" : "sequence", degree},
            {"model_state_ratio",
             line["model_state_bytes"].get<double>() / first["model_state_bytes"].get<double>()},
            {"peak_above_baseline_ratio", line["peak_above_baseline_bytes"].get<double>() /
                                              first["peak_above_baseline_bytes"].get<double>()},
            {"step_time_ratio",
             line["step_ms_median"].get<double>() / first["step_ms_median"].get<double>()}};
        std::printf("%s\n", ratio.dump().c_str());
        std::fflush(stdout);
      }
    }
  }
  std::filesystem::remove_all(pattern);
  return failures == 0 ? 0 : 1;
}
