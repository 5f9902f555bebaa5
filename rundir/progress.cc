#include "rundir/progress.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace tandem::rundir {

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

std::string FormatProgressLine(const Progress& p) {
  const int width = static_cast<int>(absl::StrFormat("%d", p.total_steps).size());
  std::string line =
      absl::StrFormat("step %*d/%d  loss %.4f  %.1f samples/s  elapsed %s", width, p.step,
                      p.total_steps, p.loss, p.samples_per_s, FormatDuration(p.elapsed_s));
  if (p.step > 0 && p.step < p.total_steps) {
    const double eta =
        p.elapsed_s / static_cast<double>(p.step) * static_cast<double>(p.total_steps - p.step);
    line += "  ETA " + FormatDuration(eta);
  }
  if (!p.note.empty()) line += "  (" + p.note + ")";
  return line;
}

ProgressPrinter::ProgressPrinter(std::FILE* out, bool interactive)
    : out_(out), interactive_(interactive) {}

void ProgressPrinter::Update(const Progress& progress) {
  if (out_ == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = progress.step >= progress.total_steps;
  if (interactive_) {
    if (!last && progress.note.empty() && line_open_ &&
        now - last_draw_ < std::chrono::milliseconds(100))
      return;
    std::fprintf(out_, "\r%s\033[K", FormatProgressLine(progress).c_str());
    line_open_ = true;
  } else {
    const int64_t bucket = progress.total_steps > 0 ? progress.step * 20 / progress.total_steps : 0;
    if (bucket == last_printed_bucket_ && !last) return;
    last_printed_bucket_ = bucket;
    std::fprintf(out_, "%s\n", FormatProgressLine(progress).c_str());
  }
  last_draw_ = now;
  std::fflush(out_);
}

void ProgressPrinter::Finish() {
  if (out_ != nullptr && line_open_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    line_open_ = false;
  }
}

}  // namespace tandem::rundir
