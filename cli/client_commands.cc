#include "cli/client_commands.h"

#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/security_flags.h"
#include "cli/watch.h"
#include "hf/pretrained_job.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_proto.h"
#include "jobspec/memory_estimate.h"
#include "nlohmann/json.hpp"
#include "proto/tandem/v1/coordinator.grpc.pb.h"
#include "rpc/channel.h"
#include "rpc/status.h"

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;
constexpr std::chrono::seconds kCallTimeout{30};

struct ClientFlags {
  std::string coordinator = "127.0.0.1:7070";
  std::string output = "text";
  rpc::SecurityFlags security;
  bool json() const { return output == "json"; }
};

void AddClientFlags(CLI::App* command, ClientFlags* flags) {
  command->add_option("--coordinator", flags->coordinator, "Coordinator HOST:PORT")
      ->capture_default_str();
  command->add_option("--output", flags->output, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  AddSecurityFlags(command, &flags->security);
}

int Fail(const std::string& command, const absl::Status& status) {
  std::fprintf(stderr, "tandem %s: %s\n", command.c_str(),
               Printable(std::string(status.message())).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

bool IsActive(v1::JobState state) {
  return state == v1::JOB_STATE_QUEUED || state == v1::JOB_STATE_RUNNING ||
         state == v1::JOB_STATE_RESTARTING;
}

std::string Time(double unix_seconds) {
  if (unix_seconds <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm local{};
  localtime_r(&t, &local);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

std::string JobLine(const v1::Job& job) {
  return absl::StrFormat("%-12s %-20s %-10s %6d/%-6d %-9s %s", job.job_id(), Printable(job.name()),
                         StateName(job.state()), job.step(), job.steps(),
                         job.step() > 0 ? absl::StrFormat("%.4f", job.loss()) : "-",
                         Printable(job.message()));
}

// `tandem submit --estimate`: each group's estimated memory on one actor, without a coordinator.
int PrintEstimates(const ClientFlags& flags, jobspec::JobConfig config) {
  if (absl::Status resolved = hf::ResolvePretrainedModels(config); !resolved.ok())
    return Fail("submit", resolved);
  nlohmann::json out = nlohmann::json::object();
  for (const Role role : kRoles) {
    absl::StatusOr<jobspec::MemoryEstimate> e = jobspec::EstimateGroupMemory(config, role);
    if (!e.ok()) return Fail("submit", e.status());
    if (!flags.json()) {
      std::printf("%s: %s\n", RoleName(role), jobspec::DescribeEstimate(*e, config).c_str());
      continue;
    }
    out[RoleName(role)] = {{"total_bytes", e->total()},
                           {"model_state_bytes", e->model_state_bytes},
                           {"activation_bytes", e->activation_bytes},
                           {"data_bytes", e->data_bytes},
                           {"parameters", e->parameters},
                           {"rank_parameters", e->rank_parameters},
                           {"samples_per_rank", e->samples_per_rank},
                           {"positions", e->positions}};
  }
  if (flags.json()) std::printf("%s\n", out.dump().c_str());
  return 0;
}

int Submit(const ClientFlags& flags, const std::string& path, bool wait, const std::string& run_dir,
           int threads, bool estimate) {
  // Read, resolved and validated here, so errors name the file; the coordinator validates again.
  absl::StatusOr<jobspec::ResolvedJobSpec> resolved = jobspec::ReadJobSpecFile(path);
  if (!resolved.ok()) return Fail("submit", resolved.status());
  if (estimate) return PrintEstimates(flags, std::move(resolved->config));
  v1::SubmitJobRequest request;
  *request.mutable_spec() = *resolved->spec;
  if (!run_dir.empty()) request.set_run_dir(fs::absolute(run_dir).string());
  request.set_threads(threads);
  auto stub = v1::Coordinator::NewStub(rpc::MakeChannel(flags.coordinator));
  v1::SubmitJobResponse response;
  absl::Status status = rpc::FromGrpc(
      stub->SubmitJob(rpc::ContextWithTimeout(kCallTimeout).get(), request, &response),
      absl::StrCat("coordinator ", flags.coordinator));
  if (!status.ok()) return Fail("submit", status);
  const std::string job_id = response.job().job_id();
  if (!wait) {
    std::printf("%s\n", flags.json() ? ToJson(response.job()).c_str() : job_id.c_str());
    // A job that cannot start until more actors join says so at once ("waiting for more actors:
    // pool 'llm' has 2 ..."), on stderr after the id, so that the first line of the output stays
    // the id. (With --wait the event log below says it.)
    std::fflush(stdout);
    if (absl::StartsWith(response.job().message(), "waiting for more actors")) {
      std::fprintf(stderr, "%s: %s\n", job_id.c_str(), Printable(response.job().message()).c_str());
    }
    return 0;
  }
  std::fprintf(stderr, "%s submitted (run directory %s)\n", job_id.c_str(),
               Printable(response.job().run_dir()).c_str());
  std::unique_ptr<grpc::ClientContext> context = rpc::NewContext();
  WatchOptions watch;
  watch.interactive = isatty(fileno(stderr)) != 0;
  watch.from_start = true;
  absl::StatusOr<v1::Job> job = WatchJob(*stub, context.get(), job_id, watch);
  if (!job.ok()) return Fail("submit", job.status());
  if (flags.json()) {
    std::printf("%s\n", job->state() == v1::JOB_STATE_SUCCEEDED ? job->summary_json().c_str()
                                                                : ToJson(*job).c_str());
  } else {
    std::printf("%s", DescribeOutcome(*job).c_str());
  }
  return job->state() == v1::JOB_STATE_SUCCEEDED ? 0 : 1;
}

int Status(const ClientFlags& flags, const std::string& job_id) {
  auto stub = v1::Coordinator::NewStub(rpc::MakeChannel(flags.coordinator));
  if (job_id.empty()) {  // the queue and the actors at a glance
    v1::ListJobsResponse jobs;
    absl::Status status =
        rpc::FromGrpc(stub->ListJobs(rpc::ContextWithTimeout(kCallTimeout).get(), {}, &jobs),
                      absl::StrCat("coordinator ", flags.coordinator));
    if (!status.ok()) return Fail("status", status);
    v1::ListActorsResponse actors;
    status =
        rpc::FromGrpc(stub->ListActors(rpc::ContextWithTimeout(kCallTimeout).get(), {}, &actors),
                      absl::StrCat("coordinator ", flags.coordinator));
    if (!status.ok()) return Fail("status", status);
    if (flags.json()) {
      std::printf("{\"jobs\": %s, \"actors\": %s}\n", ToJson(jobs).c_str(), ToJson(actors).c_str());
      return 0;
    }
    int active = 0, free = 0;
    for (const auto& job : jobs.jobs()) {
      active += IsActive(job.state()) ? 1 : 0;
    }
    for (const auto& a : actors.actors()) free += a.job_id().empty() ? 1 : 0;
    std::printf("coordinator %s: %d jobs (%d queued, running or restarting), %d actors (%d free)\n",
                flags.coordinator.c_str(), jobs.jobs_size(), active, actors.actors_size(), free);
    for (const auto& job : jobs.jobs()) {
      if (IsActive(job.state())) {
        std::printf("  %s\n", JobLine(job).c_str());
      }
    }
    return 0;
  }
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  absl::Status status =
      rpc::FromGrpc(stub->GetJob(rpc::ContextWithTimeout(kCallTimeout).get(), request, &job),
                    absl::StrCat("coordinator ", flags.coordinator));
  if (!status.ok()) return Fail("status", status);
  if (flags.json()) {
    std::printf("%s\n", ToJson(job).c_str());
    return 0;
  }
  std::printf("%s (%s): %s%s%s\n", job.job_id().c_str(), Printable(job.name()).c_str(),
              StateName(job.state()).c_str(), job.message().empty() ? "" : ": ",
              Printable(job.message()).c_str());
  std::printf("  step %lld of %lld%s\n", static_cast<long long>(job.step()),
              static_cast<long long>(job.steps()),
              job.step() > 0 ? absl::StrFormat(", loss %.4f", job.loss()).c_str() : "");
  std::printf("  submitted %s, started %s, ended %s\n", Time(job.submitted_at()).c_str(),
              Time(job.started_at()).c_str(), Time(job.ended_at()).c_str());
  std::printf("  run directory %s\n", Printable(job.run_dir()).c_str());
  if (job.restarts() > 0) {
    std::printf("  restarted %lld times after failures\n", static_cast<long long>(job.restarts()));
  }
  if (!job.last_restart().empty() && job.state() != v1::JOB_STATE_RESTARTING) {
    std::printf("  last restart: %s\n", Printable(job.last_restart()).c_str());
  }
  if (job.vision_actors_size() > 0) {
    std::string vision, llm;
    for (const auto& id : job.vision_actors()) vision += " " + id;
    for (const auto& id : job.llm_actors()) llm += " " + id;
    std::printf("  vision actors:%s\n  llm actors:%s\n", vision.c_str(), llm.c_str());
  }
  return 0;
}

// "30d", "12h", "90m", "45s" or plain seconds, as seconds; nullopt for anything else.
std::optional<double> ParseAge(const std::string& text) {
  if (text.empty()) return std::nullopt;
  double unit = 1;
  std::string number = text;
  switch (text.back()) {
    case 'd':
      unit = 86400;
      break;
    case 'h':
      unit = 3600;
      break;
    case 'm':
      unit = 60;
      break;
    case 's':
      unit = 1;
      break;
    default:
      number += "s";
      break;  // bare seconds
  }
  number.pop_back();
  double value = 0;
  if (!absl::SimpleAtod(number, &value) || !(value >= 0) || !std::isfinite(value))
    return std::nullopt;
  return value * unit;
}

int PruneJobs(const ClientFlags& flags, const std::string& age) {
  const std::optional<double> seconds = ParseAge(age);
  if (!seconds) {
    return Fail("jobs", absl::InvalidArgumentError(absl::StrCat(
                            "--prune: '", age, "' is not an age such as 30d, 12h, 90m, 45s or 0")));
  }
  auto stub = v1::Coordinator::NewStub(rpc::MakeChannel(flags.coordinator));
  v1::PruneJobsRequest request;
  request.set_older_than_s(*seconds);
  v1::PruneJobsResponse response;
  absl::Status status = rpc::FromGrpc(
      stub->PruneJobs(rpc::ContextWithTimeout(kCallTimeout).get(), request, &response),
      absl::StrCat("coordinator ", flags.coordinator));
  if (!status.ok()) return Fail("jobs", status);
  if (flags.json()) {
    std::printf("%s\n", ToJson(response).c_str());
    return 0;
  }
  for (const std::string& id : response.job_ids()) std::printf("%s\n", id.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "pruned %d ended job%s (their run directories stay)\n",
               response.job_ids_size(), response.job_ids_size() == 1 ? "" : "s");
  return 0;
}

int Jobs(const ClientFlags& flags) {
  auto stub = v1::Coordinator::NewStub(rpc::MakeChannel(flags.coordinator));
  v1::ListJobsResponse jobs;
  absl::Status status =
      rpc::FromGrpc(stub->ListJobs(rpc::ContextWithTimeout(kCallTimeout).get(), {}, &jobs),
                    absl::StrCat("coordinator ", flags.coordinator));
  if (!status.ok()) return Fail("jobs", status);
  if (flags.json()) {
    std::printf("%s\n", ToJson(jobs).c_str());
    return 0;
  }
  std::printf("%-12s %-20s %-10s %13s %-9s %s\n", "JOB", "NAME", "STATE", "STEP", "LOSS",
              "MESSAGE");
  for (const auto& job : jobs.jobs()) std::printf("%s\n", JobLine(job).c_str());
  return 0;
}

int Actors(const ClientFlags& flags) {
  auto stub = v1::Coordinator::NewStub(rpc::MakeChannel(flags.coordinator));
  v1::ListActorsResponse actors;
  absl::Status status =
      rpc::FromGrpc(stub->ListActors(rpc::ContextWithTimeout(kCallTimeout).get(), {}, &actors),
                    absl::StrCat("coordinator ", flags.coordinator));
  if (!status.ok()) return Fail("actors", status);
  if (flags.json()) {
    std::printf("%s\n", ToJson(actors).c_str());
    return 0;
  }
  // MEMORY comes last, so that scripts reading the earlier columns by position keep working.
  std::printf("%-12s %-8s %-8s %-22s %-6s %-12s %-8s %-10s %-10s %s\n", "ACTOR", "POOL", "DEVICE",
              "ADDRESS", "ALIVE", "JOB", "STEP", "PHASE", "COLLECTIVE", "MEMORY");
  for (const auto& a : actors.actors()) {
    // Every field an actor reported about itself is printed escaped.
    std::string memory = a.memory_bytes() > 0 ? jobspec::FormatBytes(a.memory_bytes()) : "-";
    memory.erase(std::remove(memory.begin(), memory.end(), ' '),
                 memory.end());  // one column: "80.0GiB"
    std::printf("%-12s %-8s %-8s %-22s %-6s %-12s %-8lld %-10s %-10lld %s\n",
                Printable(a.actor_id()).c_str(), Printable(a.pool()).c_str(),
                Printable(a.device()).c_str(), Printable(a.address()).c_str(),
                a.alive() ? "yes" : "no", a.job_id().empty() ? "-" : a.job_id().c_str(),
                static_cast<long long>(a.step()), Printable(a.phase()).c_str(),
                static_cast<long long>(a.last_collective()), memory.c_str());
    // Nothing is scheduled on it until its heartbeats say otherwise.
    if (!a.unhealthy().empty())
      std::printf("  %s unhealthy: %s\n", a.actor_id().c_str(), Printable(a.unhealthy()).c_str());
  }
  return 0;
}

int Logs(const ClientFlags& flags, const std::string& job_id, bool follow) {
  auto stub = v1::Coordinator::NewStub(rpc::MakeChannel(flags.coordinator));
  std::unique_ptr<grpc::ClientContext> context = rpc::NewContext();
  WatchOptions watch;
  watch.progress = stdout;
  watch.interactive = follow && isatty(fileno(stdout)) != 0;
  watch.from_start = true;
  watch.follow = follow;
  watch.json = flags.json();
  absl::StatusOr<v1::Job> job = WatchJob(*stub, context.get(), job_id, watch);
  if (!job.ok()) return Fail("logs", job.status());
  if (follow)
    std::printf("%s", flags.json() ? (ToJson(*job) + "\n").c_str() : DescribeOutcome(*job).c_str());
  return 0;
}

int Cancel(const ClientFlags& flags, const std::string& job_id) {
  auto stub = v1::Coordinator::NewStub(rpc::MakeChannel(flags.coordinator));
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  absl::Status status =
      rpc::FromGrpc(stub->CancelJob(rpc::ContextWithTimeout(kCallTimeout).get(), request, &job),
                    absl::StrCat("coordinator ", flags.coordinator));
  if (!status.ok()) return Fail("cancel", status);
  if (flags.json()) {
    std::printf("%s\n", ToJson(job).c_str());
  } else {
    std::printf("%s %s%s\n", job.job_id().c_str(), StateName(job.state()).c_str(),
                job.state() == v1::JOB_STATE_RUNNING ? " (stopping after the current step)" : "");
  }
  return 0;
}

}  // namespace

void AddClientCommands(CLI::App& app, int* exit_code) {
  struct Flags {
    ClientFlags client;
    std::string path, job_id, run_dir, prune;
    bool wait = false, follow = false, estimate = false;
    int threads = 0;
  };
  auto f = std::make_shared<Flags>();

  CLI::App* submit =
      app.add_subcommand("submit", "Submit a job spec to a coordinator; prints the job id");
  submit->add_option("job", f->path, "Job spec (tandem.v1.JobSpec as JSON)")
      ->required()
      ->check(CLI::ExistingFile);
  submit->add_flag("--wait", f->wait,
                   "Follow the job: progress line, events, and the final summary");
  submit->add_option("--run-dir", f->run_dir,
                     "Output directory, visible to every actor (default <state dir>/jobs/<id> on "
                     "the coordinator)");
  submit
      ->add_option(
          "--threads", f->threads,
          "Intra-op threads per actor, 0 to 1024, for this job only (default: each actor's cores)")
      ->check(CLI::Range(0, 1024));
  submit->add_flag(
      "--estimate", f->estimate,
      "Print each group's estimated memory on one actor (model states, activations, data: the "
      "least it needs, which the coordinator checks against what the pool's actors offer) and "
      "exit without submitting");
  AddClientFlags(submit, &f->client);
  submit->callback([=] {
    *exit_code = WithSecurity("submit", f->client.security, [&] {
      return Submit(f->client, f->path, f->wait, f->run_dir, f->threads, f->estimate);
    });
  });

  CLI::App* status =
      app.add_subcommand("status", "A job's state, progress and actors; without JOB, the queue");
  status->add_option("job", f->job_id, "Job id (job-000001)");
  AddClientFlags(status, &f->client);
  status->callback([=] {
    *exit_code =
        WithSecurity("status", f->client.security, [&] { return Status(f->client, f->job_id); });
  });

  CLI::App* jobs = app.add_subcommand("jobs", "Every job the coordinator knows, oldest first");
  jobs->add_option("--prune", f->prune,
                   "Instead of listing, forget the jobs that ended at least AGE ago (30d, 12h, "
                   "90m, 45s; 0: every "
                   "ended job): their records and event logs leave the state database, their run "
                   "directories stay; "
                   "prints their ids")
      ->type_name("AGE");
  AddClientFlags(jobs, &f->client);
  jobs->callback([=] {
    *exit_code = WithSecurity("jobs", f->client.security, [&] {
      return f->prune.empty() ? Jobs(f->client) : PruneJobs(f->client, f->prune);
    });
  });

  CLI::App* actors =
      app.add_subcommand("actors", "Registered actors: pool, address, liveness, job, step, phase");
  AddClientFlags(actors, &f->client);
  actors->callback([=] {
    *exit_code = WithSecurity("actors", f->client.security, [&] { return Actors(f->client); });
  });

  CLI::App* logs = app.add_subcommand(
      "logs", "A job's event log (state changes, evaluations, checkpoints, errors)");
  logs->add_option("job", f->job_id, "Job id")->required();
  logs->add_flag("-f,--follow", f->follow,
                 "Keep following until the job ends, with the progress line");
  AddClientFlags(logs, &f->client);
  logs->callback([=] {
    *exit_code = WithSecurity("logs", f->client.security,
                              [&] { return Logs(f->client, f->job_id, f->follow); });
  });

  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a queued or running job");
  cancel->add_option("job", f->job_id, "Job id")->required();
  AddClientFlags(cancel, &f->client);
  cancel->callback([=] {
    *exit_code =
        WithSecurity("cancel", f->client.security, [&] { return Cancel(f->client, f->job_id); });
  });
}

}  // namespace tandem::cli
