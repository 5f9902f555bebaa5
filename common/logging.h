// Logging for every Tandem component, without pulling spdlog (or fmt) into the includer.
//
// Torch translation units must not see spdlog's headers (a pip LibTorch ships its own fmt, which
// would shadow the system one: docs/design.md §6), so this header declares plain functions and
// logging.cc, which never sees a LibTorch header, forwards them to spdlog. Each line carries the
// component name; callers put the identity (job, role, rank, step) in the message. Configure once
// in main with ConfigureLogging.
//
// Thread-safe: spdlog loggers are created with the multi-threaded sinks.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace tandem {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

// Sets the minimum level printed (to stderr) for all components. Call from main only.
void ConfigureLogging(LogLevel level);

// Parses "debug", "info", "warning" or "error"; returns false for anything else.
bool ParseLogLevel(std::string_view text, LogLevel* level);

// Writes one line: "[time] [level] [component] message".
void Log(LogLevel level, std::string_view component, std::string_view message);

// Builds a message with operator<< and logs it when it goes out of scope:
//   TANDEM_LOG(kInfo, "engine") << "rank " << rank << " ready";
class LogLine {
 public:
  LogLine(LogLevel level, std::string_view component) : level_(level), component_(component) {}
  ~LogLine() { Log(level_, component_, stream_.str()); }
  template <typename T>
  LogLine& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  LogLevel level_;
  std::string_view component_;
  std::ostringstream stream_;
};

}  // namespace tandem

#define TANDEM_LOG(level, component) ::tandem::LogLine(::tandem::LogLevel::level, component)
