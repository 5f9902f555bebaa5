// platform/device.h: the --device values, checked against a host's number of CUDA devices.
#include "platform/device.h"

#include <gtest/gtest.h>

namespace tandem::platform {
namespace {

TEST(CheckDevice, AcceptsCpuAndExistingCudaDevices) {
  EXPECT_TRUE(CheckDevice("--device", "cpu", 0, true).ok());
  EXPECT_TRUE(CheckDevice("--device", "cuda:0", 1, false).ok());
  EXPECT_TRUE(CheckDevice("--device", "cuda:7", 8, false).ok());
  EXPECT_TRUE(CheckDevice("--device", "cuda", 2, true).ok());
}

TEST(CheckDevice, NamesTheDevicesAHostHas) {
  absl::Status none = CheckDevice("--device", "cuda:0", 0, true);
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(none.message(), "--device cuda:0: this host has no CUDA device");
  EXPECT_EQ(CheckDevice("--device", "cuda:1", 1, true).message(),
            "--device cuda:1: this host has 1 CUDA device (cuda:0)");
  EXPECT_EQ(CheckDevice("--device", "cuda:4", 4, true).message(),
            "--device cuda:4: this host has 4 CUDA devices (cuda:0 to cuda:3)");
  EXPECT_EQ(CheckDevice("--device", "cuda", 0, true).message(),
            "--device cuda: this host has no CUDA device");
}

TEST(CheckDevice, RefusesWhatIsNoDevice) {
  for (const char* bad :
       {"gpu", "cuda:", "cuda:-1", "cuda:x", "CUDA:0", "cuda:0 ", "cuda:99999999999"}) {
    absl::Status status = CheckDevice("--device", bad, 8, true);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(status.message(), std::string("--device ") + bad + ": expected cpu, cuda or cuda:N")
        << bad;
  }
  // An actor is one rank: it takes one device, not the spread.
  EXPECT_EQ(CheckDevice("--device", "cuda", 2, false).message(),
            "--device cuda: expected cpu or cuda:N");
  EXPECT_EQ(CheckDevice("", "cuda:2", 1, false).message(),
            "cuda:2: this host has 1 CUDA device (cuda:0)");
}

TEST(DeviceOfRank, SpreadsRanksOverTheDevices) {
  EXPECT_EQ(DeviceOfRank("cuda", 0, 2), "cuda:0");
  EXPECT_EQ(DeviceOfRank("cuda", 1, 2), "cuda:1");
  EXPECT_EQ(DeviceOfRank("cuda", 2, 2), "cuda:0");
  EXPECT_EQ(DeviceOfRank("cuda:1", 3, 2), "cuda:1");
  EXPECT_EQ(DeviceOfRank("cpu", 3, 2), "cpu");
}

// What an actor offers a job on the CPU: the host's memory, or its cgroup's limit when lower (a
// Kubernetes pod's); cgroup v1's "no limit" is a number beyond the host's.
TEST(HostMemoryBytes, TakesTheSmallerOfTheHostAndItsCgroupLimit) {
  const std::string meminfo = "MemTotal:       24576000 kB\nMemFree:        1000 kB\n";
  EXPECT_EQ(HostMemoryBytes(meminfo, "max\n"), int64_t{24576000} * 1024);
  EXPECT_EQ(HostMemoryBytes(meminfo, ""), int64_t{24576000} * 1024);
  EXPECT_EQ(HostMemoryBytes(meminfo, "8589934592\n"), int64_t{8} << 30);
  EXPECT_EQ(HostMemoryBytes(meminfo, "9223372036854771712\n"), int64_t{24576000} * 1024);
  EXPECT_EQ(HostMemoryBytes("", "max"), 0);
  EXPECT_GT(DeviceMemoryBytes("cpu"), 0) << "this host's /proc/meminfo";
  EXPECT_EQ(DeviceMemoryBytes("cuda:99"), 0);
}

}  // namespace
}  // namespace tandem::platform
