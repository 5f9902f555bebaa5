#include "common/process_exit.h"

#include <sys/wait.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

// The cgroup v2 directory of this process ("0::/path" in /proc/self/cgroup).
std::optional<std::string> CgroupDirectory() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> OomKills() {
  const std::optional<std::string> dir = CgroupDirectory();
  if (!dir) return std::nullopt;
  std::ifstream in(*dir + "/memory.events");
  std::string key;
  int64_t value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return std::nullopt;
}

ProcessExit ExitOf(int wait_status, std::optional<int64_t> oom_kills_before) {
  ProcessExit exit;
  if (WIFEXITED(wait_status)) exit.exit_code = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) {
    exit.signal = WTERMSIG(wait_status);
    const std::optional<int64_t> now = OomKills();
    exit.out_of_memory =
        exit.signal == SIGKILL && oom_kills_before && now && *now > *oom_kills_before;
  }
  return exit;
}

std::string DescribeExit(const ProcessExit& exit) {
  if (exit.out_of_memory) {
    return absl::StrCat("killed by the kernel's out-of-memory killer (signal ", exit.signal, ")");
  }
  if (exit.signal != 0) {
    const char* name = sigabbrev_np(exit.signal);
    return absl::StrCat("killed by signal ", exit.signal,
                        name != nullptr ? absl::StrCat(" (SIG", name, ")") : "");
  }
  return absl::StrCat("exited with code ", exit.exit_code);
}

}  // namespace tandem
