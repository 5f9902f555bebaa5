// Helpers for tests that run the built `tandem` binary: a CLI call with its output, and a cluster
// of long-running processes (a coordinator and actors) started, killed and reaped by the test.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tandem::testing {

using Clock = std::chrono::steady_clock;

struct Outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs the shell command line `command` and waits for it; `output` is its stdout.
inline Outcome Shell(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  Outcome outcome;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) outcome.output.append(buffer, n);
  const int status = pclose(pipe);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

// Runs `tandem --log-level warning ARGS` (with `environment`, e.g. "NAME=value", added to the
// environment) and waits for it; `output` holds stdout and stderr.
inline Outcome Tandem(const std::string& args, const std::string& environment = "") {
  return Shell(absl::StrCat(environment.empty() ? "" : "env '", environment,
                            environment.empty() ? "" : "' ", TANDEM_BINARY, " --log-level warning ",
                            args, " 2>&1"));
}

// A group's engine config for tiny test jobs: fp32 AdamW at ZeRO `stage`.
inline std::string Fp32Engine(int stage) {
  return absl::StrCat(
      R"({"zero_optimization": {"stage": )", stage,
      R"(, "reduce_bucket_size": 20000}, "optimizer": {"type": "AdamW", "params": {"lr": 0.002}}})");
}

// A tiny fp32 job: one vision actor and `llm_actors` LLM actors at ZeRO `stage`, `steps` steps of
// 8 procedural samples (of 512) in 2 micro-batches, a checkpoint every `checkpoint_every` steps
// (0: only at the end). `extra` adds top-level fields (a leading comma and the pairs).
struct TinyJob {
  std::string name = "";
  int steps = 4;
  int llm_actors = 1;
  int stage = 1;
  int checkpoint_every = 0;
  std::string extra = "";
  // The "data" object; "" for 512 procedural shapes samples (seed 5) and 8 held out.
  std::string data = "";
  int vision_actors = 1;
};

inline std::string TinyJobSpec(const TinyJob& job) {
  const std::string engine = Fp32Engine(job.stage);
  return absl::StrCat(
      R"({
  "name": ")",
      job.name, R"(",
  "data": )",
      job.data.empty()
          ? std::string(
                R"({"shapes": {"seed": 5, "train_samples": 512, "eval_samples": 8}, "max_text_tokens": 12})")
          : job.data,
      R"(,
  "vision": {"actors": )",
      job.vision_actors, R"(, "model": {"preset": "vit-tiny"}, "engine": )", engine, R"(},
  "llm": {"actors": )",
      job.llm_actors, R"(, "model": {"preset": "llm-tiny"}, "engine": )", engine,
      R"(},
  "schedule": {"global_batch": 8, "micro_batches": 2, "steps": )",
      job.steps, R"(, "checkpoint_every": )", job.checkpoint_every, R"(, "seed": 11})", job.extra,
      "\n}");
}

// How long a test waits for a tiny job to reach a step, a checkpoint or its end, or for a process
// to start: minutes, so that a machine many times slower than a developer's still passes. Nothing
// waits this long unless something is wrong.
constexpr std::chrono::seconds kProgressDeadline{300};

// Polls `condition` every 20 ms until it holds or `timeout` passes; returns whether it held.
inline bool WaitFor(const std::function<bool()>& condition,
                    std::chrono::milliseconds timeout = kProgressDeadline) {
  const auto deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// A file's first line (a ready file), waiting up to kProgressDeadline for it; "" when it never
// came.
inline std::string AwaitLine(const std::string& path) {
  std::string line;
  WaitFor([&] {
    std::ifstream in(path);
    return in && std::getline(in, line) && !line.empty();
  });
  return line;
}

// Processes of one test in a temporary directory; all are killed and reaped at the end. Each
// process logs at info level to <dir>/<n>-<command>.log; when the test failed, those logs are
// printed before the directory goes.
//
// Every coordinator it starts holds jobs by the files in hold_dir() (`--test-hold-dir`,
// coordinator/step_hold.h): Hold(name, S) keeps the job called `name` from starting step S+1 until
// Release(name), so a test acts on a job at a known step however fast the machine trains.
class ProcessCluster {
 public:
  ProcessCluster() {
    char pattern[] = "/tmp/tandem-cluster-XXXXXX";
    dir_ = mkdtemp(pattern);
    std::filesystem::create_directories(hold_dir());
  }
  ~ProcessCluster() {
    for (pid_t pid : children_) kill(pid, SIGKILL);
    for (pid_t pid : children_) waitpid(pid, nullptr, 0);
    if (::testing::Test::HasFailure()) PrintLogs();
    std::filesystem::remove_all(dir_);
  }

  const std::string& dir() const { return dir_; }
  const std::string& address() const { return address_; }
  const std::string& metrics_address() const { return metrics_address_; }
  pid_t coordinator() const { return coordinator_; }
  std::string hold_dir() const { return dir_ + "/holds"; }

  // Holds the job called `name` before step `step` + 1 (the file is written whole, at once).
  void Hold(const std::string& name, int step) const {
    const std::string path = absl::StrCat(hold_dir(), "/", name, ".hold");
    std::ofstream(path + ".tmp") << step << "\n";
    std::filesystem::rename(path + ".tmp", path);
  }

  // Lets the job called `name` go on.
  void Release(const std::string& name) const {
    std::filesystem::remove(absl::StrCat(hold_dir(), "/", name, ".hold"));
  }

  // Waits until the job `id` is held before step `step` + 1 (`tandem status` says so); returns
  // whether it was within kProgressDeadline.
  bool AwaitHeld(const std::string& id, int step) const {
    const std::string held = absl::StrCat("held before step ", step + 1, ": ");
    return WaitFor(
        [&] { return Cli(absl::StrCat("status ", id)).output.find(held) != std::string::npos; });
  }

  // `tandem ARGS` as a child process with stderr to `log` (default <dir>/<n>-<ARGS[0]>.log).
  pid_t Spawn(std::vector<std::string> args, std::string log = "") {
    if (log.empty()) log = absl::StrCat(dir_, "/", ++spawned_, "-", args.at(0), ".log");
    logs_.push_back(log);
    args.insert(args.begin(), {"tandem", "--log-level", "info"});
    const pid_t pid = fork();
    if (pid == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      freopen(log.c_str(), "w", stderr);
      execv(TANDEM_BINARY, argv.data());
      _exit(127);
    }
    children_.push_back(pid);
    return pid;
  }

  // A coordinator on `listen` (default: a port the OS picks) with its state in <dir>/state and its
  // hold files in hold_dir(); returns its pid once it is ready, and sets address() (and
  // metrics_address(), given --metrics-listen). Heartbeats time out after 2 s, so an actor that
  // went silent is found fast, unless `extra` sets --heartbeat-timeout.
  pid_t StartCoordinator(const std::string& listen = "127.0.0.1:0",
                         std::vector<std::string> extra = {}) {
    const std::string ready = absl::StrCat(dir_, "/coordinator", ++coordinators_);
    std::vector<std::string> args = {"coordinator", "--listen",      listen,
                                     "--state-dir", dir_ + "/state", "--test-hold-dir",
                                     hold_dir(),    "--ready-file",  ready};
    if (std::find(extra.begin(), extra.end(), "--heartbeat-timeout") == extra.end()) {
      args.insert(args.end(), {"--heartbeat-timeout", "2"});
    }
    args.insert(args.end(), extra.begin(), extra.end());
    coordinator_ = Spawn(args);
    address_ = AwaitLine(ready);
    std::ifstream in(ready);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("metrics ", 0) == 0) metrics_address_ = line.substr(8);
    }
    return coordinator_;
  }

  // An actor of `pool` (with `extra` arguments), registered with the coordinator, once it is ready.
  pid_t StartActor(const std::string& pool, std::vector<std::string> extra = {}) {
    const std::string ready = absl::StrCat(dir_, "/actor", ++actors_);
    std::vector<std::string> args = {"actor",  "--pool",       pool, "--coordinator",
                                     address_, "--ready-file", ready};
    args.insert(args.end(), extra.begin(), extra.end());
    const pid_t pid = Spawn(args);
    AwaitLine(ready);
    return pid;
  }

  // Waits for a child to end; returns its waitpid status.
  int Wait(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    std::erase(children_, pid);
    return status;
  }

  // Kills a child with SIGKILL and reaps it.
  void Kill(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    std::erase(children_, pid);
  }

  // `tandem ARGS --coordinator <address>`.
  Outcome Cli(const std::string& args) const {
    return Tandem(absl::StrCat(args, " --coordinator ", address_));
  }

  // Writes `text` to <dir>/<name>; returns the path.
  std::string WriteFile(const std::string& name, const std::string& text) const {
    const std::string path = absl::StrCat(dir_, "/", name);
    std::ofstream(path) << text;
    return path;
  }

 private:
  void PrintLogs() const {
    for (const std::string& log : logs_) {
      std::ifstream in(log);
      std::fprintf(stderr, "---- %s ----\n%s\n", log.c_str(),
                   std::string(std::istreambuf_iterator<char>(in), {}).c_str());
    }
  }

  std::string dir_;
  std::string address_;
  std::string metrics_address_;
  pid_t coordinator_ = -1;
  int coordinators_ = 0;
  int actors_ = 0;
  int spawned_ = 0;
  std::vector<std::string> logs_;
  std::vector<pid_t> children_;
};

}  // namespace tandem::testing

namespace tandem::testing {

// The pids whose parent is `parent`, from /proc.
inline std::set<pid_t> ChildrenOf(pid_t parent) {
  std::set<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string pid, comm, state;
    pid_t ppid = 0;
    if (stat >> pid >> comm >> state >> ppid && ppid == parent) children.insert(std::stoi(name));
  }
  return children;
}

// The pid of a child of `parent` whose command line holds `argument` (e.g. "llm" after "--pool");
// -1 when there is none.
inline pid_t ChildWithArgument(pid_t parent, const std::string& argument) {
  for (pid_t child : ChildrenOf(parent)) {
    std::ifstream cmdline(absl::StrCat("/proc/", child, "/cmdline"));
    for (std::string arg; std::getline(cmdline, arg, '\0');) {
      if (arg == argument) return child;
    }
  }
  return -1;
}

}  // namespace tandem::testing
