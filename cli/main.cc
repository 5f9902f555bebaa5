// tandem: one binary, one subcommand per verb (docs/design.md §1): run, coordinator, actor, submit,
// status, jobs, actors, logs, cancel, doctor, export, generate, tokenize, data.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/client_commands.h"
#include "cli/data_command.h"
#include "cli/doctor_command.h"
#include "cli/export_command.h"
#include "cli/generate_command.h"
#include "cli/run_command.h"
#include "cli/service_commands.h"
#include "cli/tokenize_command.h"
#include "common/blas_info.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "platform/bf16_support.h"

int main(int argc, char** argv) {
  tandem::TuneMallocForLargeBuffers();
  CLI::App app{
      "Tandem: multimodal training with the vision encoder and the LLM in separate actor groups, "
      "each on a low-precision ZeRO engine."};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warning or error")
      ->check(CLI::IsMember({"debug", "info", "warning", "error"}));
  app.parse_complete_callback([&app, &log_level] {
    tandem::LogLevel level = tandem::LogLevel::kInfo;
    tandem::ParseLogLevel(log_level, &level);
    tandem::ConfigureLogging(level);
    // How this process treats its CPU's bf16 (platform/bf16_support.h), before any LibTorch work.
    const absl::Status bf16 = tandem::platform::ApplyCpuBf16OverrideFromEnvironment();
    if (!bf16.ok()) throw CLI::ValidationError("environment", std::string(bf16.message()));
    // The commands that train say once when LibTorch runs on a slow BLAS.
    if (app.got_subcommand("run") || app.got_subcommand("actor")) tandem::WarnIfSlowBlas();
  });
  int exit_code = 0;
  tandem::cli::AddRunCommand(app, &log_level, &exit_code);
  tandem::cli::AddServiceCommands(app, &exit_code);
  tandem::cli::AddClientCommands(app, &exit_code);
  tandem::cli::AddDoctorCommand(app, &exit_code);
  tandem::cli::AddExportCommand(app, &exit_code);
  tandem::cli::AddGenerateCommand(app, &exit_code);
  tandem::cli::AddTokenizeCommand(app, &exit_code);
  tandem::cli::AddDataCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the error (or the help) and names its own codes (105, 109, ...); every usage
    // error leaves with 2, as --help and the README say and `tandem actor --supervise` expects.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
