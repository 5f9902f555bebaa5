// `tandem coordinator` and `tandem actor`: the long-running processes (docs/design.md §1).
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::cli {

void AddServiceCommands(CLI::App& app, int* exit_code);

}  // namespace tandem::cli
