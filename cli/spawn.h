// Starting this binary again as a child process: `tandem run`'s local cluster and
// `tandem actor --supervise`'s worker.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::cli {

// Starts this binary with `args` (args[0] is the program name) in its own process group (so a
// terminal's Ctrl-C reaches only the parent, which stops its children in order), dying with the
// parent, with every signal unblocked. stdout and stderr go to `log`, or stay the parent's when
// `log` is "".
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& args, const std::string& log);

// Sends SIGTERM to every child in `pids` (-1 entries are skipped), gives them `grace` to end, kills
// the rest with SIGKILL, and reaps them all.
void StopChildren(const std::vector<pid_t>& pids, std::chrono::seconds grace);

}  // namespace tandem::cli
