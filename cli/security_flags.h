// --token-file, --tls-cert, --tls-key and --tls-ca, the same on every subcommand that serves or
// calls (rpc/security.h).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "rpc/security.h"

namespace tandem::cli {

void AddSecurityFlags(CLI::App* command, rpc::SecurityFlags* flags);

// Loads and installs `flags`, then returns run()'s exit code; when they cannot be loaded, prints
// "tandem <command>: <what is wrong>" and returns 2.
int WithSecurity(const std::string& command, const rpc::SecurityFlags& flags,
                 const std::function<int()>& run);

}  // namespace tandem::cli
