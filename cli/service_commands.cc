#include "cli/service_commands.h"

#include <algorithm>
#include <limits>
#include <memory>

#include "actors/actor_server.h"
#include "cli/actor_supervisor.h"
#include "cli/security_flags.h"
#include "coordinator/coordinator_server.h"
#include "platform/device.h"

namespace tandem::cli {

void AddServiceCommands(CLI::App& app, int* exit_code) {
  auto coordinator = std::make_shared<coordinator::CoordinatorServerOptions>();
  auto coordinator_security = std::make_shared<rpc::SecurityFlags>();
  auto heartbeat_timeout_s = std::make_shared<double>(10.0);
  auto command_timeout_s = std::make_shared<double>(300.0);
  auto unplaceable_timeout_s = std::make_shared<double>(600.0);
  CLI::App* c = app.add_subcommand("coordinator",
                                   "Run the coordinator: actor registry, job queue, scheduler, "
                                   "rendezvous store and step driver");
  c->add_option("--listen", coordinator->listen, "HOST:PORT to serve on (port 0: the OS picks)")
      ->capture_default_str();
  c->add_option(
       "--state-dir", coordinator->state_dir,
       "Directory of the job database (tandem.db) and of default run directories (jobs/<id>); "
       "a coordinator started again on it resumes the jobs that were running")
      ->capture_default_str();
  c->add_option("--heartbeat-timeout", *heartbeat_timeout_s,
                "Seconds without a heartbeat after which an actor is dead and its job restarts "
                "from its last checkpoint (or fails, with no restarts left)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option(
       "--command-timeout", *command_timeout_s,
       "Seconds any step, transfer, collective or checkpoint may take before the job fails")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--unplaceable-timeout", *unplaceable_timeout_s,
                "Seconds a job may wait for a pool that has fewer actors registered than it needs "
                "before it fails; it holds no jobs behind it meanwhile (busy actors are waited for "
                "without limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->add_option("--metrics-listen", coordinator->metrics_listen,
                "HOST:PORT to serve Prometheus metrics on over HTTP (GET /metrics; /healthz), e.g. "
                "0.0.0.0:9090 (default: not served)");
  c->add_option("--ready-file", coordinator->ready_file,
                "Write the bound HOST:PORT here once serving (and 'metrics HOST:PORT' on a second "
                "line with --metrics-listen)");
  // Testing only: hidden from --help (group ""); coordinator/step_hold.h.
  c->add_option("--test-hold-dir", coordinator->hold_dir,
                "Testing: a job named NAME does not start step S+1 while DIR/NAME.hold exists and "
                "holds S")
      ->group("");
  AddSecurityFlags(c, coordinator_security.get());
  c->callback([=] {
    coordinator->heartbeat_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(*heartbeat_timeout_s * 1000));
    coordinator->command_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(*command_timeout_s * 1000));
    coordinator->unplaceable_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(std::min(*unplaceable_timeout_s, 1e9) * 1000));
    *exit_code = WithSecurity("coordinator", *coordinator_security,
                              [&] { return coordinator::RunCoordinator(*coordinator); });
  });

  auto actor = std::make_shared<actors::ActorOptions>();
  auto actor_security = std::make_shared<rpc::SecurityFlags>();
  auto supervise = std::make_shared<bool>(false);
  CLI::App* a =
      app.add_subcommand("actor", "Run an actor: one rank of a vision or LLM group, in a pool");
  a->add_option("--pool", actor->pool, "Pool to join (a job spec's vision.pool / llm.pool)")
      ->required();
  a->add_option("--coordinator", actor->coordinator, "Coordinator HOST:PORT")
      ->capture_default_str();
  a->add_option("--listen", actor->listen,
                "HOST:PORT for the Actor and Peer services (port 0: the OS picks)")
      ->capture_default_str();
  a->add_option(
      "--advertise", actor->advertise,
      "HOST:PORT other processes reach this actor at (default: the listen host and bound port)");
  a->add_option("--device", actor->device, "cpu or cuda:N")
      ->capture_default_str()
      ->check([](const std::string& device) {
        const int cuda_devices = device == "cpu" ? 0 : platform::CudaDeviceCount();
        absl::Status status = platform::CheckDevice("", device, cuda_devices, false);
        return status.ok() ? std::string() : std::string(status.message());
      });
  a->add_option(
       "--memory", actor->memory_bytes,
       "Memory one job may use on this actor, e.g. 80GiB, 24G, 512MiB (KiB = 1024, kB = 1000); "
       "default: the device's (a GPU's memory, or the host's RAM under its cgroup limit). The "
       "coordinator refuses at submit a job whose group's estimated memory exceeds what its pool's "
       "actors offer, and the actor refuses such an assignment")
      ->transform(CLI::AsSizeValue(/*kb_is_1000=*/true))
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  a->add_option("--ready-file", actor->ready_file,
                "Write this actor's address here once registered");
  a->add_flag(
      "!--no-local-links", actor->local_links,
      "Keep every transfer on gRPC: serve no local endpoint and do not send over local links (Unix "
      "sockets to actors on the same host and network namespace)");
  a->add_flag("--supervise", *supervise,
              "Run the actor as a child process: when it ends, tell the coordinator why (exit "
              "code, signal, out of memory), so its job restarts naming the cause, and start it "
              "again");
  AddSecurityFlags(a, actor_security.get());
  a->callback([=] {
    *exit_code = WithSecurity("actor", *actor_security, [&] {
      if (!*supervise) return actors::RunActor(*actor);
      SupervisedActor supervised;
      supervised.coordinator = actor->coordinator;
      supervised.ready_file = actor->ready_file;
      return SuperviseActor(supervised);
    });
  });
}

}  // namespace tandem::cli
