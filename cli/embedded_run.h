// `tandem run JOB.json` (without --colocated): the whole service on this machine. Starts a
// coordinator and the job's actors as child processes on 127.0.0.1 with OS-picked ports, submits
// the job, follows it with the progress line, and stops the children at the end. Ctrl-C
// (SIGINT/SIGTERM) cancels the job and stops them too; the children also die with this process
// (PR_SET_PDEATHSIG), so none is left behind. The children's logs go to a temporary directory that
// is kept, and named, when the run fails.
#pragma once

#include <string>

#include "jobspec/job_spec.h"
#include "rundir/summary.h"

namespace tandem::cli {

struct EmbeddedRunOptions {
  jobspec::ResolvedJobSpec job;  // as jobspec::ReadJobSpecFile read it
  std::string run_dir;           // absolute or relative; must not exist or be empty
  int threads = 0;               // intra-op threads per actor; 0 = cores / actors
  std::string log_level = "info";
  bool json = false;
  bool interactive = false;
  bool local_links = true;  // false: the actors run with --no-local-links
  std::string device =
      "cpu";             // checked by platform::CheckDevice; "cuda" spreads each group's ranks
  int cuda_devices = 0;  // CUDA devices of this host, for "cuda"
  // Testing only: the coordinator's --test-hold-dir (coordinator/step_hold.h); "" for none.
  std::string hold_dir;
};

// Returns the process exit code: 0 when the job succeeded.
int RunEmbedded(const EmbeddedRunOptions& options);

}  // namespace tandem::cli
