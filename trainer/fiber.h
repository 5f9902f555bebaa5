// Two (or more) lines of control on one thread: a stackful coroutine on ucontext. The colocated
// trainer runs its two stages as fibers of the caller's thread, so their LibTorch work shares that
// thread's OpenMP team, exactly as one training loop would. (Two threads, each with its own team
// on the same cores, make libgomp throttle its spinning: every parallel region then wakes its
// workers through the kernel, and a small model's step took twice as long.)
//
// A fiber gives the thread back only where it calls Yield; both sides restore LibTorch's
// thread-local state (grad mode, dispatch keys) around a switch, so each sees its own. A switch
// must not happen inside an autocast scope or an OpenMP region (the colocated stages yield only
// while waiting on a transfer, outside both).
//
// Not thread-safe: one thread creates, resumes and (from inside) yields its fibers.
#pragma once

#include <ucontext.h>

#include <cstddef>
#include <functional>

namespace tandem::trainer {

class Fiber {
 public:
  // A stack of `stack_bytes`, with a guard page below it.
  explicit Fiber(size_t stack_bytes = size_t{16} << 20);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Sets `body` to run from its start at the next Resume. REQUIRES: finished(). `body` must not
  // throw.
  void Start(std::function<void()> body);
  // Runs the fiber until it yields or its body returns.
  void Resume();
  // From inside the fiber's body: back to the Resume that ran it.
  void Yield();
  bool finished() const { return finished_; }

 private:
  static void Entry(unsigned low, unsigned high);

  char* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  ucontext_t fiber_{};
  ucontext_t caller_{};
  std::function<void()> body_;
  bool finished_ = true;
};

}  // namespace tandem::trainer
