// tandem-checkpoint-bench: what a checkpoint stalls training for. A synchronous save (the state
// written, the marker) against the stall of an asynchronous one, which is the state's copy to host
// memory alone (Engine::SnapshotCheckpoint: the write runs beside the next steps), on one rank's
// engine holding a residual MLP of about 50M parameters, per precision mode. The first copy
// allocates its memory; later ones copy into the previous snapshot's (written by then), as a run
// saving every few hundred steps does. Prints one JSON line per case. See bench/README.md.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/communicator.h"
#include "engine/engine.h"
#include "engine_config/config.h"
#include "examples/residual_mlp.h"
#include "nlohmann/json.hpp"

namespace {

using tandem::engine::Engine;
using Clock = std::chrono::steady_clock;

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// fp32; DeepSpeed's bf16 (bf16 params, fp32 master weights and moments); the 8-byte recipe.
std::string PrecisionJson(const std::string& precision) {
  if (precision == "fp32") return R"("bf16": {"enabled": false})";
  if (precision == "fp32_master") return R"("bf16": {"enabled": true})";
  return R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true})";
}

int RunCase(const std::string& precision, int64_t width, int blocks, int repeats,
            const std::filesystem::path& dir) {
  auto config = tandem::engine_config::ParseConfig(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "zero_optimization": {"stage": 0},
          "torch_autocast": {"enabled": )" +
      std::string(precision == "fp32" ? "false" : "true") + R"(, "dtype": "bfloat16"}, )" +
      PrecisionJson(precision) + "}");
  if (!config.ok()) return std::fprintf(stderr, "%s\n", config.status().ToString().c_str()), 1;
  torch::manual_seed(0);
  auto model = std::make_shared<tandem::examples::ResidualMlp>(64, width, 64, blocks);
  if (precision != "fp32") model->to(torch::kBFloat16);
  auto engine =
      Engine::Create(model, tandem::engine::CreateSingleRankCommunicator("bench"), *config);
  if (!engine.ok()) return std::fprintf(stderr, "%s\n", engine.status().ToString().c_str()), 1;
  {
    // One step, so the moments hold values.
    auto autocast = (*engine)->Autocast();
    torch::mse_loss(model->forward(torch::randn({16, 64})).to(torch::kFloat),
                    torch::randn({16, 64}))
        .backward();
  }
  if (!(*engine)->Step().ok()) return 1;

  std::vector<double> sync_ms, snapshot_ms, write_ms;
  double first_snapshot_ms = 0;
  int64_t state_bytes = 0;
  tandem::engine::CheckpointSnapshot previous;
  for (int r = 0; r <= repeats; ++r) {
    std::filesystem::remove_all(dir);
    auto start = Clock::now();
    if (absl::Status saved = (*engine)->SaveCheckpoint((dir / "sync").string()); !saved.ok())
      return std::fprintf(stderr, "%s\n", saved.ToString().c_str()), 1;
    if (r > 0) sync_ms.push_back(MillisecondsSince(start));

    start = Clock::now();
    absl::StatusOr<tandem::engine::CheckpointSnapshot> snapshot =
        (*engine)->SnapshotCheckpoint({}, std::move(previous));
    if (!snapshot.ok())
      return std::fprintf(stderr, "%s\n", snapshot.status().ToString().c_str()), 1;
    (r == 0 ? first_snapshot_ms : snapshot_ms.emplace_back()) = MillisecondsSince(start);
    state_bytes = snapshot->bytes();
    start = Clock::now();
    const std::string async = (dir / "async").string();
    if (absl::Status written = tandem::engine::WriteCheckpointSnapshot(*snapshot, async);
        !written.ok() || !(*engine)->CompleteCheckpoint(*snapshot, async).ok())
      return std::fprintf(stderr, "%s: cannot be written\n", async.c_str()), 1;
    if (r > 0) write_ms.push_back(MillisecondsSince(start));
    previous = *std::move(snapshot);
  }
  std::filesystem::remove_all(dir);
  const double stall = Median(snapshot_ms), sync = Median(sync_ms);
  nlohmann::ordered_json line = {{"bench", "checkpoint"},
                                 {"case", precision},
                                 {"params", model->num_parameters()},
                                 {"state_bytes", state_bytes},
                                 {"sync_save_ms", sync},
                                 {"async_stall_ms", stall},
                                 {"async_first_stall_ms", first_snapshot_ms},
                                 {"async_write_ms", Median(write_ms)},
                                 {"stall_ratio", stall / sync}};
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "What a checkpoint stalls training for: a synchronous save against an asynchronous "
      "one's copy to host memory, on one rank's engine"};
  int64_t width = 1024;
  int blocks = 6;
  int repeats = 3;
  int threads = 2;
  std::string dir = (std::filesystem::temp_directory_path() / "tandem-checkpoint-bench").string();
  std::vector<std::string> precisions{"fp32", "fp32_master", "bf16_full"};
  app.add_option("--width", width, "the MLP's width (each block: width x 4 width, twice)");
  app.add_option("--blocks", blocks, "residual blocks (6 at width 1024: 50.5M parameters)");
  app.add_option("--repeats", repeats,
                 "saves of each kind after a first one; their medians are reported");
  app.add_option("--threads", threads, "LibTorch intra-op threads");
  app.add_option("--dir", dir, "where the checkpoints are written (removed after)");
  app.add_option("--precisions", precisions, "fp32, fp32_master, bf16_full");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(threads);
  for (const std::string& precision : precisions) {
    if (RunCase(precision, width, blocks, repeats, dir) != 0) return 1;
  }
  return 0;
}
