// Tests for transport/frame.h: the checks of a frame head that arrived. Frames moving over a real
// socket pair are exercised by tests/transport/local_link_test.cc.
#include "transport/frame.h"

#include <cstdint>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::transport {
namespace {

using ::testing::HasSubstr;

TEST(FrameHead, MalformedHeadsAreInvalidArgument) {
  FrameHead good;
  good.magic = kFrameMagic;
  good.type = static_cast<uint32_t>(FrameType::kTensor);
  good.meta_bytes = 100;
  good.data_bytes = 4096;
  EXPECT_TRUE(CheckFrameHead(good).ok());
  FrameHead head = good;
  head.magic = 1;
  EXPECT_THAT(CheckFrameHead(head).message(), HasSubstr("not a local link frame"));
  head = good;
  head.type = 9;
  EXPECT_THAT(CheckFrameHead(head).message(), HasSubstr("unknown frame type 9"));
  head = good;
  head.meta_bytes = kMaxFrameMeta + 1;
  EXPECT_THAT(CheckFrameHead(head).message(), HasSubstr("frame metadata of 65537 bytes"));
  head = good;
  head.data_bytes = kMaxFrameData + 1;
  EXPECT_EQ(CheckFrameHead(head).code(), absl::StatusCode::kInvalidArgument);
  head = good;
  head.type = static_cast<uint32_t>(FrameType::kAck);
  EXPECT_THAT(CheckFrameHead(head).message(), HasSubstr("with 4096 data bytes"));
}

}  // namespace
}  // namespace tandem::transport
