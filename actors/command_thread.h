// One long-lived thread that runs an actor's commands (assign, steps, evaluation, checkpoints,
// export, release), whichever gRPC thread received them. LibTorch's thread-local state, the CPU
// caches and glibc's per-thread malloc arena then stay with the work from one step to the next, as
// in a training loop; on gRPC's pool each step could land on another thread, whose arena holds none
// of the previous step's freed tensors. Ray runs an actor's tasks on one thread for the same
// reason.
//
// Thread-safety: Post, Wait and Run may be called from any thread; commands run one at a time, in
// the order they were posted. A command posted while another runs starts the moment that one
// returns, on the same thread, with no hand-off.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace tandem::actors {

class CommandThread {
 public:
  CommandThread();
  ~CommandThread();  // runs what is queued, then joins
  CommandThread(const CommandThread&) = delete;
  CommandThread& operator=(const CommandThread&) = delete;

  struct Task {
    std::function<void()> command;
    std::string name;   // what running() says: "RunStep 12", "AssignJob", ...
    bool done = false;  // guarded by mu_
  };
  using Ticket = std::shared_ptr<Task>;

  // Queues `command` behind those already queued and returns at once.
  Ticket Post(std::function<void()> command, std::string name = "a command");
  // Returns once the command of `ticket` has returned.
  void Wait(const Ticket& ticket);
  // Runs `command` on the thread and returns once it has returned.
  void Run(std::function<void()> command, std::string name = "a command") {
    Wait(Post(std::move(command), std::move(name)));
  }

  // The command running now and since when; nullopt while the thread waits for one.
  struct Running {
    std::string name;
    std::chrono::steady_clock::time_point since;
  };
  std::optional<Running> running() const;

 private:
  void Loop();

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Ticket> queue_;        // guarded by mu_
  std::optional<Running> running_;  // guarded by mu_
  bool stopping_ = false;           // guarded by mu_
  std::thread thread_;
};

}  // namespace tandem::actors
