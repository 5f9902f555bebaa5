#include "actors/command_thread.h"

namespace tandem::actors {

CommandThread::CommandThread() : thread_([this] { Loop(); }) {}

CommandThread::~CommandThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

CommandThread::Ticket CommandThread::Post(std::function<void()> command, std::string name) {
  auto task = std::make_shared<Task>();
  task->command = std::move(command);
  task->name = std::move(name);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(task);
  }
  changed_.notify_all();
  return task;
}

void CommandThread::Wait(const Ticket& ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return ticket->done; });
}

std::optional<CommandThread::Running> CommandThread::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

void CommandThread::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    Ticket task = queue_.front();
    queue_.pop_front();
    running_ = Running{task->name, std::chrono::steady_clock::now()};
    lock.unlock();
    task->command();
    lock.lock();
    running_.reset();
    task->done = true;
    changed_.notify_all();
  }
}

}  // namespace tandem::actors
