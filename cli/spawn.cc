#include "cli/spawn.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tandem::cli {

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& args, const std::string& log) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork failed: ", std::strerror(errno)));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    if (!log.empty()) {
      if (FILE* out = std::fopen(log.c_str(), "w")) {
        dup2(fileno(out), STDOUT_FILENO);
        dup2(fileno(out), STDERR_FILENO);
      }
    }
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  return pid;
}

void StopChildren(const std::vector<pid_t>& pids, std::chrono::seconds grace) {
  for (pid_t pid : pids) {
    if (pid > 0) kill(pid, SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (pid_t pid : pids) {
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, WNOHANG) != pid) {
      if (std::chrono::steady_clock::now() >= deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      usleep(10000);
    }
  }
}

}  // namespace tandem::cli
