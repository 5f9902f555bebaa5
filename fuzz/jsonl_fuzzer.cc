// libFuzzer target: a jsonl dataset file (data/jsonl_dataset.h), opened as a job opens it, and its
// first sample read (the image decoded, resized to 8 x 8). Beyond "no crash, no hang, no leak": a
// sample that reads is an 8 x 8 image.
#include "data/jsonl_dataset.h"
#include "fuzz/data_file_fuzzer_main.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tandem::fuzz::WriteInput(data, size, "train.jsonl");
  auto dataset = tandem::data::JsonlDataset::Open(path, 8);
  if (!dataset.ok()) return 0;
  auto example = (*dataset)->Get(0);
  if (example.ok() && (example->image.height != 8 || example->image.width != 8)) std::abort();
  return 0;
}
