// `tandem run JOB.json --colocated`: runs a whole job in this process (trainer/colocated.h).
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::cli {

// Adds the `run` subcommand to `app`; its callback sets `*exit_code`.
void AddRunCommand(CLI::App& app, int* exit_code);

}  // namespace tandem::cli
