// One process drives every GPU: ncclCommInitAll makes a communicator per device, and each
// iteration issues one ncclAllReduce per device between ncclGroupStart and ncclGroupEnd (one thread
// may not issue them one after another: each waits for the others). The buffers are LibTorch
// tensors on each device's current stream, which the all-reduces use too, so the fill precedes
// them.
#ifdef TANDEM_HAVE_NCCL

#include "platform/nccl_probe.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::platform {
namespace {

constexpr int kWarmUp = 3;

absl::Status CudaStatus(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", call, ": ",
                                          cudaGetErrorName(error), " (", cudaGetErrorString(error),
                                          ")"));
}

absl::Status NcclStatus(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(file, ":", line, ": ", call, ": ", ncclGetErrorString(result)));
}

#define TANDEM_PROBE_CUDA(call) CudaStatus((call), #call, __FILE__, __LINE__)
#define TANDEM_PROBE_NCCL(call) NcclStatus((call), #call, __FILE__, __LINE__)

// The communicators of one ncclCommInitAll, destroyed (or aborted, after a failure) at the end.
struct Communicators {
  std::vector<ncclComm_t> comms;
  bool failed = false;
  ~Communicators() {
    for (ncclComm_t comm : comms) {
      if (comm != nullptr) (void)(failed ? ncclCommAbort(comm) : ncclCommDestroy(comm));
    }
  }
};

absl::StatusOr<AllReduceSpeed> Measure(int gpus, int64_t bytes, int iterations) {
  const int64_t count = bytes / static_cast<int64_t>(sizeof(float));
  std::vector<int> devices(gpus);
  for (int i = 0; i < gpus; ++i) devices[i] = i;
  Communicators communicators;
  communicators.comms.assign(gpus, nullptr);
  RETURN_IF_ERROR(
      TANDEM_PROBE_NCCL(ncclCommInitAll(communicators.comms.data(), gpus, devices.data())));
  communicators.failed = true;  // until the end is reached

  std::vector<at::Tensor> send, receive;
  std::vector<cudaStream_t> streams;
  for (int i = 0; i < gpus; ++i) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(i));
    const auto options = at::TensorOptions().device(at::kCUDA, i).dtype(at::kFloat);
    send.push_back(at::ones({count}, options));
    receive.push_back(at::empty({count}, options));
    streams.push_back(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(i)).stream());
  }
  auto run = [&](int times) -> absl::Status {
    for (int t = 0; t < times; ++t) {
      RETURN_IF_ERROR(TANDEM_PROBE_NCCL(ncclGroupStart()));
      absl::Status issued;
      for (int i = 0; i < gpus && issued.ok(); ++i) {
        issued = TANDEM_PROBE_NCCL(ncclAllReduce(send[i].data_ptr(), receive[i].data_ptr(),
                                                 static_cast<size_t>(count), ncclFloat, ncclSum,
                                                 communicators.comms[i], streams[i]));
      }
      // The group is closed whatever happened inside it: an open group would hold every later NCCL
      // call of this thread, the aborts included.
      const absl::Status ended = TANDEM_PROBE_NCCL(ncclGroupEnd());
      RETURN_IF_ERROR(issued);
      RETURN_IF_ERROR(ended);
    }
    for (int i = 0; i < gpus; ++i) {
      const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(i));
      RETURN_IF_ERROR(TANDEM_PROBE_CUDA(cudaStreamSynchronize(streams[i])));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(run(kWarmUp));
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(run(iterations));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
  for (int i = 0; i < gpus; ++i) {
    const float first = receive[i][0].item<float>(), last = receive[i][count - 1].item<float>();
    if (first != static_cast<float>(gpus) || last != static_cast<float>(gpus)) {
      return absl::InternalError(absl::StrCat("NCCL all-reduce of ones across ", gpus,
                                              " GPUs gave ", first, " and ", last, " on GPU ", i));
    }
  }
  communicators.failed = false;

  AllReduceSpeed speed;
  speed.gpus = gpus;
  speed.bytes = count * static_cast<int64_t>(sizeof(float));
  speed.iterations = iterations;
  speed.seconds = seconds;
  speed.algbw_gbps = static_cast<double>(speed.bytes) / seconds / 1e9;
  speed.busbw_gbps = speed.algbw_gbps * 2.0 * (gpus - 1) / gpus;
  return speed;
}

}  // namespace

std::string NcclVersion() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
  // From 2.9 the code is major * 10000 + minor * 100 + patch; before, major * 1000 + minor * 100 +
  // patch.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return absl::StrCat(major, ".", minor, ".", code % 100);
}

absl::StatusOr<AllReduceSpeed> MeasureAllReduce(int gpus, int64_t bytes, int iterations) {
  if (gpus < 2) return absl::InvalidArgumentError("an all-reduce needs 2 or more GPUs");
  try {
    return Measure(gpus, bytes, iterations);
  } catch (const std::exception& e) {  // LibTorch: out of memory, a device that failed
    return absl::InternalError(absl::StrCat("NCCL all-reduce across ", gpus, " GPUs: ", e.what()));
  }
}

}  // namespace tandem::platform

#endif  // TANDEM_HAVE_NCCL
