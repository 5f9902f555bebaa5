// `tandem submit | status | jobs | actors | logs | cancel`: clients of a running coordinator.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::cli {

void AddClientCommands(CLI::App& app, int* exit_code);

}  // namespace tandem::cli
