// The safetensors file format without LibTorch: the header's length and JSON, validated into where
// each tensor's bytes lie (https://github.com/huggingface/safetensors). engine/safetensors.h reads
// and writes tensors with it; the fuzzer takes headers through it.
//
// A file: 8 bytes of little-endian header length N, N bytes of JSON
//   {"__metadata__": {"k": "v", ...}, "name": {"dtype": "F32", "shape": [2, 3],
//    "data_offsets": [begin, end]}, ...}
// then the data, offsets relative to its start. Tandem adds the metadata entry "tandem.crc32": a
// JSON object of each tensor's name to its CRC-32 (zlib's) as 8 hex digits. A map that names a
// tensor the file does not hold is ignored (another tool re-saved the file, keeping the metadata).
//
// A header is someone's file: it is at most 100 MB (upstream's MAX_HEADER_SIZE) and nests at most
// 4 levels, and errors quote at most 64 characters of any name or value in it. Stateless.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem {

inline constexpr std::string_view kSafetensorsMetadataKey = "__metadata__";
inline constexpr std::string_view kSafetensorsChecksumKey = "tandem.crc32";
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// The dtypes Tandem reads and writes, for messages.
inline constexpr const char* kSafetensorsDtypes = "F32, BF16, F16, I64, I32, U8";

// Bytes per element of one of kSafetensorsDtypes, or 0 for any other name.
uint64_t SafetensorsElementSize(std::string_view dtype);

// One tensor of a header, validated: its bytes [begin, end) of the file hold exactly
// product(shape) * element size bytes and overlap no other tensor's.
struct SafetensorsRecord {
  std::string name;
  std::string dtype;  // one of SafetensorsElementSize's names
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  std::optional<uint32_t> crc32;  // from "tandem.crc32", when the file has it
};

struct SafetensorsLayout {
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsRecord> tensors;  // file order
};

// The header length of a file of `file_size` bytes from its first 8 bytes (`first`, of which
// min(8, file_size) are read). InvalidArgument "safetensors: <path>: ..." when the file is shorter
// than 8 bytes, the length is over 100 MB, or more than the bytes that follow.
absl::StatusOr<uint64_t> SafetensorsHeaderSize(const std::string& path, const char* first,
                                               uint64_t file_size);

// Validates the header text of a file whose data starts at byte `data_start` and holds
// `data_size` bytes. InvalidArgument naming the file, and the tensor where there is one: JSON,
// nesting, types, unknown dtypes, offsets out of range or overlapping, sizes that do not match
// the shape, a checksum map that is not names to 8 hex digits.
absl::StatusOr<SafetensorsLayout> ParseSafetensorsHeader(const std::string& path,
                                                         std::string_view header_text,
                                                         uint64_t data_start, uint64_t data_size);

// zlib's CRC-32 of `size` bytes, and its "tandem.crc32" spelling (8 lowercase hex digits).
uint32_t SafetensorsCrc32(const void* data, uint64_t size);
std::string SafetensorsHex32(uint32_t value);

// DataLoss "safetensors: <path>: tensor '<name>': checksum mismatch (stored crc32 ..., read ...):
// the file is damaged".
absl::Status SafetensorsChecksumMismatch(const std::string& path, std::string_view name,
                                         uint32_t stored, uint32_t read);

}  // namespace tandem
