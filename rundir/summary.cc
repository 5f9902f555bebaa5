#include "rundir/summary.h"

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "rundir/progress.h"

namespace tandem::rundir {

absl::StatusOr<RunSummary> ParseSummaryJson(const std::string& json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("summary: not a JSON object");
  RunSummary s;
  try {
    s.job_name = j.value("job", "");
    s.run_dir = j.value("run_dir", "");
    s.steps = j.value("steps", int64_t{0});
    s.samples = j.value("samples", int64_t{0});
    s.final_loss = j.value("final_loss", 0.0);
    s.evaluated = j.contains("caption_exact_match") && j["caption_exact_match"].is_number();
    if (s.evaluated) {
      s.caption_exact_match = j["caption_exact_match"].get<double>();
      s.token_accuracy = j["token_accuracy"].get<double>();
    }
    s.elapsed_s = j.value("elapsed_s", 0.0);
    s.samples_per_s = j.value("samples_per_s", 0.0);
    s.vision_parameters = j.value("vision_parameters", int64_t{0});
    s.llm_parameters = j.value("llm_parameters", int64_t{0});
    s.vocab_size = j.value("vocab_size", int64_t{0});
    s.last_checkpoint = j.value("last_checkpoint", "");
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(std::string("summary: ") + e.what());
  }
  return s;
}

std::string SummaryJson(const RunSummary& s) {
  nlohmann::ordered_json j;
  j["job"] = s.job_name;
  j["run_dir"] = s.run_dir;
  j["steps"] = s.steps;
  j["samples"] = s.samples;
  j["final_loss"] = s.final_loss;
  if (s.evaluated) {
    j["caption_exact_match"] = s.caption_exact_match;
    j["token_accuracy"] = s.token_accuracy;
  } else {
    j["caption_exact_match"] = nullptr;
    j["token_accuracy"] = nullptr;
  }
  j["elapsed_s"] = s.elapsed_s;
  j["samples_per_s"] = s.samples_per_s;
  j["vision_parameters"] = s.vision_parameters;
  j["llm_parameters"] = s.llm_parameters;
  j["vocab_size"] = s.vocab_size;
  j["last_checkpoint"] = s.last_checkpoint;
  return j.dump();
}

std::string SummaryText(const RunSummary& s) {
  std::string text = absl::StrFormat(
      "%s: %d steps, %d samples in %s (%.1f samples/s)\n"
      "  final loss           %.4f\n",
      s.job_name, s.steps, s.samples, FormatDuration(s.elapsed_s), s.samples_per_s, s.final_loss);
  if (s.evaluated) {
    absl::StrAppendFormat(&text,
                          "  exact match          %.1f%% (held-out)\n"
                          "  token accuracy       %.1f%%\n",
                          100 * s.caption_exact_match, 100 * s.token_accuracy);
  } else {
    text += "  no held-out set: not evaluated\n";
  }
  absl::StrAppendFormat(&text,
                        "  models               vision %.2fM, llm %.2fM parameters, vocabulary %d\n"
                        "  run directory        %s (metrics.jsonl, loss.svg, checkpoints/)\n",
                        s.vision_parameters / 1e6, s.llm_parameters / 1e6, s.vocab_size, s.run_dir);
  return text;
}

}  // namespace tandem::rundir
