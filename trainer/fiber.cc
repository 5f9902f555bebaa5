#include "trainer/fiber.h"

#include <ATen/ThreadLocalState.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <utility>

namespace tandem::trainer {

Fiber::Fiber(size_t stack_bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  mapping_bytes_ = (stack_bytes + page - 1) / page * page + page;
  void* mapping = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (mapping == MAP_FAILED) std::abort();  // no address space left for a 16 MiB stack
  mapping_ = static_cast<char*>(mapping);
  mprotect(mapping_, page, PROT_NONE);  // an overflow faults instead of writing below the stack
}

Fiber::~Fiber() { munmap(mapping_, mapping_bytes_); }

void Fiber::Start(std::function<void()> body) {
  body_ = std::move(body);
  finished_ = false;
  getcontext(&fiber_);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  fiber_.uc_stack.ss_sp = mapping_ + page;
  fiber_.uc_stack.ss_size = mapping_bytes_ - page;
  fiber_.uc_link = &caller_;
  const auto self = reinterpret_cast<uintptr_t>(this);
  makecontext(&fiber_, reinterpret_cast<void (*)()>(&Fiber::Entry), 2,
              static_cast<unsigned>(self & 0xffffffffu), static_cast<unsigned>(self >> 32));
}

void Fiber::Entry(unsigned low, unsigned high) {
  auto* fiber = reinterpret_cast<Fiber*>((static_cast<uintptr_t>(high) << 32) | low);
  fiber->body_();
  fiber->finished_ = true;
  // Returning switches to uc_link: the Resume that ran the body last.
}

void Fiber::Resume() {
  const at::ThreadLocalState mine;
  swapcontext(&caller_, &fiber_);
  at::ThreadLocalState::setThreadLocalState(mine);
}

void Fiber::Yield() {
  const at::ThreadLocalState mine;
  swapcontext(&fiber_, &caller_);
  at::ThreadLocalState::setThreadLocalState(mine);
}

}  // namespace tandem::trainer
