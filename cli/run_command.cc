#include "cli/run_command.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/embedded_run.h"
#include "common/cpu_features.h"
#include "common/logging.h"
#include "jobspec/job_spec.h"
#include "platform/device.h"
#include "trainer/colocated.h"

namespace tandem::cli {
namespace {

struct RunFlags {
  std::string job_path;
  bool colocated = false;
  std::string run_dir;
  std::string output = "text";
  int threads = 0;
  bool no_local_links = false;
  std::string device = "cpu";
  std::vector<int64_t> profile;  // FIRST LAST, --colocated only
  std::string hold_dir;          // testing only: the coordinator's --test-hold-dir
};

// --colocated's default intra-op threads: $OMP_NUM_THREADS where it is a positive number, else
// every CPU this process may use. Set explicitly because LibTorch's own default differs between
// builds (Debian's 1.13 took one thread on a 2-core machine, the PyPI wheel's both).
int ColocatedThreads() {
  int threads = 0;
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (omp != nullptr && absl::SimpleAtoi(omp, &threads) && threads > 0) return threads;
  return UsableCpus();
}

std::string Timestamp() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof(text), "%Y%m%d-%H%M%S", &local);
  return text;
}

int Run(const RunFlags& flags, const std::string& log_level) {
  absl::StatusOr<jobspec::ResolvedJobSpec> resolved = jobspec::ReadJobSpecFile(flags.job_path);
  if (!resolved.ok()) {
    std::fprintf(stderr, "tandem run: %s\n", std::string(resolved.status().message()).c_str());
    return 2;
  }
  const jobspec::JobConfig* job = &resolved->config;
  const int cuda_devices = flags.device == "cpu" ? 0 : platform::CudaDeviceCount();
  if (absl::Status device = platform::CheckDevice("--device", flags.device, cuda_devices, true);
      !device.ok()) {
    std::fprintf(stderr, "tandem run: %s\n", std::string(device.message()).c_str());
    return 2;
  }
  const std::string run_dir =
      flags.run_dir.empty() ? absl::StrCat("runs/", job->name, "-", Timestamp()) : flags.run_dir;
  const bool terminal = isatty(fileno(stderr)) != 0;
  if (!flags.colocated) {
    EmbeddedRunOptions embedded;
    embedded.job = *resolved;
    embedded.run_dir = run_dir;
    embedded.threads = flags.threads;
    embedded.log_level = log_level;
    embedded.json = flags.output == "json";
    embedded.interactive = terminal;
    embedded.local_links = !flags.no_local_links;
    embedded.hold_dir = flags.hold_dir;
    embedded.device = flags.device;
    embedded.cuda_devices = cuda_devices;
    return RunEmbedded(embedded);
  }
  trainer::RunOptions options;
  options.run_dir = run_dir;
  if (!flags.profile.empty() && flags.profile[1] < flags.profile[0]) {
    std::fprintf(stderr, "tandem run: --profile %lld %lld: LAST must be FIRST or later\n",
                 static_cast<long long>(flags.profile[0]),
                 static_cast<long long>(flags.profile[1]));
    return 2;
  }
  if (!flags.profile.empty()) {
    options.profile_first = flags.profile[0];
    options.profile_last = flags.profile[1];
  }
  options.threads = flags.threads > 0 ? flags.threads : ColocatedThreads();
  options.interactive = terminal;
  options.device = platform::DeviceOfRank(flags.device, 0, cuda_devices);
  options.progress = flags.output == "json" && !terminal ? nullptr : stderr;
  auto summary = trainer::RunColocated(*resolved, options);
  if (!summary.ok()) {
    std::fprintf(stderr, "tandem run: %s: %s\n", job->name.c_str(),
                 std::string(summary.status().message()).c_str());
    return 1;
  }
  if (flags.output == "json") {
    std::printf("%s\n", rundir::SummaryJson(*summary).c_str());
  } else {
    std::printf("%s", rundir::SummaryText(*summary).c_str());
  }
  return 0;
}

}  // namespace

void AddRunCommand(CLI::App& app, const std::string* log_level, int* exit_code) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* run = app.add_subcommand("run",
                                     "Run a training job to the end on this machine: a local "
                                     "coordinator and the job's vision and LLM "
                                     "actors as child processes (job spec: see examples/*.json)");
  run->add_option("job", flags->job_path, "Job spec (tandem.v1.JobSpec as JSON)")
      ->required()
      ->check(CLI::ExistingFile);
  CLI::Option* colocated = run->add_flag(
      "--colocated", flags->colocated,
      "Both models in this process, each under its own engine: the reference that disaggregated "
      "runs are compared with");
  run->add_option(
      "--run-dir", flags->run_dir,
      "Where the run writes job.json, tokenizer.json, metrics.jsonl, loss.svg, checkpoints/ and "
      "the final weights (default runs/<name>-<timestamp>; must not exist or be empty)");
  run->add_option("--output", flags->output,
                  "text: progress line and a summary; json: the summary as one JSON object")
      ->check(CLI::IsMember({"text", "json"}));
  run->add_option(
         "--threads", flags->threads,
         "Intra-op threads (default: $OMP_NUM_THREADS if set, else every CPU this process may use; "
         "without --colocated, per actor: CPUs / actors)")
      ->check(CLI::NonNegativeNumber);
  run->add_flag(
      "--no-local-links", flags->no_local_links,
      "Without --colocated: keep every transfer between the actors on gRPC over loopback instead "
      "of local links (Unix sockets), e.g. to measure what they save");
  run->add_option("--device", flags->device,
                  "cpu, cuda:N (every model on CUDA device N; with one GPU, both groups share it) "
                  "or cuda (without --colocated, the r-th actor of each group on device r mod the "
                  "devices; with it, cuda:0)")
      ->capture_default_str();
  run->add_option(
         "--profile", flags->profile,
         "With --colocated: trace steps FIRST to LAST (LibTorch's profiler: operators, and "
         "on a GPU its kernels) into RUN_DIR/trace.json, a Chrome trace for Perfetto")
      ->expected(2)
      ->needs(colocated)
      ->check([](const std::string& value) {
        int64_t step = 0;
        return absl::SimpleAtoi(value, &step) && step >= 1
                   ? std::string()
                   : std::string("a step number, 1 or more");
      });
  // Testing only: hidden from --help (group ""); coordinator/step_hold.h.
  run->add_option("--test-hold-dir", flags->hold_dir,
                  "Testing: the local coordinator's --test-hold-dir")
      ->group("")
      ->excludes(colocated);
  run->callback([flags, log_level, exit_code] { *exit_code = Run(*flags, *log_level); });
}

}  // namespace tandem::cli
