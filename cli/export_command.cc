#include "cli/export_command.h"

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "hf/export.h"

namespace tandem::cli {
namespace {

// "5GB", "500MB", "200KB" (powers of 1000, as transformers' max_shard_size) or a byte count.
bool ParseSize(const std::string& text, int64_t* bytes) {
  const std::string upper = absl::AsciiStrToUpper(text);
  int64_t scale = 1;
  std::string digits = upper;
  for (const auto& [suffix, factor] :
       {std::pair<const char*, int64_t>{"GB", 1000000000}, {"MB", 1000000}, {"KB", 1000}}) {
    const std::string s(suffix);
    if (upper.size() > s.size() && upper.compare(upper.size() - s.size(), s.size(), s) == 0) {
      digits = upper.substr(0, upper.size() - s.size());
      scale = factor;
      break;
    }
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value) || value <= 0) return false;
  *bytes = value * scale;
  return true;
}

}  // namespace

void AddExportCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<hf::ExportOptions>();
  auto format = std::make_shared<std::string>();
  auto shard = std::make_shared<std::string>("5GB");
  CLI::App* command = app.add_subcommand("export",
                                         "Write a finished run as a Hugging Face LLaVA directory "
                                         "(config, sharded safetensors, tokenizer, "
                                         "preprocessor config)");
  command
      ->add_option(
          "run_dir", options->run_dir,
          "The run directory (it holds job.json and the final weights), or one of its checkpoints "
          "(RUN_DIR/checkpoints/step-N)")
      ->required();
  command->add_option("out_dir", options->out_dir, "The directory to write; it must not exist")
      ->required();
  command->add_option("--format", *format, "hf: Hugging Face transformers' LLaVA layout")
      ->required()
      ->check(CLI::IsMember({"hf"}));
  command
      ->add_option("--max-shard-size", *shard,
                   "Largest safetensors file, as transformers' max_shard_size")
      ->capture_default_str();
  command->callback([=] {
    if (!ParseSize(*shard, &options->max_shard_bytes)) {
      throw CLI::ValidationError("--max-shard-size",
                                 "must be a positive byte count or end in KB, MB or GB: " + *shard);
    }
    const absl::Status status = hf::ExportRunAsLlava(*options);
    if (!status.ok()) {
      std::fprintf(stderr, "tandem export: %s\n", std::string(status.message()).c_str());
      *exit_code = 1;
      return;
    }
    std::printf("%s\n", options->out_dir.c_str());
    *exit_code = 0;
  });
}

}  // namespace tandem::cli
