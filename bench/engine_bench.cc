// tandem-engine-bench: trains a residual MLP of about 50M parameters on CPU for each precision mode
// and ZeRO stage, each case in a fresh group of rank processes, and prints one JSON line per case,
// then the bf16_full / fp32_master ratios per stage and the fused optimizer's bandwidth against a
// memcpy measured in the same run. See bench/README.md for the fields. Each rank's communicator is
// wrapped in a CountingCommunicator, so a case also reports the bytes its collectives move per
// optimizer step (with --accumulation N micro-batches per step).
//
// Peak memory: each rank builds its model, hands the memory freed while building it back to the
// OS (malloc_trim: the fp32 weights the model was initialised in would otherwise stay resident as
// free heap), resets its RSS high-water mark (/proc/self/clear_refs) and reports VmHWM at the end;
// "peak_above_baseline_bytes" subtracts the RSS the process had before it built the model
// (LibTorch's own code and data), like a GPU's allocated-bytes peak excludes the CUDA context.
#include <malloc.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/kv_store.h"
#include "common/rank_launcher.h"
#include "engine/communicator.h"
#include "engine/counting_communicator.h"
#include "engine/engine.h"
#include "engine/memory.h"
#include "engine_config/config.h"
#include "examples/residual_mlp.h"
#include "kernels/adamw.h"
#include "nlohmann/json.hpp"

namespace {

using tandem::engine::Engine;
using Clock = std::chrono::steady_clock;

struct Options {
  int world = 2;
  int rank = -1;
  std::string store;
  std::string precision;
  int stage = 0;
  std::string result;
  int64_t width = 1024;
  int blocks = 6;
  int64_t batch = 16;
  int warmup = 2;
  int steps = 4;
  int accumulation = 1;
  int threads = 1;
  std::vector<int> stages{0, 1, 2, 3};
  std::vector<std::string> precisions{"fp32", "fp32_master", "bf16_full"};
  int64_t optimizer_elements = 50'000'000;
};

// fp32; DeepSpeed's bf16 (fp32 master weights and moments, bf16 gradients, fp32 reductions); the
// 8-byte recipe (bf16 master weights, gradients and moments, reduced in bf16), and the same
// reduced in fp32.
std::string PrecisionJson(const std::string& precision) {
  constexpr char kFull[] =
      R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true})";
  if (precision == "fp32") return R"("bf16": {"enabled": false})";
  if (precision == "fp32_master") return R"("bf16": {"enabled": true})";
  if (precision == "bf16_full_fp32_comm") return kFull;
  return std::string(kFull) + R"(, "communication_data_type": "bf16")";
}

void ResetPeakRss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

int RunCase(const Options& o) {
  torch::set_num_threads(o.threads);
  const int64_t baseline = tandem::engine::CurrentResidentBytes();
  auto config = tandem::engine_config::ParseConfig(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
          "zero_optimization": {"stage": )" +
      std::to_string(o.stage) +
      R"(, "reduce_bucket_size": 5000000, "allgather_bucket_size": 5000000},
          "gradient_accumulation_steps": )" +
      std::to_string(o.accumulation) + R"(,
          "torch_autocast": {"enabled": )" +
      (o.precision == "fp32" ? "false" : "true") + R"(, "dtype": "bfloat16"}, )" +
      PrecisionJson(o.precision) + "}");
  if (!config.ok()) return std::fprintf(stderr, "%s\n", config.status().ToString().c_str()), 1;
  auto store = tandem::OpenFileStore(o.store);
  if (!store.ok()) return 1;
  tandem::engine::GlooOptions gloo;
  gloo.group_name = "bench";
  auto gloo_comm = tandem::engine::CreateGlooCommunicator(*store, o.rank, o.world, gloo);
  if (!gloo_comm.ok())
    return std::fprintf(stderr, "%s\n", gloo_comm.status().ToString().c_str()), 1;
  auto counting = std::make_shared<tandem::engine::CountingCommunicator>(*gloo_comm);
  std::shared_ptr<tandem::engine::Communicator> comm = counting;

  torch::manual_seed(0);
  auto model = std::make_shared<tandem::examples::ResidualMlp>(64, o.width, 64, o.blocks);
  if (o.precision != "fp32") model->to(torch::kBFloat16);  // params live in bf16 in both bf16 modes
  const int64_t params = model->num_parameters();
  malloc_trim(0);
  ResetPeakRss();
  auto engine = Engine::Create(model, comm, *config);
  if (!engine.ok()) return std::fprintf(stderr, "%s\n", engine.status().ToString().c_str()), 1;

  std::vector<double> step_ms;
  int64_t collective_bytes = 0;  // of the timed steps, this rank's, barriers left out
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    if (!comm->Barrier()->Wait(std::chrono::seconds(300)).ok()) return 1;
    counting->ResetCounts();
    auto start = Clock::now();
    for (int m = 0; m < o.accumulation; ++m) {
      auto g = at::detail::createCPUGenerator((s * o.accumulation + m) * 16 + o.rank);
      at::Tensor x = at::randn({o.batch, 64}, g), y = at::randn({o.batch, 64}, g);
      {
        auto autocast = (*engine)->Autocast();
        torch::mse_loss(model->forward(x).to(torch::kFloat), y).backward();
      }
      if (!(*engine)->Step().ok()) return 1;
    }
    if (s >= o.warmup) {
      step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      collective_bytes += counting->counts().bytes();
    }
  }
  auto report = (*engine)->Memory();
  const int64_t peak = tandem::engine::PeakResidentBytes();
  // Model-state bytes per parameter before partitioning: partitioned parts times the world size.
  const int w = o.world;
  const double unpartitioned =
      static_cast<double>(report.param_bytes * (o.stage == 3 ? w : 1) +
                          report.grad_bytes * (o.stage >= 2 ? w : 1) +
                          (report.master_bytes + report.optimizer_bytes) * (o.stage >= 1 ? w : 1)) /
      params;
  std::sort(step_ms.begin(), step_ms.end());
  // Rank 0 reports the largest peak of the group.
  (void)(*store)->Set("peak/" + std::to_string(o.rank),
                      std::to_string(peak - baseline) + " " + std::to_string(peak));
  if (o.rank == 0) {
    int64_t worst_above = 0, worst_peak = 0;
    for (int r = 0; r < o.world; ++r) {
      auto v = (*store)->Get("peak/" + std::to_string(r), std::chrono::seconds(300));
      if (!v.ok()) return 1;
      std::istringstream in(*v);
      int64_t above = 0, raw = 0;
      in >> above >> raw;
      worst_above = std::max(worst_above, above);
      worst_peak = std::max(worst_peak, raw);
    }
    nlohmann::ordered_json line = {
        {"bench", "engine"},
        {"case", o.precision},
        {"zero_stage", o.stage},
        {"world", o.world},
        {"params", params},
        {"model_state_bytes_per_param", unpartitioned},
        {"model_state_bytes_per_param_per_rank", report.bytes_per_parameter()},
        {"peak_rss_bytes", worst_peak},
        {"peak_above_baseline_bytes", worst_above},
        {"step_ms_median", step_ms[step_ms.size() / 2]},
        {"accumulation", o.accumulation},
        {"collective_bytes_per_step", collective_bytes / o.steps},
        {"bucket_bytes", report.bucket_bytes}};
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
    std::ofstream(o.result) << line.dump() << "\n";
  }
  return comm->Barrier()->Wait(std::chrono::seconds(300)).ok() ? 0 : 1;
}

// Fused AdamW (bf16_full: reads param, grad, m, v and writes param, m, v: 14 bytes per element)
// against memcpy of the same number of bytes, both on `threads` threads, best of 5.
void OptimizerBandwidth(const Options& o) {
  const int64_t n = o.optimizer_elements;
  std::vector<uint16_t> p(n, 0x3f80), g(n, 0x3c00), m(n, 0), v(n, 0);
  tandem::kernels::AdamWBuffers b;
  b.param = p.data();
  b.param_dtype = tandem::kernels::Dtype::kBFloat16;
  b.grad = g.data();
  b.grad_dtype = tandem::kernels::Dtype::kBFloat16;
  b.exp_avg = m.data();
  b.exp_avg_sq = v.data();
  b.state_dtype = tandem::kernels::Dtype::kBFloat16;
  b.n = n;
  tandem::kernels::AdamWHyper h;
  double best_kernel = 1e30, best_copy = 1e30;
  const size_t copy_bytes =
      static_cast<size_t>(n) * 7;  // 7 read + 7 written = 14 moved per element
  std::vector<char> src(copy_bytes, 1), dst(copy_bytes, 0);
  for (int i = 0; i < 5; ++i) {
    auto start = Clock::now();
    tandem::kernels::AdamWCpu(b, h, o.threads);
    best_kernel =
        std::min(best_kernel, std::chrono::duration<double>(Clock::now() - start).count());
    start = Clock::now();
    std::memcpy(dst.data(), src.data(), copy_bytes);
    best_copy = std::min(best_copy, std::chrono::duration<double>(Clock::now() - start).count());
  }
  const double kernel_gbs = 14.0 * n / best_kernel / 1e9;
  const double copy_gbs = 2.0 * copy_bytes / best_copy / 1e9;
  nlohmann::ordered_json line = {{"bench", "optimizer"},
                                 {"case", "bf16_full"},
                                 {"elements", n},
                                 {"threads", o.threads},
                                 {"adamw_gb_per_s", kernel_gbs},
                                 {"memcpy_gb_per_s", copy_gbs},
                                 {"fraction_of_memcpy", kernel_gbs / copy_gbs}};
  std::printf("%s\n", line.dump().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Engine benchmark: memory and step time per precision mode and ZeRO stage, and "
      "the fused optimizer's bandwidth against memcpy. Prints JSON lines."};
  app.add_option("--world", o.world, "Ranks per case")->check(CLI::Range(1, 16));
  app.add_option("--width", o.width, "Model width (1024 with 6 blocks is about 50M parameters)");
  app.add_option("--blocks", o.blocks, "Residual blocks");
  app.add_option("--batch", o.batch, "Samples per rank per step");
  app.add_option("--warmup", o.warmup, "Untimed steps");
  app.add_option("--steps", o.steps, "Timed steps");
  app.add_option("--accumulation", o.accumulation, "Micro-batches per optimizer step")
      ->check(CLI::Range(1, 64));
  app.add_option("--threads", o.threads, "Intra-op threads per rank (and optimizer threads)");
  app.add_option("--stages", o.stages, "ZeRO stages to run");
  app.add_option("--precisions", o.precisions,
                 "Modes: fp32, fp32_master, bf16_full (reduced in bf16), bf16_full_fp32_comm");
  app.add_option("--optimizer-elements", o.optimizer_elements,
                 "Elements for the optimizer bandwidth case");
  app.add_option("--rank", o.rank)->group("");
  app.add_option("--store", o.store)->group("");
  app.add_option("--precision", o.precision)->group("");
  app.add_option("--stage", o.stage)->group("");
  app.add_option("--result", o.result)->group("");
  CLI11_PARSE(app, argc, argv);
  if (o.rank >= 0) return RunCase(o);

  char pattern[] = "/tmp/tandem-bench-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return 1;
  std::map<std::pair<std::string, int>, nlohmann::json> results;
  int failures = 0;
  for (int stage : o.stages) {
    for (const auto& precision : o.precisions) {
      const std::string result = std::string(pattern) + "/" + precision + std::to_string(stage);
      if (tandem::LaunchLocalRanks(argv, o.world,
                                   {"--precision", precision, "--stage", std::to_string(stage),
                                    "--result", result}) != 0) {
        ++failures;
        continue;
      }
      std::ifstream in(result);
      results[{precision, stage}] = nlohmann::json::parse(in, nullptr, false);
    }
  }
  for (int stage : o.stages) {
    auto a = results.find({"bf16_full", stage}), b = results.find({"fp32_master", stage});
    if (a == results.end() || b == results.end()) continue;
    const auto& full = a->second;
    const auto& master = b->second;
    nlohmann::ordered_json ratio = {
        {"bench", "engine_ratio"},
        {"zero_stage", stage},
        {"world", o.world},
        {"peak_above_baseline_ratio", full["peak_above_baseline_bytes"].get<double>() /
                                          master["peak_above_baseline_bytes"].get<double>()},
        {"peak_rss_ratio",
         full["peak_rss_bytes"].get<double>() / master["peak_rss_bytes"].get<double>()},
        {"step_time_ratio",
         full["step_ms_median"].get<double>() / master["step_ms_median"].get<double>()}};
    std::printf("%s\n", ratio.dump().c_str());
  }
  OptimizerBandwidth(o);
  std::filesystem::remove_all(pattern);
  return failures == 0 ? 0 : 1;
}
