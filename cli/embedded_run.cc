#include "cli/embedded_run.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/actor_supervisor.h"
#include "cli/spawn.h"
#include "cli/watch.h"
#include "common/cpu_features.h"
#include "common/process_exit.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_proto.h"
#include "platform/device.h"
#include "rpc/channel.h"
#include "rpc/security.h"
#include "rpc/status.h"
#include "rundir/new_run.h"

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Child {
  std::string name;
  pid_t pid = -1;
  std::string log;
  std::string ready_file;
  std::vector<std::string> args;
  std::optional<int64_t> oom_kills_at_start;  // common/process_exit.h
  int restarts = 0;
};

std::string Tail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i)
    out += "    " + all[i] + "\n";
  return out;
}

class Supervisor {
 public:
  explicit Supervisor(std::string dir) : dir_(std::move(dir)) {}
  ~Supervisor() { StopAll(); }

  absl::Status Start(const std::string& name, std::vector<std::string> args) {
    Child child;
    child.name = name;
    child.log = (fs::path(dir_) / (name + ".log")).string();
    child.ready_file = (fs::path(dir_) / (name + ".address")).string();
    args.push_back("--ready-file");
    args.push_back(child.ready_file);
    child.args = args;
    child.oom_kills_at_start = OomKills();
    absl::StatusOr<pid_t> pid = Spawn(args, child.log);
    if (!pid.ok()) return pid.status();
    child.pid = *pid;
    children_.push_back(child);
    return absl::OkStatus();
  }

  // Waits until every child wrote its ready file; fails fast when one exits.
  absl::StatusOr<std::vector<std::string>> AwaitReady(std::chrono::seconds timeout,
                                                      const volatile bool* stop) {
    const auto deadline = Clock::now() + timeout;
    std::vector<std::string> addresses(children_.size());
    while (true) {
      size_t ready = 0;
      for (size_t i = 0; i < children_.size(); ++i) {
        Child& c = children_[i];
        int status = 0;
        if (c.pid > 0 && waitpid(c.pid, &status, WNOHANG) == c.pid) {
          c.pid = -1;
          return absl::InternalError(absl::StrCat(c.name, " exited during startup; its log (",
                                                  c.log, ") ends with:\n", Tail(c.log, 15)));
        }
        std::ifstream in(c.ready_file);
        if (in && std::getline(in, addresses[i]) && !addresses[i].empty()) ++ready;
      }
      if (ready == children_.size()) return addresses;
      if (*stop) return absl::CancelledError("interrupted");
      if (Clock::now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("the local coordinator and actors did not start within ", timeout.count(),
                         "s; logs in ", dir_));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Actors that ended while the job ran: each is reported to the coordinator with why it ended
  // (so the job restarts from its checkpoint at once, naming the cause) and started again, up to
  // `max_restarts` times per actor. Children [first, end) are actors.
  void KeepActors(size_t first, v1::Coordinator::Stub& coordinator, int64_t max_restarts) {
    for (size_t i = first; i < children_.size(); ++i) {
      Child& c = children_[i];
      int status = 0;
      if (c.pid <= 0 || waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.pid = -1;
      const std::string why = DescribeExit(ExitOf(status, c.oom_kills_at_start));
      std::string address;
      std::ifstream(c.ready_file) >> address;
      ReportActorExit(coordinator, address, why);
      if (c.restarts >= max_restarts) {
        std::fprintf(stderr, "tandem run: actor %s %s; not started again (%d restarts)\n",
                     c.name.c_str(), why.c_str(), c.restarts);
        continue;
      }
      ++c.restarts;
      std::fprintf(stderr, "tandem run: actor %s %s; starting it again (log %s)\n", c.name.c_str(),
                   why.c_str(), c.log.c_str());
      std::error_code ec;
      fs::remove(c.ready_file, ec);
      c.log = (fs::path(dir_) / absl::StrCat(c.name, ".", c.restarts, ".log")).string();
      c.oom_kills_at_start = OomKills();
      absl::StatusOr<pid_t> pid = Spawn(c.args, c.log);
      if (pid.ok()) c.pid = *pid;
    }
  }

  void StopAll() {
    std::vector<pid_t> pids;
    for (Child& c : children_) pids.push_back(std::exchange(c.pid, -1));
    StopChildren(pids, std::chrono::seconds(10));
  }

 private:
  std::string dir_;
  std::vector<Child> children_;
};

volatile bool g_stop = false;

int Fail(const std::string& message) {
  std::fprintf(stderr, "tandem run: %s\n", message.c_str());
  return 1;
}

}  // namespace

int RunEmbedded(const EmbeddedRunOptions& options) {
  const jobspec::JobConfig* config = &options.job.config;
  // NCCL takes one rank of a communicator per device.
  if (options.device != "cpu") {
    const int devices = options.device == "cuda" ? options.cuda_devices : 1;
    for (const auto& [group, actors] :
         {std::pair<const char*, int>{"vision", config->vision.actors},
          std::pair<const char*, int>{"llm", config->llm.actors}}) {
      if (actors <= devices) continue;
      std::fprintf(stderr,
                   "tandem run: --device %s: %s.actors is %d, but its ranks would share %d CUDA "
                   "device(s), and NCCL takes one rank of a group per device\n",
                   options.device.c_str(), group, actors, devices);
      return 2;
    }
  }
  const std::string run_dir = fs::absolute(options.run_dir).string();
  if (absl::Status fresh = rundir::CheckRunDirIsNew(run_dir); !fresh.ok()) {
    std::fprintf(stderr, "tandem run: %s\n", std::string(fresh.message()).c_str());
    return 2;
  }

  // Ctrl-C: a thread takes the signal, cancels the job, and the main flow stops the children.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  char dir_template[] = "/tmp/tandem-run-XXXXXX";
  if (mkdtemp(dir_template) == nullptr)
    return Fail(absl::StrCat("cannot create a temporary directory: ", std::strerror(errno)));
  const std::string dir = dir_template;
  // The children inherit the token: a random one unless $TANDEM_TOKEN names the cluster's own, so
  // nothing else on this host can call the job's coordinator or actors.
  if (std::getenv(rpc::kTokenEnvironment) == nullptr) {
    setenv(rpc::kTokenEnvironment, rpc::RandomToken().c_str(), /*overwrite=*/1);
  }
  absl::StatusOr<rpc::Security> security = rpc::LoadSecurity({});
  if (!security.ok()) return Fail(std::string(security.status().message()));
  rpc::InstallSecurity(*std::move(security));
  Supervisor supervisor(dir);
  const std::vector<std::string> common = {"tandem", "--log-level", options.log_level};
  auto with = [&](std::vector<std::string> args) {
    std::vector<std::string> all = common;
    all.insert(all.end(), args.begin(), args.end());
    return all;
  };
  std::vector<std::string> coordinator_args = {"coordinator", "--listen", "127.0.0.1:0",
                                               "--state-dir", dir + "/state"};
  if (!options.hold_dir.empty()) {
    coordinator_args.insert(coordinator_args.end(),
                            {"--test-hold-dir", fs::absolute(options.hold_dir).string()});
  }
  absl::Status status = supervisor.Start("coordinator", with(std::move(coordinator_args)));
  if (!status.ok()) return Fail(std::string(status.message()));
  absl::StatusOr<std::vector<std::string>> addresses =
      supervisor.AwaitReady(std::chrono::seconds(60), &g_stop);
  if (!addresses.ok()) return Fail(std::string(addresses.status().message()));
  const std::string coordinator = (*addresses)[0];
  const int actors = config->vision.actors + config->llm.actors;
  for (int i = 0; i < actors; ++i) {
    const bool vision = i < config->vision.actors;
    const std::string name =
        vision ? absl::StrCat("vision-", i) : absl::StrCat("llm-", i - config->vision.actors);
    std::vector<std::string> args = {
        "actor",         "--pool",    vision ? config->vision.pool : config->llm.pool,
        "--coordinator", coordinator, "--listen",
        "127.0.0.1:0"};
    if (!options.local_links) args.push_back("--no-local-links");
    const int rank = vision ? i : i - config->vision.actors;
    args.insert(args.end(),
                {"--device", platform::DeviceOfRank(options.device, rank, options.cuda_devices)});
    status = supervisor.Start(name, with(std::move(args)));
    if (!status.ok()) return Fail(std::string(status.message()));
  }
  addresses = supervisor.AwaitReady(std::chrono::seconds(120), &g_stop);
  if (!addresses.ok()) return Fail(std::string(addresses.status().message()));

  auto stub = v1::Coordinator::NewStub(rpc::MakeChannel(coordinator));
  v1::SubmitJobRequest request;
  *request.mutable_spec() = *options.job.spec;
  request.set_run_dir(run_dir);
  int threads = options.threads;
  if (threads == 0) threads = std::max(1, UsableCpus() / actors);
  request.set_threads(threads);
  v1::SubmitJobResponse response;
  status = rpc::FromGrpc(
      stub->SubmitJob(rpc::ContextWithTimeout(std::chrono::seconds(30)).get(), request, &response),
      "local coordinator");
  if (!status.ok()) return Fail(std::string(status.message()));
  const std::string job_id = response.job().job_id();

  std::unique_ptr<grpc::ClientContext> context = rpc::NewContext();
  sigaddset(&signals, SIGUSR1);  // how the main flow tells the interrupter the run ended
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread interrupter([&] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    if (signal_number == SIGUSR1) return;  // the run ended by itself
    g_stop = true;
    v1::CancelJobRequest cancel;
    cancel.set_job_id(job_id);
    v1::Job job;
    stub->CancelJob(rpc::ContextWithTimeout(std::chrono::seconds(10)).get(), cancel, &job);
  });

  // Actor processes that end are started again while the job runs, as a cluster's restart policy
  // would; the job resumes on them from its last checkpoint.
  std::atomic<bool> watching{true};
  std::thread keeper([&] {
    while (watching) {
      supervisor.KeepActors(1, *stub, config->max_restarts);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  WatchOptions watch;
  watch.interactive = options.interactive;
  watch.progress = options.json && !options.interactive ? nullptr : stderr;
  absl::StatusOr<v1::Job> job = WatchJob(*stub, context.get(), job_id, watch);
  watching = false;
  keeper.join();
  pthread_kill(interrupter.native_handle(), SIGUSR1);
  interrupter.join();
  supervisor.StopAll();

  if (!job.ok()) return Fail(absl::StrCat(job.status().message(), "; logs in ", dir));
  if (job->state() != v1::JOB_STATE_SUCCEEDED) {
    return Fail(absl::StrCat(job->name(), " ", StateName(job->state()), ": ", job->message(),
                             " (logs in ", dir, ")"));
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (options.json) {
    std::printf("%s\n", job->summary_json().c_str());
  } else {
    std::printf("%s", DescribeOutcome(*job).c_str());
  }
  return 0;
}

}  // namespace tandem::cli
