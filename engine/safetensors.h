// The safetensors file format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length, a JSON header {"name": {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {...}}, then the raw little-endian tensor bytes. Tensors are written in the order
// given, names kept as given.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::engine {

// Writes CPU tensors (fp32, bf16, fp16, int64, int32, uint8) atomically to `path`. Non-contiguous
// tensors are made contiguous. Duplicate or empty names are InvalidArgument. The metadata always
// gains "tandem.crc32": a JSON object of each tensor's name to its CRC-32 (8 hex digits).
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// WriteSafetensors' file as bytes in memory; `path` only names it in errors.
absl::StatusOr<std::string> EncodeSafetensors(
    const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata = {});
// A file's bytes (EncodeSafetensors', or read from disk) decoded, with ReadSafetensors' checks and
// errors (`path` names it); the metadata without "tandem.crc32".
struct DecodedSafetensors {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::map<std::string, std::string> metadata;
};
absl::StatusOr<DecodedSafetensors> DecodeSafetensors(const std::string& path,
                                                     std::string_view bytes);

// Reads a safetensors file into CPU tensors, in file order. Malformed files are InvalidArgument
// naming the file and what is wrong (header length, over 100 MB of header, JSON, offsets out of
// range, unknown dtype). A tensor whose bytes do not match its "tandem.crc32" is DataLoss naming
// it.
absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> ReadSafetensors(
    const std::string& path);

// A file's header without its data, validated as ReadSafetensors validates it.
struct SafetensorsEntry {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // bytes [begin, end) of the file
  uint64_t end = 0;
  std::optional<uint32_t> crc32;  // from "tandem.crc32", when the file has it
  int64_t numel() const;
};
struct SafetensorsHeader {
  std::string path;
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> tensors;  // file order
  const SafetensorsEntry* Find(const std::string& name) const;
};
// Reads only the header (the 8-byte length and the JSON); errors as ReadSafetensors'.
absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path);
// Reads one tensor of `header`'s file; NotFound for a name it does not hold, DataLoss when its
// bytes do not match its checksum.
absl::StatusOr<at::Tensor> ReadSafetensor(const SafetensorsHeader& header, const std::string& name);

}  // namespace tandem::engine
