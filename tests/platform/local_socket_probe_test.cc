// platform/local_socket_probe.h: a Unix socket in the abstract namespace, listened on, connected to
// and written both ways, under a fresh name each time.
#include "platform/local_socket_probe.h"

#include <gtest/gtest.h>

namespace tandem::platform {
namespace {

TEST(ProbeLocalSocket, ExchangesBytesOverAnAbstractSocket) {
  const LocalSocketProbe probe = ProbeLocalSocket();
  ASSERT_TRUE(probe.ok) << probe.error;
  EXPECT_EQ(probe.name.rfind("tandem-doctor-", 0), 0u) << probe.name;
  EXPECT_GT(probe.bytes, 0);
  EXPECT_EQ(probe.step, "");
  EXPECT_EQ(probe.error_number, 0);
  EXPECT_EQ(probe.error, "");
}

TEST(ProbeLocalSocket, TakesAFreshNameEachTime) {
  const LocalSocketProbe first = ProbeLocalSocket(), second = ProbeLocalSocket();
  ASSERT_TRUE(first.ok) << first.error;
  ASSERT_TRUE(second.ok) << second.error;
  EXPECT_NE(first.name, second.name);
}

}  // namespace
}  // namespace tandem::platform
