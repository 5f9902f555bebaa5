// libFuzzer target: the receiving half of the data plane on arbitrary bytes, as an actor meets them
// from a peer: a local link's frame head (transport::CheckFrameHead), then a stream of TensorChunk
// messages decoded (HeaderFromProto, FromProto) and delivered into an inbox that expects the
// transfer the first chunk declares (Inbox::Begin, Delivery::Write, Finish, Await), as
// PeerService::Receive does.
//
// Input: 24 bytes of frame head, then records of a 2-byte little-endian length and that many bytes
// of a serialized tandem.v1.TensorChunk. The inbox's job is "job-1".
#include <google/protobuf/stubs/logging.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "proto/tandem/v1/peer.pb.h"
#include "transport/frame.h"
#include "transport/inbox.h"
#include "transport/wire.h"

namespace {

using tandem::transport::Inbox;

constexpr int64_t kMaxElements = int64_t{1} << 20;

// Bytes of a tensor of `shape`, or -1 when a dimension is negative or it is over kMaxElements.
int64_t ElementsOf(const std::vector<int64_t>& shape) {
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && elements > kMaxElements / d)) return -1;
    elements *= d;
  }
  return elements;
}

void Deliver(const std::vector<tandem::v1::TensorChunk>& chunks) {
  absl::StatusOr<tandem::transport::TransferHeader> header =
      tandem::transport::HeaderFromProto(chunks.front());
  if (!header.ok()) return;
  Inbox inbox;
  inbox.SetJob("job-1");
  const int64_t elements = ElementsOf(header->shape);
  std::vector<std::byte> destination_bytes;
  if (elements >= 0) {
    destination_bytes.resize(static_cast<size_t>(elements) * tandem::DTypeSize(header->dtype));
    tandem::TensorBytes destination{header->dtype, header->shape, destination_bytes.data(),
                                    destination_bytes.size()};
    (void)inbox.Expect(header->tag, destination);
  }
  {
    absl::StatusOr<Inbox::Delivery> delivery = inbox.Begin(*header, std::chrono::milliseconds(0));
    if (!delivery.ok()) return;
    absl::Status status =
        delivery->Write(header->tag, chunks.front().offset(), chunks.front().data());
    for (size_t i = 1; i < chunks.size() && status.ok(); ++i) {
      absl::StatusOr<tandem::transport::TransferTag> tag =
          tandem::transport::FromProto(chunks[i].tag());
      status =
          tag.ok() ? delivery->Write(*tag, chunks[i].offset(), chunks[i].data()) : tag.status();
    }
    if (status.ok()) (void)delivery->Finish();
  }
  (void)inbox.Await(header->tag, std::chrono::milliseconds(0));
}

}  // namespace

// protobuf logs every string field with invalid UTF-8 it parses; the fuzzer makes millions.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::transport::FrameHead head;
  if (size < sizeof(head)) return 0;
  std::memcpy(&head, data, sizeof(head));
  (void)tandem::transport::CheckFrameHead(head);
  data += sizeof(head);
  size -= sizeof(head);

  std::vector<tandem::v1::TensorChunk> chunks;
  while (size >= 2 && chunks.size() < 64) {
    const size_t length = std::min<size_t>(size - 2, data[0] | (size_t{data[1]} << 8));
    tandem::v1::TensorChunk chunk;
    if (!chunk.ParseFromArray(data + 2, static_cast<int>(length))) break;
    chunks.push_back(std::move(chunk));
    data += 2 + length;
    size -= 2 + length;
  }
  if (!chunks.empty()) Deliver(chunks);
  return 0;
}
