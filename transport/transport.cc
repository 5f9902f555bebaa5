#include "transport/transport.h"

#include "absl/strings/str_cat.h"

namespace tandem::transport {

const char* TransferKindName(TransferKind kind) {
  switch (kind) {
    case TransferKind::kEmbeddings:
      return "embeddings";
    case TransferKind::kGradients:
      return "gradients";
    case TransferKind::kEvalEmbeddings:
      return "eval embeddings";
    case TransferKind::kGradSquares:
      return "grad squares";
    case TransferKind::kBadSamples:
      return "bad samples";
    case TransferKind::kTextTokens:
      return "text tokens";
    case TransferKind::kSnapshot:
      return "snapshot";
  }
  return "unknown transfer";
}

std::string DescribeTag(const TransferTag& tag) {
  return absl::StrCat(TransferKindName(tag.kind), " ", tag.job_id, " step ", tag.step,
                      " micro-batch ", tag.micro_batch, " samples [", tag.sample_begin, ", ",
                      tag.sample_end, ") from rank ", tag.source_rank);
}

}  // namespace tandem::transport
