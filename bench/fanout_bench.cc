// tandem-fanout-bench: the two ways llm.parallel.embeddings gets a micro-batch's image embeddings
// to every rank of a tensor-parallel LLM replica (NOTE [Parallel sets] in step/stage.h), measured
// in one command:
//   each_rank  every vision rank sends its rows to each of the T tensor-parallel ranks (T copies
//              cross between the groups);
//   broadcast  it sends them to the replica's first rank, which broadcasts the assembled
//              micro-batch over the replica's Gloo communicator (one copy crosses).
// V vision and T LLM rank processes on this host, the actors' transport between them (a local
// link, or gRPC on loopback as between hosts), bf16 embeddings [samples, positions, width]. One
// round: a barrier of all ranks, the sends (each rank its samples / V rows), the receives and the
// broadcast, a barrier; its time is the gap between the barriers on rank 0, the median of
// --repeats after a warm-up. The last round's embeddings are checked on every LLM rank against the
// expected values. Prints one JSON line per case and one ratio line (broadcast / each_rank) per
// path and degree.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/fanout_peer.h"
#include "common/kv_store.h"
#include "common/rank_launcher.h"
#include "engine/communicator.h"
#include "engine/counting_communicator.h"
#include "nlohmann/json.hpp"
#include "parallel/layout.h"
#include "step/exchange.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kTimeout = std::chrono::minutes(2);

struct Options {
  int vision = 2;
  std::vector<int> tensor{2, 4};
  std::vector<std::string> paths{"local", "grpc"};
  int64_t samples = 8;
  int64_t positions = 576;  // LLaVA-1.5's 24 x 24 patches
  int64_t width = 4096;     // a 7B LLM's hidden size
  int warmup = 1;
  int repeats = 5;
  // A rank's part, set by the launcher.
  int rank = -1;
  std::string store, result, path, embeddings;
  int degree = 2;
};

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

// The whole micro-batch's embeddings, the same on every rank.
at::Tensor Expected(const Options& o) {
  return (at::arange(o.samples * o.positions * o.width, at::kLong) % 251 - 125)
      .to(at::kBFloat16)
      .view({o.samples, o.positions, o.width});
}

tandem::transport::TransferTag Tag(int round, int vision_rank, int64_t begin, int64_t end) {
  return {"fanout",   tandem::transport::TransferKind::kEmbeddings, round, 0, begin, end,
          vision_rank};
}

int RunRank(const Options& o) {
  torch::set_num_threads(1);
  const int world = o.vision + o.degree;
  const bool vision = o.rank < o.vision;
  const bool broadcast = o.embeddings == "broadcast";
  const int64_t rows = o.samples / o.vision;
  auto store = tandem::OpenFileStore(o.store);
  if (!store.ok()) return Fail("store", store.status());
  auto peer = tandem::bench::FanoutPeer::Serve("fanout");
  if (!peer.ok()) return Fail("serve", peer.status());
  if (auto s = (*store)->Set("address/" + std::to_string(o.rank), (*peer)->address()); !s.ok())
    return Fail("store", s);
  tandem::engine::GlooOptions gloo;
  gloo.group_name = "all";
  auto all = tandem::engine::CreateGlooCommunicator(*store, o.rank, world, gloo);
  if (!all.ok()) return Fail("all", all.status());
  std::shared_ptr<tandem::engine::CountingCommunicator> replica;
  if (!vision) {
    gloo.group_name = tandem::parallel::ParallelGroupName(tandem::Role::kLlm, 0);
    auto group = tandem::engine::CreateGlooCommunicator(*store, o.rank - o.vision, o.degree, gloo);
    if (!group.ok())
      return Fail(tandem::parallel::ParallelGroupName(tandem::Role::kLlm, 0), group.status());
    replica = std::make_shared<tandem::engine::CountingCommunicator>(*group);
  }
  if (vision) {
    std::vector<std::string> addresses;
    for (int t = 0; t < o.degree; ++t) {
      auto address = (*store)->Get("address/" + std::to_string(o.vision + t), kTimeout);
      if (!address.ok()) return Fail("store", address.status());
      addresses.push_back(*address);
    }
    (*peer)->Connect(addresses, o.path == "local", kTimeout);
  }
  auto& transport = (*peer)->transport();
  const at::Tensor expected = Expected(o);
  const at::Tensor mine =
      vision ? expected.narrow(0, o.rank * rows, rows).contiguous() : at::Tensor();
  at::Tensor host = at::empty_like(expected);
  const bool receives = !vision && (!broadcast || o.rank == o.vision);
  std::vector<double> round_ms;
  int64_t boundary_bytes = 0, broadcast_bytes = 0;
  auto barrier = [&] { return (*all)->Barrier()->Wait(kTimeout); };
  for (int round = 0; round < o.warmup + o.repeats; ++round) {
    host.zero_();
    if (replica) replica->ResetCounts();
    int64_t sent = 0;
    // Expected before the barrier, so no send waits for its receiver to post it.
    std::vector<tandem::transport::TransferTag> tags;
    for (int v = 0; receives && v < o.vision; ++v) {
      tags.push_back(Tag(round, v, v * rows, (v + 1) * rows));
      auto bytes = tandem::step::BytesOf(host.narrow(0, v * rows, rows));
      if (!bytes.ok()) return Fail("bytes", bytes.status());
      if (auto s = transport.Expect(tags.back(), *bytes); !s.ok()) return Fail("expect", s);
    }
    if (auto s = barrier(); !s.ok()) return Fail("barrier", s);
    const auto start = Clock::now();
    if (vision) {
      auto bytes = tandem::step::BytesOf(mine);
      if (!bytes.ok()) return Fail("bytes", bytes.status());
      std::vector<std::unique_ptr<tandem::transport::SendHandle>> sends;
      for (int t = 0; t < (broadcast ? 1 : o.degree); ++t) {
        sends.push_back(
            transport.Send(t, Tag(round, o.rank, o.rank * rows, (o.rank + 1) * rows), *bytes));
        sent += static_cast<int64_t>(bytes->size);
      }
      for (auto& send : sends) {
        if (auto s = send->Wait(kTimeout); !s.ok()) return Fail("send", s);
      }
    } else {
      for (const auto& tag : tags) {
        if (auto s = transport.Await(tag, kTimeout); !s.ok()) return Fail("await", s);
      }
      if (broadcast) {
        if (auto s = replica->Broadcast(host, 0)->Wait(kTimeout); !s.ok())
          return Fail("broadcast", s);
      }
    }
    if (auto s = barrier(); !s.ok()) return Fail("barrier", s);
    if (round >= o.warmup) {
      round_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      boundary_bytes += sent;
      if (replica) broadcast_bytes += replica->counts().broadcast_bytes;
    }
  }
  if (!vision && !at::equal(host, expected)) {
    std::fprintf(stderr, "llm rank %d: the embeddings differ from the expected values\n",
                 o.rank - o.vision);
    return 1;
  }
  std::sort(round_ms.begin(), round_ms.end());
  nlohmann::ordered_json line = {{"rank", o.rank},
                                 {"boundary_bytes", boundary_bytes / o.repeats},
                                 {"broadcast_bytes", broadcast_bytes / o.repeats},
                                 {"ms_median", round_ms[round_ms.size() / 2]}};
  std::ofstream(o.result + "." + std::to_string(o.rank)) << line.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Embedding fan-out to a tensor-parallel LLM replica (llm.parallel.embeddings): each_rank "
      "against "
      "broadcast, time per micro-batch and bytes per dimension. Prints JSON lines."};
  app.add_option("--vision", o.vision, "Vision ranks sending (each owns samples / vision rows)");
  app.add_option("--tensor", o.tensor, "Tensor-parallel degrees of the LLM replica");
  app.add_option("--paths", o.paths,
                 "Transport paths: local (a Unix socket, one host), grpc (loopback)");
  app.add_option("--samples", o.samples, "Samples per micro-batch");
  app.add_option("--positions", o.positions, "Embeddings per sample");
  app.add_option("--width", o.width, "LLM hidden size");
  app.add_option("--warmup", o.warmup, "Untimed rounds");
  app.add_option("--repeats", o.repeats, "Timed rounds");
  app.add_option("--rank", o.rank)->group("");
  app.add_option("--store", o.store)->group("");
  app.add_option("--result", o.result)->group("");
  app.add_option("--path", o.path)->group("");
  app.add_option("--embeddings", o.embeddings)->group("");
  app.add_option("--degree", o.degree)->group("");
  CLI11_PARSE(app, argc, argv);
  if (o.vision < 1 || o.samples % o.vision != 0) {
    std::fprintf(stderr, "--vision (%d) must divide --samples (%lld)\n", o.vision,
                 static_cast<long long>(o.samples));
    return 2;
  }
  if (o.rank >= 0) return RunRank(o);

  char pattern[] = "/tmp/tandem-fanout-bench-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return 1;
  int failures = 0;
  const int64_t micro_batch_bytes = o.samples * o.positions * o.width * 2;
  for (const std::string& path : o.paths) {
    for (int degree : o.tensor) {
      double each_ms = 0;
      for (const std::string embeddings : {"each_rank", "broadcast"}) {
        const std::string result =
            std::string(pattern) + "/" + path + std::to_string(degree) + embeddings;
        if (tandem::LaunchLocalRanks(argv, o.vision + degree,
                                     {"--path", path, "--degree", std::to_string(degree),
                                      "--embeddings", embeddings, "--result", result}) != 0) {
          ++failures;
          continue;
        }
        nlohmann::ordered_json line = {
            {"bench", "fanout"},   {"path", path},
            {"tensor", degree},    {"embeddings", embeddings},
            {"vision", o.vision},  {"micro_batch_bytes", micro_batch_bytes},
            {"boundary_bytes", 0}, {"broadcast_bytes_per_rank", 0},
            {"ms_median", 0.0}};
        for (int r = 0; r < o.vision + degree; ++r) {
          std::ifstream in(result + "." + std::to_string(r));
          const nlohmann::json rank = nlohmann::json::parse(in, nullptr, false);
          if (rank.is_discarded()) {
            ++failures;
            continue;
          }
          line["boundary_bytes"] =
              line["boundary_bytes"].get<int64_t>() + rank["boundary_bytes"].get<int64_t>();
          line["broadcast_bytes_per_rank"] =
              std::max(line["broadcast_bytes_per_rank"].get<int64_t>(),
                       rank["broadcast_bytes"].get<int64_t>());
          if (r == 0) line["ms_median"] = rank["ms_median"];
        }
        std::printf("%s\n", line.dump().c_str());
        std::fflush(stdout);
        if (embeddings == std::string("each_rank")) {
          each_ms = line["ms_median"].get<double>();
        } else if (each_ms > 0) {
          nlohmann::ordered_json ratio = {
              {"bench", "fanout_ratio"},
              {"path", path},
              {"tensor", degree},
              {"broadcast_over_each_rank_ms", line["ms_median"].get<double>() / each_ms}};
          std::printf("%s\n", ratio.dump().c_str());
          std::fflush(stdout);
        }
      }
    }
  }
  std::filesystem::remove_all(pattern);
  return failures == 0 ? 0 : 1;
}
