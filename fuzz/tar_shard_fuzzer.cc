// libFuzzer target: a tar shard (data/tar_shard.h) scanned, each member read where the scan found
// it, then opened as a job opens data.shards (data/shard_dataset.h) and its first image read, and
// opened again skipping bad samples (data.on_bad_sample "skip"). Beyond "no crash, no hang, no
// leak": a member reads back with the size its header gave; a scan that keeps what precedes a
// fault agrees with a whole scan that succeeds; a shard that opens has a sample, and opens alike
// skipping, with every sample good; an image that reads is 8 x 8; a bad sample has no text.
#include "data/shard_dataset.h"
#include "data/tar_shard.h"
#include "fuzz/data_file_fuzzer_main.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tandem::fuzz::WriteInput(data, size, "shard.tar");
  auto members = tandem::data::ScanTar(path);
  absl::Status cut;
  auto partial = tandem::data::ScanTar(path, &cut);
  if (members.ok() && (!partial.ok() || !cut.ok() || partial->size() != members->size()))
    std::abort();
  if (partial.ok() && !cut.ok() && partial->empty()) std::abort();  // a cut after the first member
  if (members.ok()) {
    for (const tandem::data::TarMember& member : *members) {
      auto bytes = tandem::data::ReadTarMember(path, member);
      if (bytes.ok() && static_cast<int64_t>(bytes->size()) != member.size) std::abort();
    }
  }
  auto dataset = tandem::data::ShardDataset::Open({path}, 8, nullptr, {4});
  tandem::data::ShardDatasetOptions skip;
  skip.max_images_per_sample = 4;
  skip.skip_bad_samples = true;
  auto skipping = tandem::data::ShardDataset::Open({path}, 8, nullptr, skip);
  if (dataset.ok() && (!skipping.ok() || (*skipping)->size() != (*dataset)->size())) std::abort();
  if (skipping.ok()) {
    for (int64_t i = 0; i < (*skipping)->size(); ++i) {
      const absl::Status check = (*skipping)->Check(i);
      if (dataset.ok() && !check.ok()) std::abort();
      if (!check.ok() && (!(*skipping)->Text(i).empty() || (*skipping)->ImageCount(i) != 0))
        std::abort();
    }
  }
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
