// The live progress line of a training run and its formatting. On a terminal the line is redrawn in
// place ("\r", at most ten times a second); elsewhere (CI logs, pipes) a full line is printed every
// 5% of the run, so logs stay short. Torch-free: `tandem submit --wait` prints the same line.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tandem::rundir {

struct Progress {
  int64_t step = 0;  // optimizer steps done
  int64_t total_steps = 0;
  double loss = 0;
  double samples_per_s = 0;  // smoothed
  double elapsed_s = 0;
  std::string note;  // e.g. "eval" while an evaluation runs; may be empty
};

// "1m05s", "42s", "2h03m".
std::string FormatDuration(double seconds);

// "step  120/1500  loss 0.8123  812.4 samples/s  elapsed 14s  ETA 2m51s".
std::string FormatProgressLine(const Progress& progress);

class ProgressPrinter {
 public:
  // `interactive`: redraw one line in place (true when `out` is a terminal).
  ProgressPrinter(std::FILE* out, bool interactive);
  ~ProgressPrinter() { Finish(); }

  void Update(const Progress& progress);
  // Ends the in-place line (newline), so that what follows starts on a line of its own.
  void Finish();

 private:
  std::FILE* out_;
  bool interactive_;
  bool line_open_ = false;
  int64_t last_printed_bucket_ = -1;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace tandem::rundir
