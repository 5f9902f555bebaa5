// Tests for transport/transport.cc: the names that every transport error message is built from.
#include "transport/transport.h"

#include "gtest/gtest.h"

namespace tandem::transport {
namespace {

TEST(DescribeTag, NamesEveryField) {
  TransferTag tag;
  tag.job_id = "job-000001";
  tag.kind = TransferKind::kGradients;
  tag.step = 3;
  tag.micro_batch = 1;
  tag.sample_begin = 0;
  tag.sample_end = 8;
  tag.source_rank = 2;
  EXPECT_EQ(DescribeTag(tag),
            "gradients job-000001 step 3 micro-batch 1 samples [0, 8) from rank 2");
}

TEST(TransferKindName, NamesEveryKind) {
  EXPECT_STREQ(TransferKindName(TransferKind::kEmbeddings), "embeddings");
  EXPECT_STREQ(TransferKindName(TransferKind::kGradients), "gradients");
  EXPECT_STREQ(TransferKindName(TransferKind::kEvalEmbeddings), "eval embeddings");
  EXPECT_STREQ(TransferKindName(TransferKind::kGradSquares), "grad squares");
  EXPECT_STREQ(TransferKindName(TransferKind::kBadSamples), "bad samples");
  EXPECT_STREQ(TransferKindName(TransferKind::kTextTokens), "text tokens");
  EXPECT_STREQ(TransferKindName(TransferKind::kSnapshot), "snapshot");
}

}  // namespace
}  // namespace tandem::transport
