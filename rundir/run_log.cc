#include "rundir/run_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tandem::rundir {

namespace {

// JSON numbers must be finite; a diverged loss is written as null rather than an invalid document.
nlohmann::json Number(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

// Records are read keeping their keys' order (a mixture's samples_by_source is in its sources').
double NumberOr(const nlohmann::ordered_json& object, const char* key, double fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : fallback;
}

// The numbers of a list under `key`; empty when absent (records written before it existed).
std::vector<double> NumbersOr(const nlohmann::ordered_json& object, const char* key) {
  std::vector<double> out;
  auto it = object.find(key);
  if (it == object.end() || !it->is_array()) return out;
  for (const auto& value : *it) out.push_back(value.is_number() ? value.get<double>() : 0.0);
  return out;
}

}  // namespace

std::string StepRecordJson(const StepRecord& r) {
  nlohmann::ordered_json j;
  j["step"] = r.step;
  j["loss"] = Number(r.loss);
  j["lr"] = r.lr;
  j["vision_lr"] = r.vision_lr;
  j["grad_norm"] = Number(r.grad_norm);
  j["vision_grad_norm"] = Number(r.vision_grad_norm);
  j["llm_grad_norm"] = Number(r.llm_grad_norm);
  j["samples_per_s"] = Number(r.samples_per_s);
  j["elapsed_s"] = r.elapsed_s;
  j["vision_compute_s"] = r.vision_compute_s;
  j["llm_compute_s"] = r.llm_compute_s;
  j["vision_imbalance"] = Number(r.vision_imbalance);
  j["llm_imbalance"] = Number(r.llm_imbalance);
  j["vision_planned_imbalance"] = Number(r.vision_planned_imbalance);
  j["llm_planned_imbalance"] = Number(r.llm_planned_imbalance);
  j["padding_waste"] = Number(r.padding_waste);
  j["skipped_samples"] = r.skipped_samples;
  if (!r.samples_by_source.empty()) {
    nlohmann::ordered_json sources = nlohmann::ordered_json::object();
    for (const auto& [name, count] : r.samples_by_source) sources[name] = count;
    j["samples_by_source"] = sources;
  }
  return j.dump();
}

std::string EvalRecordJson(const EvalRecord& r) {
  nlohmann::ordered_json inner;
  inner["step"] = r.step;
  inner["caption_exact_match"] = r.caption_exact_match;
  inner["token_accuracy"] = r.token_accuracy;
  nlohmann::ordered_json j;
  j["eval"] = inner;
  return j.dump();
}

absl::StatusOr<MetricsLog> MetricsLog::Open(const std::string& path) {
  // Not through a symlink: the run directory is the job's, and a link in it may point anywhere.
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  std::FILE* file = fd < 0 ? nullptr : ::fdopen(fd, "a");
  if (file == nullptr) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot open for writing: ", std::strerror(error)));
  }
  return MetricsLog(path, file);
}

absl::StatusOr<MetricsLog> MetricsLog::OpenResumed(const std::string& path, int64_t last_step) {
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  if (std::filesystem::exists(path)) RETURN_IF_ERROR(ReadMetrics(path, &steps, &evals));
  auto later = [&](const auto& record) { return record.step > last_step; };
  steps.erase(std::remove_if(steps.begin(), steps.end(), later), steps.end());
  evals.erase(std::remove_if(evals.begin(), evals.end(), later), evals.end());
  // Records are written back in step order, each evaluation after the step it follows.
  std::string kept;
  size_t e = 0;
  for (const StepRecord& step : steps) {
    for (; e < evals.size() && evals[e].step < step.step; ++e)
      kept += EvalRecordJson(evals[e]) + "\n";
    kept += StepRecordJson(step) + "\n";
    for (; e < evals.size() && evals[e].step == step.step; ++e)
      kept += EvalRecordJson(evals[e]) + "\n";
  }
  for (; e < evals.size(); ++e) kept += EvalRecordJson(evals[e]) + "\n";
  RETURN_IF_ERROR(WriteFileAtomically(path, kept));
  ASSIGN_OR_RETURN(MetricsLog log, Open(path));
  log.steps_ = std::move(steps);
  log.evals_ = std::move(evals);
  return log;
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::exchange(other.file_, nullptr)),
      steps_(std::move(other.steps_)),
      evals_(std::move(other.evals_)) {}

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept {
  if (this != &other) {
    if (file_ != nullptr) std::fclose(file_);
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, nullptr);
    steps_ = std::move(other.steps_);
    evals_ = std::move(other.evals_);
  }
  return *this;
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status MetricsLog::WriteLine(const std::string& line) {
  if (std::fputs(line.c_str(), file_) < 0 || std::fputc('\n', file_) == EOF ||
      std::fflush(file_) != 0) {
    return absl::UnavailableError(absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status MetricsLog::Sync() {
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) {
    return absl::UnavailableError(absl::StrCat(path_, ": fsync failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status MetricsLog::Append(const StepRecord& record) {
  steps_.push_back(record);
  return WriteLine(StepRecordJson(record));
}

absl::Status MetricsLog::Append(const EvalRecord& record) {
  evals_.push_back(record);
  return WriteLine(EvalRecordJson(record));
}

absl::Status ReadMetrics(const std::string& path, std::vector<StepRecord>* steps,
                         std::vector<EvalRecord>* evals, bool* torn_tail) {
  ASSIGN_OR_RETURN(const std::string contents, ReadUserFile(path));
  const std::vector<absl::string_view> lines = absl::StrSplit(contents, '\n');
  // The last line with anything in it (NULs and spaces are nothing) is the only one allowed torn.
  size_t last = lines.size();
  while (last > 0 && lines[last - 1].find_first_not_of(absl::string_view("\0 \r\t", 4)) ==
                         absl::string_view::npos)
    --last;
  if (torn_tail != nullptr) *torn_tail = false;
  for (size_t i = 0; i < last; ++i) {
    const size_t line_number = i + 1;
    if (lines[i].empty()) continue;
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(lines[i].begin(), lines[i].end(),
                                                             nullptr, /*allow_exceptions=*/false);
    const bool record =
        j.is_object() && ((j.contains("eval") && j["eval"].is_object()) || j.contains("step"));
    if (!record && i + 1 == last) {
      if (torn_tail != nullptr) *torn_tail = true;
      break;
    }
    if (!j.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": not a JSON object"));
    }
    if (auto it = j.find("eval"); it != j.end() && it->is_object()) {
      evals->push_back({static_cast<int64_t>(NumberOr(*it, "step", 0)),
                        NumberOr(*it, "caption_exact_match", 0),
                        NumberOr(*it, "token_accuracy", 0)});
    } else if (j.contains("step")) {
      StepRecord r;
      r.step = static_cast<int64_t>(NumberOr(j, "step", 0));
      r.loss = NumberOr(j, "loss", NAN);
      r.lr = NumberOr(j, "lr", 0);
      r.vision_lr = NumberOr(j, "vision_lr", 0);
      r.grad_norm = NumberOr(j, "grad_norm", NAN);
      r.vision_grad_norm = NumberOr(j, "vision_grad_norm", NAN);
      r.llm_grad_norm = NumberOr(j, "llm_grad_norm", NAN);
      r.samples_per_s = NumberOr(j, "samples_per_s", 0);
      r.elapsed_s = NumberOr(j, "elapsed_s", 0);
      r.vision_compute_s = NumbersOr(j, "vision_compute_s");
      r.llm_compute_s = NumbersOr(j, "llm_compute_s");
      r.vision_imbalance = NumberOr(j, "vision_imbalance", 0);
      r.llm_imbalance = NumberOr(j, "llm_imbalance", 0);
      r.vision_planned_imbalance = NumberOr(j, "vision_planned_imbalance", 0);
      r.llm_planned_imbalance = NumberOr(j, "llm_planned_imbalance", 0);
      r.padding_waste = NumberOr(j, "padding_waste", 0);
      r.skipped_samples = static_cast<int64_t>(NumberOr(j, "skipped_samples", 0));
      if (const auto sources = j.find("samples_by_source");
          sources != j.end() && sources->is_object()) {
        for (const auto& [name, count] : sources->items()) {
          if (count.is_number_integer())
            r.samples_by_source.emplace_back(name, count.get<int64_t>());
        }
      }
      steps->push_back(r);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": neither a step nor an eval record"));
    }
  }
  return absl::OkStatus();
}

namespace {

constexpr double kWidth = 760, kHeight = 420;
constexpr double kLeft = 70, kRight = 70, kTop = 44, kBottom = 48;

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Tick(double value) {
  if (value != 0 && (std::fabs(value) < 1e-2 || std::fabs(value) >= 1e4)) {
    return absl::StrFormat("%.0e", value);
  }
  return absl::StrFormat("%g", value);
}

}  // namespace

std::string RenderLossSvg(const std::string& title, const std::vector<StepRecord>& steps,
                          const std::vector<EvalRecord>& evals) {
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  int64_t max_step = 1;
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& s : steps) {
    max_step = std::max(max_step, s.step);
    if (std::isfinite(s.loss) && s.loss > 0) {
      lo = std::min(lo, s.loss);
      hi = std::max(hi, s.loss);
    }
  }
  for (const auto& e : evals) max_step = std::max(max_step, e.step);
  if (!(lo <= hi)) lo = 0.1, hi = 1;
  const bool log_scale = hi / lo > 10;
  double y_lo, y_hi;
  if (log_scale) {
    y_lo = std::pow(10, std::floor(std::log10(lo)));
    y_hi = std::pow(10, std::ceil(std::log10(hi)));
  } else {
    y_lo = 0;
    y_hi = hi * 1.1;
  }
  auto x_of = [&](double step) { return kLeft + plot_w * step / static_cast<double>(max_step); };
  auto y_of_loss = [&](double loss) {
    double f = log_scale
                   ? (std::log10(loss) - std::log10(y_lo)) / (std::log10(y_hi) - std::log10(y_lo))
                   : (loss - y_lo) / (y_hi - y_lo);
    return kTop + plot_h * (1 - std::clamp(f, 0.0, 1.0));
  };
  auto y_of_acc = [&](double acc) { return kTop + plot_h * (1 - std::clamp(acc, 0.0, 1.0)); };

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f "
      "%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"24\" font-size=\"15\" font-weight=\"bold\">%s</text>\n",
      kWidth, kHeight, kWidth, kHeight, kLeft, Escape(title));
  // Frame, grid and ticks.
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                        "stroke=\"#444\"/>\n",
                        kLeft, kTop, plot_w, plot_h);
  for (int i = 0; i <= 5; ++i) {
    const double step = max_step * i / 5.0, x = x_of(step);
    absl::StrAppendFormat(
        &svg, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", x, kTop,
        x, kTop + plot_h);
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x,
                          kTop + plot_h + 16, Tick(std::round(step)));
  }
  absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n",
                        kLeft + plot_w / 2, kHeight - 10);
  std::vector<double> loss_ticks;
  if (log_scale) {
    for (double v = y_lo; v <= y_hi * 1.0001; v *= 10) loss_ticks.push_back(v);
  } else {
    for (int i = 0; i <= 5; ++i) loss_ticks.push_back(y_lo + (y_hi - y_lo) * i / 5);
  }
  for (double v : loss_ticks) {
    const double y = y_of_loss(v);
    absl::StrAppendFormat(
        &svg, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", kLeft, y,
        kLeft + plot_w, y);
    absl::StrAppendFormat(
        &svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#1f77b4\">%s</text>\n",
        kLeft - 6, y + 4, Tick(log_scale ? v : std::round(v * 1000) / 1000));
  }
  absl::StrAppendFormat(
      &svg,
      "<text transform=\"translate(16 %.1f) rotate(-90)\" text-anchor=\"middle\" fill=\"#1f77b4\">"
      "training loss%s</text>\n",
      kTop + plot_h / 2, log_scale ? " (log)" : "");
  if (!evals.empty()) {
    for (int i = 0; i <= 4; ++i) {
      const double v = i / 4.0;
      absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#d62728\">%s</text>\n",
                            kLeft + plot_w + 6, y_of_acc(v) + 4, Tick(v));
    }
    absl::StrAppendFormat(&svg,
                          "<text transform=\"translate(%.1f %.1f) rotate(90)\" "
                          "text-anchor=\"middle\" fill=\"#d62728\">"
                          "held-out accuracy</text>\n",
                          kWidth - 16, kTop + plot_h / 2);
  }
  // The loss: each step faint, and an exponential moving average (in log space when the axis is) on
  // top.
  std::string points, smooth_points;
  double smooth = NAN;
  const double alpha = std::clamp(20.0 / std::max<double>(1, steps.size()), 0.02, 1.0);
  for (const auto& s : steps) {
    if (!std::isfinite(s.loss) || s.loss <= 0) continue;
    absl::StrAppendFormat(&points, "%.1f,%.1f ", x_of(s.step), y_of_loss(s.loss));
    const double v = log_scale ? std::log(s.loss) : s.loss;
    smooth = std::isnan(smooth) ? v : (1 - alpha) * smooth + alpha * v;
    absl::StrAppendFormat(&smooth_points, "%.1f,%.1f ", x_of(s.step),
                          y_of_loss(log_scale ? std::exp(smooth) : smooth));
  }
  absl::StrAppendFormat(
      &svg, "<polyline fill=\"none\" stroke=\"#aec7e8\" stroke-width=\"1\" points=\"%s\"/>\n",
      points);
  absl::StrAppendFormat(
      &svg, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"%s\"/>\n",
      smooth_points);
  // The evaluations.
  auto series = [&](auto value, const char* color, const char* dash) {
    std::string pts;
    for (const auto& e : evals) {
      const double x = x_of(e.step), y = y_of_acc(value(e));
      absl::StrAppendFormat(&pts, "%.1f,%.1f ", x, y);
      absl::StrAppendFormat(&svg, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", x, y,
                            color);
    }
    absl::StrAppendFormat(&svg,
                          "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                          "stroke-dasharray=\"%s\" points=\"%s\"/>\n",
                          color, dash, pts);
  };
  if (!evals.empty()) {
    series([](const EvalRecord& e) { return e.caption_exact_match; }, "#d62728", "none");
    series([](const EvalRecord& e) { return e.token_accuracy; }, "#ff9896", "4 3");
  }
  // Legend, on a white box so curves do not run through its text.
  double lx = kLeft + 10, ly = kTop + 14;
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"290\" height=\"%d\" fill=\"white\" "
                        "fill-opacity=\"0.85\"/>\n",
                        lx - 4, ly - 12, evals.empty() ? 20 : 52);
  auto legend = [&](const char* color, const char* dash, const std::string& label) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                          "stroke-width=\"2\" stroke-dasharray=\"%s\"/>\n",
                          lx, ly - 4, lx + 22, ly - 4, color, dash);
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx + 28, ly,
                          Escape(label));
    ly += 16;
  };
  legend("#1f77b4", "none", "training loss (smoothed; faint: per step)");
  if (!evals.empty()) {
    legend("#d62728", "none",
           absl::StrFormat("exact match (last %.3f)", evals.back().caption_exact_match));
    legend("#ff9896", "4 3",
           absl::StrFormat("token accuracy (last %.3f)", evals.back().token_accuracy));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace tandem::rundir
