// `tandem coordinator` and `tandem actor`: the long-running processes (DESIGN §1).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace tandem::cli {

// `log_level` is the root --log-level, which a supervised actor's child process gets too.
void AddServiceCommands(CLI::App& app, const std::string* log_level, int* exit_code);

}  // namespace tandem::cli
