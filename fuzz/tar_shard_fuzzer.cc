// libFuzzer target: a tar shard (data/tar_shard.h) scanned, each member read where the scan found
// it, then opened as a job opens data.shards (data/shard_dataset.h) and its first image read.
// Beyond "no crash, no hang, no leak": a member reads back with the size its header gave; a shard
// that opens has a sample; an image that reads is 8 x 8.
#include "data/shard_dataset.h"
#include "data/tar_shard.h"
#include "fuzz/data_file_fuzzer_main.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tandem::fuzz::WriteInput(data, size, "shard.tar");
  auto members = tandem::data::ScanTar(path);
  if (!members.ok()) return 0;
  for (const tandem::data::TarMember& member : *members) {
    auto bytes = tandem::data::ReadTarMember(path, member);
    if (bytes.ok() && static_cast<int64_t>(bytes->size()) != member.size) std::abort();
  }
  auto dataset = tandem::data::ShardDataset::Open({path}, 8, nullptr, {4});
  if (!dataset.ok()) return 0;
  if ((*dataset)->size() == 0) std::abort();
  for (int64_t i = 0; i < (*dataset)->size(); ++i) {
    if ((*dataset)->ImageCount(i) == 0) continue;
    auto image = (*dataset)->GetImage(i, 0);
    if (image.ok() && (image->height != 8 || image->width != 8)) std::abort();
    break;
  }
  return 0;
}
