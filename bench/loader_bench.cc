// tandem-loader-bench: images a second a vision rank's loader reads from shards (read from the
// tar, decode, resize and crop through a Hugging Face preprocessor_config.json, as Pillow does),
// with --workers threads (data.workers: data/worker_pool.h), in batches of --batch images, as
// data::MakeImagesBatch reads a micro-batch. bench/loader.sh runs it beside PyTorch's DataLoader on
// the same shards.
//
// Prints one JSON line: {"loader": "tandem", "workers", "images", "seconds", "images_per_s",
// "peak_rss_mib"}.
//
//   tandem-loader-bench --shards /tmp/loader/shards --model /tmp/loader/model --workers 2
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/image_preprocessor.h"
#include "data/shard_dataset.h"
#include "data/worker_pool.h"

namespace {

long PeakRssKib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Images a second a vision rank's loader reads from shards"};
  std::string shards;
  std::string model;
  int workers = 1;
  int batch = 32;
  int64_t image_size = 224;
  app.add_option("--shards", shards, "A shard directory `tandem data pack` wrote")->required();
  app.add_option("--model", model, "A directory holding preprocessor_config.json")->required();
  app.add_option("--workers", workers, "data.workers")->check(CLI::Range(1, 256));
  app.add_option("--batch", batch, "Images a micro-batch")->check(CLI::PositiveNumber);
  app.add_option("--image-size", image_size, "The vision model's image size");
  CLI11_PARSE(app, argc, argv);

  auto preprocessor = tandem::data::ReadModelImagePreprocessor(model);
  if (!preprocessor.ok()) {
    std::fprintf(stderr, "%s\n", std::string(preprocessor.status().message()).c_str());
    return 1;
  }
  auto dataset = tandem::data::ShardDataset::Open(
      {shards}, image_size,
      std::make_shared<const tandem::data::ImagePreprocessor>(*std::move(preprocessor)));
  if (!dataset.ok()) {
    std::fprintf(stderr, "%s\n", std::string(dataset.status().message()).c_str());
    return 1;
  }
  tandem::data::WorkerPool pool(workers);
  const int64_t samples = (*dataset)->size();
  int64_t images = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t first = 0; first < samples; first += batch) {
    std::vector<tandem::data::ImageRef> refs;
    for (int64_t i = first; i < std::min<int64_t>(samples, first + batch); ++i) {
      if (!(*dataset)->Check(i).ok()) return 1;
      for (int64_t k = 0; k < (*dataset)->ImageCount(i); ++k) refs.push_back({i, k, 0});
    }
    auto read = tandem::data::MakeImagesBatch(**dataset, refs, &pool);
    if (!read.ok()) {
      std::fprintf(stderr, "%s\n", std::string(read.status().message()).c_str());
      return 1;
    }
    images += read->size;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "{\"loader\": \"tandem\", \"workers\": %d, \"images\": %lld, \"seconds\": %.3f, "
      "\"images_per_s\": %.1f, \"peak_rss_mib\": %.1f}\n",
      workers, static_cast<long long>(images), seconds, images / seconds, PeakRssKib() / 1024.0);
  return 0;
}
