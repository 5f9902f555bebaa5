// tandem-engine-demo: trains a residual MLP on a synthetic regression task with Tandem's ZeRO
// engine on N local rank processes (Gloo on 127.0.0.1), then prints the loss curve and each rank's
// memory. The parent process starts the ranks (common/rank_launcher.h) and waits for them.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "common/kv_store.h"
#include "common/rank_launcher.h"
#include "engine/communicator.h"
#include "engine/engine.h"
#include "engine/memory.h"
#include "engine_config/config.h"
#include "examples/residual_mlp.h"

namespace {

using tandem::engine::Engine;

struct Options {
  int ranks = 2;
  int rank = -1;
  std::string store;
  std::string config_path;
  int steps = 60;
  int stage = -1;
  int64_t width = 256;
  int blocks = 4;
  int threads = 1;
};

constexpr int64_t kInputs = 32;
constexpr int64_t kOutputs = 8;

std::string PrecisionName(const tandem::engine_config::Config& c) {
  if (!c.bf16_enabled) return "fp32";
  std::string name = c.bf16_master_weights_and_grads ? "bf16 params, grads and master weights"
                                                     : "bf16 params and grads, fp32 master weights";
  name += c.bf16_optimizer_states ? ", bf16 optimizer states" : ", fp32 optimizer states";
  if (c.autocast_enabled) name += ", autocast";
  return name;
}

int Fail(int rank, const absl::Status& status) {
  std::fprintf(stderr, "rank %d: %s\n", rank, std::string(status.ToString()).c_str());
  return 1;
}

int RunRank(const Options& options) {
  torch::set_num_threads(options.threads);
  const int rank = options.rank;
  auto config = options.config_path.empty()
                    ? tandem::engine_config::ParseConfig("{}")
                    : tandem::engine_config::LoadConfigFile(options.config_path);
  if (!config.ok()) return Fail(rank, config.status());
  if (options.stage >= 0) config->zero.stage = options.stage;
  auto store = tandem::OpenFileStore(options.store);
  if (!store.ok()) return Fail(rank, store.status());
  tandem::engine::GlooOptions gloo;
  gloo.group_name = "demo";
  gloo.timeout = std::chrono::seconds(120);
  auto comm = tandem::engine::CreateGlooCommunicator(*store, rank, options.ranks, gloo);
  if (!comm.ok()) return Fail(rank, comm.status());

  torch::manual_seed(0);
  auto model = std::make_shared<tandem::examples::ResidualMlp>(kInputs, options.width, kOutputs,
                                                               options.blocks);
  const int64_t num_parameters = model->num_parameters();
  auto created = Engine::Create(model, *comm, *config);
  if (!created.ok()) return Fail(rank, created.status());
  Engine& engine = **created;
  const tandem::engine_config::Config& c = engine.config();
  const int64_t micro_batch = c.train_micro_batch_size_per_gpu.value_or(32);
  const int gas = static_cast<int>(c.gradient_accumulation_steps);
  tandem::examples::Teacher teacher(kInputs, kOutputs, /*seed=*/42);

  if (rank == 0) {
    std::printf(
        "tandem engine demo: %lld parameters, %d ranks, ZeRO stage %d, %s, %d steps of %d x %lld x "
        "%d samples\n",
        static_cast<long long>(num_parameters), options.ranks, c.zero.stage,
        PrecisionName(c).c_str(), options.steps, options.ranks, static_cast<long long>(micro_batch),
        gas);
    std::fflush(stdout);
  }
  const auto start = std::chrono::steady_clock::now();
  double first_loss = 0.0, last_loss = 0.0;
  for (int step = 0; step < options.steps; ++step) {
    double step_loss = 0.0;
    for (int micro = 0; micro < gas; ++micro) {
      auto g = at::detail::createCPUGenerator(((step * gas + micro) * 1000003ull) + rank);
      at::Tensor x = at::randn({micro_batch, kInputs}, g);
      at::Tensor y = teacher(x);
      at::Tensor loss;
      {
        auto autocast = engine.Autocast();
        loss = torch::mse_loss(model->forward(x).to(torch::kFloat), y);
      }
      loss.backward();
      if (auto status = engine.Step(); !status.ok()) return Fail(rank, status);
      step_loss += loss.item<double>() / gas;
    }
    // The group's mean loss, for printing.
    at::Tensor mean = at::full({1}, step_loss / options.ranks, at::kFloat);
    if (auto status = (*comm)->AllReduceSum(mean)->Wait(std::chrono::seconds(60)); !status.ok()) {
      return Fail(rank, status);
    }
    last_loss = mean.item<double>();
    if (step == 0) first_loss = last_loss;
    if (rank == 0 && ((step + 1) % c.steps_per_print == 0 || step == 0)) {
      std::printf("step %4d/%d  loss %.5f  lr %.2e  grad_norm %.4f\n", step + 1, options.steps,
                  last_loss, engine.last_lr(), engine.last_grad_norm());
      std::fflush(stdout);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Memory: every rank publishes its report; rank 0 prints them all.
  tandem::engine::MemoryReport report = engine.Memory();
  std::ostringstream encoded;
  encoded << report.num_parameters << ' ' << report.param_bytes << ' ' << report.grad_bytes << ' '
          << report.master_bytes << ' ' << report.optimizer_bytes << ' ' << report.peak_bytes;
  if (auto status = (*store)->Set("memory/" + std::to_string(rank), encoded.str()); !status.ok()) {
    return Fail(rank, status);
  }
  if (rank == 0) {
    std::vector<tandem::engine::MemoryReport> reports;
    for (int r = 0; r < options.ranks; ++r) {
      auto value = (*store)->Get("memory/" + std::to_string(r), std::chrono::seconds(60));
      if (!value.ok()) return Fail(rank, value.status());
      tandem::engine::MemoryReport m;
      std::istringstream in(*value);
      in >> m.num_parameters >> m.param_bytes >> m.grad_bytes >> m.master_bytes >>
          m.optimizer_bytes >> m.peak_bytes;
      m.rank = r;
      m.peak_source = "rss";
      reports.push_back(m);
    }
    std::printf("\nloss %.5f -> %.5f in %.1f s (%.1f steps/s)\n\nmodel state per rank:\n%s",
                first_loss, last_loss, seconds, options.steps / seconds,
                tandem::engine::FormatMemoryTable(reports).c_str());
  }
  return (*comm)->Barrier()->Wait(std::chrono::seconds(60)).ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{
      "Trains a residual MLP on a synthetic regression task with Tandem's ZeRO engine on N local "
      "rank processes (Gloo on 127.0.0.1), then prints the loss and each rank's memory."};
  app.add_option("--config", options.config_path,
                 "DeepSpeed-style engine config (JSON); see engine_config/CONFIG.md")
      ->check(CLI::ExistingFile);
  app.add_option("--ranks", options.ranks, "Number of rank processes")->check(CLI::Range(1, 64));
  app.add_option("--steps", options.steps, "Optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--stage", options.stage, "Override zero_optimization.stage")
      ->check(CLI::Range(0, 3));
  app.add_option("--width", options.width, "Model width")->check(CLI::PositiveNumber);
  app.add_option("--blocks", options.blocks, "Residual blocks")->check(CLI::PositiveNumber);
  app.add_option("--threads", options.threads, "Intra-op threads per rank")
      ->check(CLI::PositiveNumber);
  app.add_option("--rank", options.rank, "(internal) run as this rank")->group("");
  app.add_option("--store", options.store, "(internal) rendezvous directory")->group("");
  CLI11_PARSE(app, argc, argv);
  if (options.rank < 0) return tandem::LaunchLocalRanks(argv, options.ranks) == 0 ? 0 : 1;
  return RunRank(options);
}
