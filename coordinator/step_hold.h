// A fault hook for tests (`tandem coordinator --test-hold-dir DIR`): holds a job before a step, so
// a test can act on it (kill an actor or the coordinator, cancel the job) at a known step however
// fast the machine trains.
//
// While the file DIR/<job name>.hold exists and holds a step number S, a job of that name does not
// start step S+1: its runner waits at the boundary where step S is done, whether it trained to S or
// resumed from a checkpoint at S. Removing the file (or writing another step into it) lets the job
// go on. A stopped attempt (cancelled, an actor lost, the coordinator shutting down) ends its wait
// at once. Other jobs, and every job when DIR is not set, are never held.
//
//   held:      file exists, names S, and the job has done step S  --> waits, polling the file
//   released:  file removed, or names another step                --> the job goes on
//   stopped:   Interrupt()                                        --> the wait ends at once
//
// The file holds one decimal step number (whitespace around it is ignored); anything else holds
// nothing. Write it atomically (a temporary file renamed over it), so it is never read half
// written.
//
// Thread-safety: Interrupt may be called from any thread; the rest from one thread (the runner's).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace tandem::coordinator {

class StepHold {
 public:
  // `dir` "" holds nothing. `poll` is how often a held job reads its file again.
  StepHold(const std::string& dir, const std::string& job_name,
           std::chrono::milliseconds poll = std::chrono::milliseconds(25));

  // DIR/<job name>.hold; "" when `dir` is "".
  const std::string& path() const { return path_; }

  // The step the hold file names now, if it exists and names one.
  std::optional<int64_t> HeldStep() const;

  // Waits while the hold file exists and names `step`. Returns true once it does not, false as soon
  // as Interrupt is called (at once when it was called before).
  bool WaitWhileHeld(int64_t step);

  // Ends the current wait and every later one: the attempt is stopping.
  void Interrupt();

 private:
  const std::string path_;
  const std::chrono::milliseconds poll_;
  std::mutex mu_;
  std::condition_variable interrupted_cv_;
  bool interrupted_ = false;  // guarded by mu_
};

}  // namespace tandem::coordinator
