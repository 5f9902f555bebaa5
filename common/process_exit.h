// Why a child process ended, told rather than guessed: its exit code, the signal that killed it,
// and whether the kernel's out-of-memory killer did it (the cgroup's `memory.events` oom_kill count
// rose meanwhile; cgroup v2, as under Kubernetes and systemd).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace tandem {

struct ProcessExit {
  int exit_code = -1;          // when it exited by itself; else -1
  int signal = 0;              // the signal that killed it; else 0
  bool out_of_memory = false;  // killed by the OOM killer
};

// From waitpid's status; `oom_kills_before` is OomKills() taken when the child started.
ProcessExit ExitOf(int wait_status, std::optional<int64_t> oom_kills_before);

// "exited with code 3", "killed by signal 9 (SIGKILL)", "killed by the kernel's out-of-memory
// killer (signal 9)".
std::string DescribeExit(const ProcessExit& exit);

// The oom_kill count of this process's cgroup (v2); nullopt when it cannot be read.
std::optional<int64_t> OomKills();

}  // namespace tandem
