// `tandem run JOB.json [--colocated]`: runs a whole job on this machine, as local service processes
// (cli/embedded_run.h) or in this process (trainer/colocated.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace tandem::cli {

// Adds the `run` subcommand to `app`; its callback sets `*exit_code`. `*log_level` (the global
// --log-level) is passed on to the child processes.
void AddRunCommand(CLI::App& app, const std::string* log_level, int* exit_code);

}  // namespace tandem::cli
