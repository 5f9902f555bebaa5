// tandem-shard-memory-bench: what a rank's data costs it in memory as the data set grows. Writes
// sharded data sets of each --samples size (--shard-samples captioned 16 x 16 PNGs a shard, with an
// index as `tandem data pack` writes it), then, in a fresh process for each, walks one epoch the
// way a rank does (data/sampler.h, data/shard_dataset.h): every sample of the global batch is
// checked, its text and image size read for the plan, and one in --ranks of its images decoded.
// Two ways for each size:
//   windowed   the sampler's windows of --window samples and the bounded table cache
//   whole      the window as big as the data set: one permutation of every index and every
//              shard's table held, which is how the data set was read before windows existed
// Prints, for each, the peak resident memory the walk added (MiB), seconds and shard tables read,
// and the whole/windowed ratio of the largest size.
//
//   tandem-shard-memory-bench --samples 20000,200000 --dir /tmp/shard-bench
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "data/image.h"
#include "data/sampler.h"
#include "data/shard_dataset.h"
#include "data/shard_index.h"
#include "data/tar_shard.h"

namespace {

namespace fs = std::filesystem;
using tandem::data::ShardDataset;

struct Walk {
  double added_mib = 0;
  double seconds = 0;
  long table_reads = 0;
  long drawn = 0;
};

// The process's resident set now, or its peak (VmHWM), in KiB.
long StatusKib(const char* field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::string(field).size()));
  }
  return 0;
}

// `samples` caption samples in shards of `per_shard`, and their index.json.
void WriteShards(const std::string& dir, long samples, long per_shard) {
  fs::create_directories(dir);
  if (fs::exists(fs::path(dir) / "index.json")) return;  // written by an earlier run
  tandem::data::Image image{3, 16, 16, std::vector<float>(3 * 16 * 16)};
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = (i * 37 % 101) / 100.0f;
  const std::string png = *tandem::data::EncodePng(image);
  const char* colours[] = {"red", "green", "blue", "purple", "orange"};
  const char* shapes[] = {"circle", "square", "cross", "triangle"};
  tandem::data::ShardIndex index;
  index.word_counts.emplace();
  for (long first = 0, s = 0; first < samples; first += per_shard, ++s) {
    const std::string file = absl::StrFormat("train-%06d.tar", s);
    const std::string path = (fs::path(dir) / file).string();
    auto writer = tandem::data::TarWriter::Create(path);
    if (!writer.ok()) throw std::runtime_error(std::string(writer.status().message()));
    const long count = std::min(per_shard, samples - first);
    for (long i = first; i < first + count; ++i) {
      const std::string key = absl::StrFormat("%09d", i);
      const std::string caption =
          absl::StrFormat("a %s %s number %d", colours[i % 5], shapes[i / 5 % 4], i % 100);
      tandem::data::CountWords(caption, *index.word_counts);
      (void)writer->Add(key + ".json", "{\"caption\": \"" + caption + "\"}");
      (void)writer->Add(key + ".png", png);
    }
    (void)writer->Close();
    index.shards.push_back(
        {file, count, static_cast<int64_t>(fs::file_size(path)), *tandem::data::FileCrc32(path)});
  }
  index.pattern = absl::StrFormat("train-{000000..%06d}.tar", index.shards.size() - 1);
  index.samples = samples;
  index.images = samples;
  (void)tandem::WriteFileAtomically((fs::path(dir) / "index.json").string(),
                                    tandem::data::ShardIndexJson(index));
}

// One epoch as a rank walks it, in this process.
Walk WalkEpoch(const std::string& dir, long window, int ranks, int batch) {
  const long before = StatusKib("VmRSS:");
  const auto start = std::chrono::steady_clock::now();
  ShardDataset::Options options;
  options.shuffle_buffer = window;
  auto dataset = ShardDataset::Open({dir}, 16, nullptr, options);
  if (!dataset.ok()) throw std::runtime_error(std::string(dataset.status().message()));
  const ShardDataset& d = **dataset;
  tandem::data::Sampler sampler(tandem::data::SampleOrder{d.ShardSizes(), window, {}}, 7);
  Walk walk;
  size_t checksum = 0;
  for (long drawn = 0; drawn < d.size(); drawn += batch) {
    const std::vector<int64_t> indices = sampler.Next(std::min<long>(batch, d.size() - drawn));
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t index = indices[k];
      if (!d.Check(index).ok()) throw std::runtime_error(d.Describe(index));
      checksum += d.Messages(index).size() + d.ImageSize(index, 0)->width;
      if (k % ranks == 0) checksum += d.GetImage(index, 0)->pixels.size();
    }
    walk.drawn += static_cast<long>(indices.size());
  }
  walk.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  walk.added_mib = (StatusKib("VmHWM:") - before) / 1024.0;
  walk.table_reads = d.table_reads();
  if (checksum == 0) std::printf("(nothing read)\n");
  return walk;
}

// WalkEpoch in a child process, so that each starts from the same memory.
Walk WalkInChild(const std::string& dir, long window, int ranks, int batch) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error("pipe");
  const pid_t child = fork();
  if (child == 0) {
    close(pipe_fds[0]);
    Walk walk;
    try {
      walk = WalkEpoch(dir, window, ranks, batch);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      _exit(1);
    }
    (void)!write(pipe_fds[1], &walk, sizeof(walk));
    _exit(0);
  }
  close(pipe_fds[1]);
  Walk walk;
  const bool read_all = read(pipe_fds[0], &walk, sizeof(walk)) == sizeof(walk);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!read_all || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("a walk failed");
  return walk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A rank's data memory as the sharded data set grows: windowed against whole"};
  std::vector<long> sizes = {20000, 200000};
  long per_shard = 1000;
  long window = 1000;
  int ranks = 4;
  int batch = 64;
  std::string dir = (fs::temp_directory_path() / "tandem-shard-memory-bench").string();
  app.add_option("--samples", sizes, "Data set sizes, in samples")->delimiter(',');
  app.add_option("--shard-samples", per_shard, "Samples a shard");
  app.add_option("--window", window, "data.shards.shuffle_buffer of the windowed walk");
  app.add_option("--ranks", ranks, "Vision ranks: this one decodes one image in this many");
  app.add_option("--batch", batch, "Global batch drawn at a time");
  app.add_option("--dir", dir, "Where the data sets are written (kept for later runs)");
  CLI11_PARSE(app, argc, argv);
  try {
    std::printf("%10s  %-9s %12s %9s %12s\n", "samples", "order", "added MiB", "seconds",
                "table reads");
    double windowed_mib = 0, whole_mib = 0;
    for (long samples : sizes) {
      const std::string data = (fs::path(dir) / std::to_string(samples)).string();
      WriteShards(data, samples, per_shard);
      for (const bool whole : {false, true}) {
        const Walk walk = WalkInChild(data, whole ? samples : window, ranks, batch);
        std::printf("%10ld  %-9s %12.1f %9.2f %12ld\n", samples, whole ? "whole" : "windowed",
                    walk.added_mib, walk.seconds, walk.table_reads);
        (whole ? whole_mib : windowed_mib) = walk.added_mib;
      }
    }
    std::printf("largest: whole / windowed memory = %.1fx\n", whole_mib / windowed_mib);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-shard-memory-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
