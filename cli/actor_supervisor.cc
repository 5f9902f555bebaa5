#include "cli/actor_supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/spawn.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/process_exit.h"
#include "rpc/channel.h"
#include "rpc/health_check.h"

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr char kComponent[] = "supervisor";
constexpr std::chrono::seconds kFirstBackoff{1}, kMaxBackoff{30}, kStableRun{60};
constexpr std::chrono::seconds kStopGrace{30};
constexpr std::chrono::seconds kHealthInterval{5};
constexpr int kStuckChecks = 3;

// Waits up to `timeout` for SIGINT or SIGTERM (blocked in this thread); true when one came.
bool AwaitSignal(const sigset_t& signals, std::chrono::milliseconds timeout) {
  const timespec wait{static_cast<time_t>(timeout.count() / 1000),
                      static_cast<long>(timeout.count() % 1000) * 1000000};
  return sigtimedwait(&signals, nullptr, &wait) > 0;
}

// This process's arguments after the program name, without --supervise and --ready-file (the
// supervisor gives the child a ready file of its own).
std::vector<std::string> ChildArguments() {
  std::ifstream in("/proc/self/cmdline");
  std::vector<std::string> args;
  bool program = true, skip_value = false;
  for (std::string arg; std::getline(in, arg, '\0');) {
    if (std::exchange(program, false) || std::exchange(skip_value, false)) continue;
    if (arg == "--ready-file") {
      skip_value = true;
    } else if (arg != "--supervise" && !arg.starts_with("--supervise=") &&
               !arg.starts_with("--ready-file=")) {
      args.push_back(arg);
    }
  }
  return args;
}

}  // namespace

void ReportActorExit(v1::Coordinator::Stub& coordinator, const std::string& address,
                     const std::string& why) {
  v1::ReportActorExitRequest request;
  request.set_address(address);
  request.set_description(why);
  v1::ReportActorExitResponse response;
  const grpc::Status status = coordinator.ReportActorExit(
      rpc::ContextWithTimeout(std::chrono::seconds(10)).get(), request, &response);
  if (!status.ok()) {
    TANDEM_LOG(kWarning, kComponent) << "cannot tell the coordinator that actor " << address << " "
                                     << why << ": " << status.error_message();
  }
}

int SuperviseActor(const SupervisedActor& actor) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  char dir_template[] = "/tmp/tandem-actor-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::fprintf(stderr, "tandem actor: cannot create a temporary directory\n");
    return 1;
  }
  const std::string dir = dir_template;
  const std::string child_ready = dir + "/address";
  std::vector<std::string> args = {"tandem"};
  const std::vector<std::string> own = ChildArguments();
  args.insert(args.end(), own.begin(), own.end());
  args.insert(args.end(), {"--ready-file", child_ready});
  auto coordinator = v1::Coordinator::NewStub(rpc::MakeChannel(actor.coordinator));

  std::chrono::seconds backoff = kFirstBackoff;
  int exit_code = 0;
  for (int start = 1;; ++start) {
    std::error_code ec;
    fs::remove(child_ready, ec);
    const std::optional<int64_t> oom_kills = OomKills();
    absl::StatusOr<pid_t> pid = Spawn(args, "");
    if (!pid.ok()) {
      std::fprintf(stderr, "tandem actor: %s\n", std::string(pid.status().message()).c_str());
      exit_code = 1;
      break;
    }
    const auto started = Clock::now();
    std::string address;
    int status = 0;
    bool stopping = false;
    // An actor whose command thread is stuck says NOT_SERVING (actors/actor_service.h, Stuck), and
    // a stopped or hung one says nothing: after kStuckChecks such checks in a row it is killed, and
    // started again like one that ended.
    auto next_check = Clock::now() + kHealthInterval;
    rpc::HealthStreak health_streak(kStuckChecks);
    bool stuck = false;
    while (waitpid(*pid, &status, WNOHANG) != *pid) {
      if (AwaitSignal(signals, std::chrono::milliseconds(100))) {
        StopChildren({*pid}, kStopGrace);
        stopping = true;
        break;
      }
      if (!address.empty() && Clock::now() >= next_check) {
        next_check = Clock::now() + kHealthInterval;
        if (health_streak.Record(rpc::CheckHealth(address, std::chrono::seconds(2), "the actor"))) {
          TANDEM_LOG(kError, kComponent)
              << "actor " << address << " " << health_streak.Why() << " now";
          kill(*pid, SIGKILL);  // a stuck thread would hold up a graceful stop; a stopped one
                                // ignores SIGTERM
          waitpid(*pid, &status, 0);
          stuck = true;
          break;
        }
      }
      if (address.empty()) {
        std::ifstream(child_ready) >> address;
        if (!address.empty() && !actor.ready_file.empty()) {
          if (absl::Status written = WriteFileAtomically(actor.ready_file, address + "\n");
              !written.ok()) {
            TANDEM_LOG(kWarning, kComponent) << written.message();
          }
        }
      }
    }
    if (stopping) break;
    const ProcessExit exit = ExitOf(status, oom_kills);
    const std::string why = stuck ? health_streak.Why() : DescribeExit(exit);
    if (exit.exit_code == 2 && !stuck) {
      TANDEM_LOG(kError, kComponent)
          << "the actor " << why << " (bad flags); not starting it again";
      exit_code = 2;
      break;
    }
    if (!address.empty()) ReportActorExit(*coordinator, address, why);
    backoff = Clock::now() - started >= kStableRun ? kFirstBackoff : backoff;
    TANDEM_LOG(kWarning, kComponent)
        << "actor " << (address.empty() ? std::string("(not yet registered)") : address) << " "
        << why << "; starting it again in " << backoff.count() << " s (start " << start + 1 << ")";
    if (AwaitSignal(signals, backoff)) break;
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return exit_code;
}

}  // namespace tandem::cli
