#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>

namespace tandem {
namespace {

spdlog::level::level_enum ToSpdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarning:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

// One stderr logger; the component is part of each line. Created on first use.
spdlog::logger& Logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("tandem");
    l->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    l->set_level(spdlog::level::info);
    return l;
  }();
  return *logger;
}

}  // namespace

void ConfigureLogging(LogLevel level) { Logger().set_level(ToSpdlog(level)); }

bool ParseLogLevel(std::string_view text, LogLevel* level) {
  if (text == "debug")
    *level = LogLevel::kDebug;
  else if (text == "info")
    *level = LogLevel::kInfo;
  else if (text == "warning")
    *level = LogLevel::kWarning;
  else if (text == "error")
    *level = LogLevel::kError;
  else
    return false;
  return true;
}

void Log(LogLevel level, std::string_view component, std::string_view message) {
  Logger().log(ToSpdlog(level), "[{}] {}", component, message);
}

}  // namespace tandem
