#include "engine/memory.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace tandem::engine {
namespace {

int64_t ReadStatusKilobytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream fields(line.substr(field.size() + 1));
      int64_t kb = 0;
      fields >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

std::string Mib(int64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.2f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buffer;
}

}  // namespace

int64_t PeakResidentBytes() { return ReadStatusKilobytes("VmHWM"); }
int64_t CurrentResidentBytes() { return ReadStatusKilobytes("VmRSS"); }

std::string FormatMemoryTable(const std::vector<MemoryReport>& reports) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-5s %12s %12s %12s %12s %12s %8s %12s\n", "rank",
                "params MiB", "grads MiB", "master MiB", "optim MiB", "total MiB", "B/param",
                "peak MiB");
  out << line;
  for (const auto& r : reports) {
    std::snprintf(line, sizeof(line), "%-5d %12s %12s %12s %12s %12s %8.2f %12s\n", r.rank,
                  Mib(r.param_bytes).c_str(), Mib(r.grad_bytes).c_str(),
                  Mib(r.master_bytes).c_str(), Mib(r.optimizer_bytes).c_str(),
                  Mib(r.model_state_bytes()).c_str(), r.bytes_per_parameter(),
                  (Mib(r.peak_bytes) + " " + r.peak_source).c_str());
    out << line;
  }
  return out.str();
}

}  // namespace tandem::engine
