// Runs one local process per rank: this same executable again, with "--rank R --store DIR" appended
// to its arguments, DIR a fresh rendezvous directory (see OpenFileStore). Used by the engine demo
// and benchmark; the service's `tandem run` has its own supervisor.
//
// A rank that fails (non-zero exit or signal) makes the launcher terminate the others; ranks
// receive SIGTERM if the launcher dies, so none outlives it.
#pragma once

#include <string>
#include <vector>

namespace tandem {

// Returns 0 when every rank exited 0, else the number of failed ranks (each reported on stderr).
int LaunchLocalRanks(char** argv, int ranks, const std::vector<std::string>& extra_args = {});

}  // namespace tandem
