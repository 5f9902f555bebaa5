// Helpers shared by the transport tests: tags, owned tensors with recognisable bytes, and a thread
// that has provably started before the test goes on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/tensor_bytes.h"
#include "transport/transport.h"

namespace tandem::transport::testing {

inline TransferTag Tag(int64_t step, TransferKind kind = TransferKind::kEmbeddings,
                       std::string job = "job-1") {
  TransferTag tag;
  tag.job_id = std::move(job);
  tag.kind = kind;
  tag.step = step;
  tag.micro_batch = 0;
  tag.sample_begin = 0;
  tag.sample_end = 2;
  tag.source_rank = 0;
  return tag;
}

// A tensor that owns its bytes.
struct Tensor {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;

  TensorBytes view() { return TensorBytes{dtype, shape, bytes.data(), bytes.size()}; }
  std::string_view span(size_t offset, size_t size) const {
    return std::string_view(reinterpret_cast<const char*>(bytes.data()) + offset, size);
  }
};

inline Tensor Zeros(DType dtype, std::vector<int64_t> shape) {
  const int64_t elements =
      std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  return Tensor{dtype, std::move(shape), std::vector<std::byte>(elements * DTypeSize(dtype))};
}

// Bytes that differ from their neighbours and from another seed's, so a misplaced chunk shows.
inline Tensor Pattern(DType dtype, std::vector<int64_t> shape, uint32_t seed = 1) {
  Tensor tensor = Zeros(dtype, std::move(shape));
  uint32_t state = seed * 2654435761u + 12345u;
  for (std::byte& b : tensor.bytes) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<std::byte>(state >> 24);
  }
  return tensor;
}

// Runs `fn` on a thread and returns once the thread is running (not necessarily inside `fn`'s wait
// yet).
template <typename Fn>
auto StartThread(Fn fn) {
  std::promise<void> started;
  std::future<void> running = started.get_future();
  auto result =
      std::async(std::launch::async, [fn = std::move(fn), started = std::move(started)]() mutable {
        started.set_value();
        return fn();
      });
  running.wait();
  return result;
}

// Runs `await` on a thread, then `cancel`, and returns what `await` returned. `prepare` sets up the
// expectation; the whole repeats in the rare case that `cancel` ran before the wait began (the
// await then found nothing to wait for: NotFound).
template <typename Prepare, typename Await, typename Cancel>
absl::Status AwaitThenCancel(Prepare prepare, Await await, Cancel cancel) {
  for (;;) {
    if (absl::Status status = prepare(); !status.ok()) return status;
    auto awaited = StartThread(await);
    cancel();
    absl::Status status = awaited.get();
    if (status.code() != absl::StatusCode::kNotFound) return status;
  }
}

}  // namespace tandem::transport::testing
