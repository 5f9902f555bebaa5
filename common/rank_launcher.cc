#include "common/rank_launcher.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

namespace tandem {

int LaunchLocalRanks(char** argv, int ranks, const std::vector<std::string>& extra_args) {
  char pattern[] = "/tmp/tandem-ranks-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    std::perror("rank launcher: mkdtemp");
    return ranks;
  }
  const std::string store = pattern;
  std::vector<pid_t> children;
  for (int r = 0; r < ranks; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("rank launcher: fork");
      for (pid_t child : children) kill(child, SIGTERM);
      break;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      std::vector<std::string> args;
      for (int i = 0; argv[i] != nullptr; ++i) args.push_back(argv[i]);
      args.insert(args.end(), extra_args.begin(), extra_args.end());
      args.insert(args.end(), {"--rank", std::to_string(r), "--store", store});
      std::vector<char*> raw;
      for (auto& a : args) raw.push_back(a.data());
      raw.push_back(nullptr);
      execv("/proc/self/exe", raw.data());
      std::perror("rank launcher: exec");
      _exit(127);
    }
    children.push_back(pid);
  }
  int failures = static_cast<int>(ranks - children.size());
  for (size_t remaining = children.size(); remaining > 0; --remaining) {
    int status = 0;
    pid_t pid = wait(&status);
    if (pid < 0) break;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    ++failures;
    int rank = 0;
    for (size_t i = 0; i < children.size(); ++i) {
      if (children[i] == pid) rank = static_cast<int>(i);
    }
    if (WIFSIGNALED(status)) {
      std::fprintf(stderr, "rank %d (pid %d) was killed by signal %d; stopping the others\n", rank,
                   pid, WTERMSIG(status));
    } else {
      std::fprintf(stderr, "rank %d (pid %d) exited with code %d; stopping the others\n", rank, pid,
                   WEXITSTATUS(status));
    }
    for (pid_t child : children) {
      if (child != pid) kill(child, SIGTERM);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(store, ec);
  return failures;
}

}  // namespace tandem
