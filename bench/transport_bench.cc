// Transport bandwidth between two processes on one host: a sender process streams float32 tensors
// of several sizes to a receiver process through the actors' transport
// (transport/grpc_transport.h), over gRPC on loopback or over a local link (a Unix socket,
// transport/local_link.h), each send timed from Send to the receiver's acknowledgement of its last
// byte, against memcpy of the same bytes in the same run.
//
// The receiver is a forked child, forked before anything touches gRPC; it serves a PeerService on a
// port the OS picks (and, for the local path, a LocalListener the service advertises) and writes
// the port into a pipe. Prints one table per path and malloc mode (glibc's defaults, then
// TuneMallocForLargeBuffers as the actor processes run it), each in a fresh process pair.
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/malloc_tuning.h"
#include "rpc/channel.h"
#include "transport/grpc_transport.h"
#include "transport/inbox.h"
#include "transport/local_listener.h"
#include "transport/peer_service.h"

namespace tandem::transport {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kTimeout = std::chrono::minutes(2);

struct BenchOptions {
  std::vector<int64_t> sizes_mib = {1, 16, 64};
  int repeats = 5;
  int64_t chunk_kib = 1024;
  bool grpc_defaults = false;  // serve without ConfigurePeerServer
  bool local_link = false;     // the receiver serves a local endpoint and the sender takes it
};

// Transfer n (1-based) of the run: every size gets one warm-up and `repeats` timed sends, in order.
struct Transfer {
  TransferTag tag;
  size_t bytes = 0;
  bool last_of_size = false;
};

std::vector<Transfer> Plan(const BenchOptions& options) {
  std::vector<Transfer> plan;
  for (int64_t mib : options.sizes_mib) {
    for (int i = 0; i <= options.repeats; ++i) {
      Transfer t;
      t.tag.job_id = "bench";
      t.tag.step = static_cast<int64_t>(plan.size()) + 1;
      t.bytes = static_cast<size_t>(mib) << 20;
      t.last_of_size = i == options.repeats;
      plan.push_back(t);
    }
  }
  return plan;
}

TensorBytes Float32View(std::vector<std::byte>& buffer, size_t bytes) {
  return TensorBytes{DType::kFloat32, {static_cast<int64_t>(bytes / 4)}, buffer.data(), bytes};
}

std::vector<std::byte> Pattern(size_t bytes) {
  std::vector<std::byte> out(bytes);
  uint32_t state = 12345;
  for (std::byte& b : out) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<std::byte>(state >> 24);
  }
  return out;
}

// The child: receives the plan's transfers into two alternating buffers, expecting the next before
// awaiting the current, and checks the last transfer of each size byte for byte. Returns the exit
// code.
int Receive(const BenchOptions& options, int port_pipe) {
  const std::vector<Transfer> plan = Plan(options);
  const size_t max_bytes =
      static_cast<size_t>(*std::max_element(options.sizes_mib.begin(), options.sizes_mib.end()))
      << 20;
  const std::vector<std::byte> expected = Pattern(max_bytes);
  std::vector<std::byte> buffers[2] = {std::vector<std::byte>(max_bytes),
                                       std::vector<std::byte>(max_bytes)};

  auto inbox = std::make_shared<Inbox>();
  inbox->SetJob("bench");
  PeerServiceOptions service_options;
  std::unique_ptr<LocalListener> listener;
  if (options.local_link) {
    absl::StatusOr<std::unique_ptr<LocalListener>> started = LocalListener::Start(inbox);
    if (!started.ok()) {
      std::fprintf(stderr, "receiver: %s\n", std::string(started.status().message()).c_str());
      return 1;
    }
    listener = *std::move(started);
    service_options.local_endpoint = listener->endpoint();
  }
  PeerService service(inbox, service_options);
  grpc::ServerBuilder builder;
  int port = 0;
  rpc::ConfigureServer(builder, "127.0.0.1:0", &port, rpc::kActorLimits);
  if (!options.grpc_defaults) ConfigurePeerServer(builder);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return 1;

  int code = 0;
  absl::Status status = inbox->Expect(plan[0].tag, Float32View(buffers[0], plan[0].bytes));
  for (size_t n = 0; n < plan.size() && status.ok(); ++n) {
    if (n + 1 < plan.size()) {
      status = inbox->Expect(plan[n + 1].tag, Float32View(buffers[(n + 1) % 2], plan[n + 1].bytes));
      if (!status.ok()) break;
    }
    if (n == 0 && write(port_pipe, &port, sizeof(port)) != sizeof(port)) return 1;
    status = inbox->Await(plan[n].tag, kTimeout);
    if (status.ok() && plan[n].last_of_size &&
        std::memcmp(buffers[n % 2].data(), expected.data(), plan[n].bytes)) {
      std::fprintf(stderr, "receiver: %s arrived with other bytes\n",
                   DescribeTag(plan[n].tag).c_str());
      code = 1;
    }
  }
  if (!status.ok()) {
    std::fprintf(stderr, "receiver: %s\n", std::string(status.message()).c_str());
    code = 1;
  }
  inbox->ClearJob();
  if (listener) listener->Close();
  service.CloseStreams();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return code;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// memcpy of `bytes` (destination already touched), median of `repeats` copies, in GB/s.
double MemcpyGBps(const std::vector<std::byte>& source, size_t bytes, int repeats) {
  std::vector<std::byte> destination(bytes, std::byte{1});
  std::vector<double> seconds;
  for (int i = 0; i <= repeats; ++i) {
    const auto start = Clock::now();
    std::memcpy(destination.data(), source.data(), bytes);
    if (i > 0) seconds.push_back(Seconds(Clock::now() - start));
  }
  return static_cast<double>(bytes) / Median(seconds) / 1e9;
}

int Send(const BenchOptions& options, int port) {
  const std::vector<Transfer> plan = Plan(options);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  GrpcTransportOptions transport_options;
  transport_options.chunk_bytes = static_cast<size_t>(options.chunk_kib) << 10;
  transport_options.timeout = kTimeout;
  transport_options.local_links = options.local_link;
  std::unique_ptr<Transport> transport =
      CreateGrpcTransport(std::make_shared<Inbox>(), {address}, transport_options);
  const size_t max_bytes =
      static_cast<size_t>(*std::max_element(options.sizes_mib.begin(), options.sizes_mib.end()))
      << 20;
  std::vector<std::byte> source = Pattern(max_bytes);

  if (options.local_link) {
    std::printf("transport: %d timed sends per size after one warm-up, local link, median\n\n",
                options.repeats);
  } else {
    std::printf(
        "transport: %d timed sends per size after one warm-up, %lld KiB chunks, %s, median\n\n",
        options.repeats, static_cast<long long>(options.chunk_kib),
        options.grpc_defaults ? "gRPC's default server settings" : "ConfigurePeerServer");
  }
  std::printf("| size | transport GB/s | memcpy GB/s | transport / memcpy |\n");
  std::printf("| --- | --- | --- | --- |\n");
  std::vector<double> seconds;
  for (size_t n = 0; n < plan.size(); ++n) {
    const Transfer& t = plan[n];
    const auto start = Clock::now();
    const absl::Status status =
        transport->Send(0, t.tag, Float32View(source, t.bytes))->Wait(kTimeout);
    const double elapsed = Seconds(Clock::now() - start);
    if (!status.ok()) {
      std::fprintf(stderr, "sender: %s\n", std::string(status.message()).c_str());
      return 1;
    }
    const bool warm_up = n == 0 || plan[n - 1].last_of_size;
    if (!warm_up) seconds.push_back(elapsed);
    if (t.last_of_size) {
      const double transport_gbps = static_cast<double>(t.bytes) / Median(seconds) / 1e9;
      const double memcpy_gbps = MemcpyGBps(source, t.bytes, options.repeats);
      std::printf("| %zu MiB | %.2f | %.2f | %.3f |\n", t.bytes >> 20, transport_gbps, memcpy_gbps,
                  transport_gbps / memcpy_gbps);
      std::fflush(stdout);
      seconds.clear();
    }
  }
  return 0;
}

}  // namespace
}  // namespace tandem::transport

namespace {

// One measurement: forks the receiver, sends, waits for it. Returns the exit code.
int RunPair(const tandem::transport::BenchOptions& options) {
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("pipe");
    return 1;
  }
  const pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    return 1;
  }
  if (child == 0) {
    close(fds[0]);
    _exit(tandem::transport::Receive(options, fds[1]));
  }
  close(fds[1]);
  int port = 0;
  const bool got_port = read(fds[0], &port, sizeof(port)) == sizeof(port);
  close(fds[0]);
  int code = got_port ? tandem::transport::Send(options, port) : 1;
  if (!got_port) std::fprintf(stderr, "the receiver did not start\n");
  if (code != 0) kill(child, SIGTERM);  // it would wait for transfers that will not come
  int child_status = 0;
  waitpid(child, &child_status, 0);
  if (!WIFEXITED(child_status) || WEXITSTATUS(child_status) != 0) code = 1;
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  tandem::transport::BenchOptions options;
  std::string malloc_mode = "both";
  std::string path = "both";
  CLI::App app{"Transport bandwidth between two processes on one host, against memcpy"};
  app.add_option("--sizes-mib", options.sizes_mib, "tensor sizes in MiB")
      ->check(CLI::PositiveNumber);
  app.add_option("--repeats", options.repeats, "timed sends per size")->check(CLI::PositiveNumber);
  app.add_option("--chunk-kib", options.chunk_kib, "bytes per TensorChunk, in KiB")
      ->check(CLI::PositiveNumber);
  app.add_flag("--grpc-defaults", options.grpc_defaults,
               "serve with gRPC's default HTTP/2 settings instead of ConfigurePeerServer's");
  app.add_option("--malloc", malloc_mode,
                 "glibc malloc as the actors run it (tuned: common/malloc_tuning.h), as glibc "
                 "defaults it, or both "
                 "in turn")
      ->check(CLI::IsMember({"tuned", "default", "both"}));
  app.add_option("--path", path,
                 "grpc (Peer streams on loopback), local (a local link, as actors on one host "
                 "send), or both in turn")
      ->check(CLI::IsMember({"grpc", "local", "both"}));
  CLI11_PARSE(app, argc, argv);

  std::vector<bool> tuned_modes;
  if (malloc_mode != "tuned") tuned_modes.push_back(false);
  if (malloc_mode != "default") tuned_modes.push_back(true);
  std::vector<bool> local_paths;
  if (path != "local") local_paths.push_back(false);
  if (path != "grpc") local_paths.push_back(true);
  bool first = true;
  for (bool local : local_paths)
    for (bool tuned : tuned_modes) {
      options.local_link = local;
      std::printf("%spath: %s; malloc: %s\n", first ? "" : "\n", local ? "local link" : "gRPC",
                  tuned ? "TuneMallocForLargeBuffers (as the actors run)" : "glibc's defaults");
      first = false;
      std::fflush(stdout);
      // Each mode in a fresh process pair, so the other mode's heap and mallopt settings play no
      // part.
      const pid_t runner = fork();
      if (runner < 0) {
        std::perror("fork");
        return 1;
      }
      if (runner == 0) {
        if (tuned && !tandem::TuneMallocForLargeBuffers()) {
          std::fprintf(
              stderr,
              "malloc tuning did not apply (GLIBC_TUNABLES sets malloc tunables, or not glibc)\n");
          _exit(1);
        }
        _exit(RunPair(options));
      }
      int status = 0;
      waitpid(runner, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
    }
  return 0;
}
