// platform/report.h on the machine the tests run on: the LibTorch build, the BLAS, the CPU, and the
// CUDA devices (none without CUDA, with the reason); probes only when asked for.
#include "platform/report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tandem::platform {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

ReportOptions WithoutProbes() {
  ReportOptions options;
  options.probes = false;
  return options;
}

TEST(ReportPlatform, NamesLibTorchTheBlasAndTheCpu) {
  const PlatformReport report = ReportPlatform(WithoutProbes());
  EXPECT_THAT(report.libtorch.version, MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+.*"));
  EXPECT_GT(report.libtorch.threads, 0);
  EXPECT_EQ(report.libtorch.cuda, !report.libtorch.cuda_version.empty());
  // Debian's LibTorch says "generic" (libblas.so.3), the PyPI wheel "mkl".
  EXPECT_FALSE(report.libtorch.blas_info.empty());
  // The BLAS is named: the library that defines sgemm_, or the one LibTorch carries.
  if (report.blas.kind == BlasInfo::Kind::kNone) {
    EXPECT_NE(report.libtorch.blas_info, "generic");
  } else {
    EXPECT_FALSE(report.blas.library.empty());
    EXPECT_FALSE(report.blas.version.empty());
  }
  EXPECT_FALSE(report.cpu.features.arch.empty());
  EXPECT_EQ(report.cpu.features.model, DetectCpuFeatures().model);
  const Bf16Support cpu = DetectBf16Support("cpu");
  EXPECT_EQ(report.cpu.bf16.native, cpu.native);
  EXPECT_EQ(report.cpu.bf16.detail, cpu.detail);
  EXPECT_EQ(report.cpu.bf16_override, GetCpuBf16Override());
}

TEST(ReportPlatform, SaysWhyThereAreNoCudaDevices) {
  const PlatformReport report = ReportPlatform(WithoutProbes());
  if (!report.libtorch.cuda) {
    EXPECT_TRUE(report.cuda.devices.empty());
    EXPECT_THAT(report.cuda.none_reason, HasSubstr("built without CUDA"));
  }
  if (report.cuda.devices.empty()) {
    EXPECT_FALSE(report.cuda.none_reason.empty());
  } else {
    EXPECT_TRUE(report.cuda.none_reason.empty());
  }
  for (const CudaDevice& device : report.cuda.devices) {
    EXPECT_FALSE(device.name.empty());
    EXPECT_GT(device.memory_bytes, 0);
    EXPECT_EQ(device.bf16.native, device.major >= 8) << device.name;
  }
  EXPECT_EQ(report.nccl.built_in, !report.nccl.version.empty());
  if (!report.nccl.built_in) {
    EXPECT_TRUE(report.nccl.error.empty());
  }
}

TEST(ReportPlatform, SkipsEveryTimedProbeWhenAskedTo) {
  const PlatformReport report = ReportPlatform(WithoutProbes());
  EXPECT_FALSE(report.cpu.matmul.has_value());
  for (const CudaDevice& device : report.cuda.devices) {
    EXPECT_FALSE(device.bf16_matmul_tflops.has_value()) << device.index;
  }
  EXPECT_FALSE(report.nccl.all_reduce.has_value());
}

TEST(ReportPlatform, MeasuresTheCpuMatmulsWithProbes) {
  ReportOptions options;
  options.iterations = 2;  // GPUs, where there are some: the result only has to exist
  options.gpu_matmul_size = 1024;
  options.all_reduce_bytes = 1 << 20;
  const PlatformReport report = ReportPlatform(options);
  ASSERT_TRUE(report.cpu.matmul.has_value());
  EXPECT_GT(report.cpu.matmul->fp32_gflops, 0);
  EXPECT_GT(report.cpu.matmul->bf16_gflops, 0);
  for (const CudaDevice& device : report.cuda.devices) {
    EXPECT_EQ(device.error, "") << device.index;
    ASSERT_TRUE(device.bf16_matmul_tflops.has_value()) << device.index;
    EXPECT_GT(*device.bf16_matmul_tflops, 0);
  }
  EXPECT_EQ(report.nccl.error, "");
  if (report.nccl.built_in && report.cuda.devices.size() >= 2) {
    ASSERT_TRUE(report.nccl.all_reduce.has_value());
    const AllReduceSpeed& speed = *report.nccl.all_reduce;
    EXPECT_EQ(speed.gpus, static_cast<int>(report.cuda.devices.size()));
    EXPECT_EQ(speed.bytes, 1 << 20);
    EXPECT_DOUBLE_EQ(speed.busbw_gbps, speed.algbw_gbps * 2 * (speed.gpus - 1) / speed.gpus);
  }
}

}  // namespace
}  // namespace tandem::platform
