// WriteSafetensors / ReadSafetensors / ReadSafetensorsHeader / ReadSafetensor.
//
// Layout of a file, as huggingface/safetensors writes it (safetensors/src/tensor.rs, `prepare` and
// `serialize`):
//   bytes [0, 8)        N, the header length, u64 little-endian
//   bytes [8, 8 + N)    compact UTF-8 JSON, padded with spaces so that 8 + N is a multiple of 8:
//                       {"__metadata__":{"k":"v",...},"name":{"dtype":"F32","shape":[2,3],
//                        "data_offsets":[begin,end]},...}
//   bytes [8 + N, EOF)  the data; offsets are relative to its start, end exclusive
// Tensors are laid out back to back in the order given (the reference sorts them by alignment and
// name; readers do not depend on the order).
//
// Headers are validated by common/safetensors_format.h (torch-free, fuzzed). Tandem adds one
// metadata entry, "tandem.crc32": each tensor's CRC-32; every read of a tensor from a file that has
// it checks it, so bit rot in a checkpoint is DataLoss naming the tensor, not a silently wrong
// resume. Other readers (transformers, safetensors) ignore unknown metadata.
#include "engine/safetensors.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/atomic_file.h"
#include "common/safetensors_format.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tandem::engine {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

using OrderedJson = nlohmann::ordered_json;

// The dtypes of common/safetensors_format.h as LibTorch's.
struct DtypeInfo {
  absl::string_view name;  // the safetensors dtype string
  at::ScalarType type;
};

constexpr DtypeInfo kDtypes[] = {
    {"F32", at::kFloat}, {"BF16", at::kBFloat16}, {"F16", at::kHalf},
    {"I64", at::kLong},  {"I32", at::kInt},       {"U8", at::kByte},
};

const DtypeInfo* FindDtype(at::ScalarType type) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.type == type) return &info;
  }
  return nullptr;
}

const DtypeInfo* FindDtype(absl::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

absl::Status Invalid(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", path, ": ", what));
}

absl::Status InvalidTensor(const std::string& path, absl::string_view name,
                           absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("safetensors: ", path, ": tensor '", name, "': ", what));
}

// The engine's view of a validated header: dtypes as LibTorch's.
SafetensorsHeader ToHeader(const std::string& path, SafetensorsLayout layout) {
  SafetensorsHeader header;
  header.path = path;
  header.metadata = std::move(layout.metadata);
  for (SafetensorsRecord& record : layout.tensors) {
    header.tensors.push_back({std::move(record.name), FindDtype(record.dtype)->type,
                              std::move(record.shape), record.begin, record.end, record.crc32});
  }
  return header;
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(const std::string file, EncodeSafetensors(path, tensors, metadata));
  return WriteFileAtomically(path, file);
}

absl::StatusOr<std::string> EncodeSafetensors(
    const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata) {
  OrderedJson entries = OrderedJson::object();
  nlohmann::json checksums = nlohmann::json::object();  // name -> 8 hex digits

  std::vector<at::Tensor> contiguous;
  contiguous.reserve(tensors.size());
  std::set<absl::string_view> names;
  uint64_t data_size = 0;
  try {
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& [name, tensor] = tensors[i];
      if (name.empty()) return Invalid(path, absl::StrCat("tensor #", i, " has an empty name"));
      if (name == kSafetensorsMetadataKey) return InvalidTensor(path, name, "the name is reserved");
      if (!names.insert(name).second) return InvalidTensor(path, name, "duplicate name");
      if (!tensor.defined()) return InvalidTensor(path, name, "undefined tensor");
      if (!tensor.device().is_cpu()) {
        return InvalidTensor(path, name,
                             absl::StrCat("is on ", tensor.device().str(), ", not the CPU"));
      }
      const DtypeInfo* dtype = FindDtype(tensor.scalar_type());
      if (dtype == nullptr) {
        return InvalidTensor(
            path, name,
            absl::StrCat("dtype ", c10::toString(tensor.scalar_type()),
                         " is not supported (supported: ", kSafetensorsDtypes, ")"));
      }
      contiguous.push_back(tensor.contiguous());
      const uint64_t bytes = contiguous.back().nbytes();
      checksums[name] = SafetensorsHex32(
          SafetensorsCrc32(bytes > 0 ? contiguous.back().data_ptr() : nullptr, bytes));
      OrderedJson entry = OrderedJson::object();
      entry["dtype"] = std::string(dtype->name);
      entry["shape"] = tensor.sizes().vec();
      entry["data_offsets"] = {data_size, data_size + bytes};
      entries[name] = std::move(entry);
      data_size += bytes;
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("safetensors: ", path, ": ", e.what()));
  }

  // "__metadata__" first, and only when there is some.
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty() || !checksums.empty()) {
    OrderedJson& map = header[std::string(kSafetensorsMetadataKey)];
    map = OrderedJson::object();
    for (const auto& [key, value] : metadata) {
      if (key != kSafetensorsChecksumKey) map[key] = value;
    }
    if (!checksums.empty()) map[std::string(kSafetensorsChecksumKey)] = checksums.dump();
  }
  for (auto& [name, entry] : entries.items()) header[name] = std::move(entry);
  std::string header_text;
  try {
    header_text = header.dump();  // compact, UTF-8 kept as is; throws on invalid UTF-8
  } catch (const nlohmann::json::exception& e) {
    return Invalid(path, absl::StrCat("a name or metadata entry is not valid UTF-8: ", e.what()));
  }
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  const uint64_t header_size = header_text.size();
  std::string file(sizeof(header_size) + header_size + data_size, '\0');
  std::memcpy(file.data(), &header_size, sizeof(header_size));
  std::memcpy(file.data() + sizeof(header_size), header_text.data(), header_size);
  char* data = file.data() + sizeof(header_size) + header_size;
  for (const at::Tensor& tensor : contiguous) {
    const size_t bytes = tensor.nbytes();
    if (bytes > 0) std::memcpy(data, tensor.data_ptr(), bytes);
    data += bytes;
  }
  return file;
}

namespace {}  // namespace

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

const SafetensorsEntry* SafetensorsHeader::Find(const std::string& name) const {
  for (const SafetensorsEntry& entry : tensors) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> ReadSafetensors(
    const std::string& path) {
  // A regular file only (a checkpoint or a run's weights a user may name), of any real size.
  absl::StatusOr<std::string> file = ReadUserFile(path, int64_t{1} << 40);
  if (!file.ok()) return file.status();
  ASSIGN_OR_RETURN(DecodedSafetensors decoded, DecodeSafetensors(path, *file));
  return std::move(decoded.tensors);
}

absl::StatusOr<DecodedSafetensors> DecodeSafetensors(const std::string& path,
                                                     std::string_view bytes) {
  absl::StatusOr<uint64_t> header_size = SafetensorsHeaderSize(path, bytes.data(), bytes.size());
  if (!header_size.ok()) return header_size.status();
  const uint64_t data_start = sizeof(uint64_t) + *header_size;
  absl::StatusOr<SafetensorsLayout> layout =
      ParseSafetensorsHeader(path, std::string_view(bytes.data() + sizeof(uint64_t), *header_size),
                             data_start, bytes.size() - data_start);
  if (!layout.ok()) return layout.status();
  SafetensorsHeader header = ToHeader(path, *std::move(layout));

  DecodedSafetensors decoded;
  decoded.metadata = std::move(header.metadata);
  decoded.metadata.erase(std::string(kSafetensorsChecksumKey));
  std::vector<std::pair<std::string, at::Tensor>>& tensors = decoded.tensors;
  tensors.reserve(header.tensors.size());
  try {
    for (SafetensorsEntry& entry : header.tensors) {
      at::Tensor tensor = at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype));
      if (entry.end > entry.begin) {
        std::memcpy(tensor.data_ptr(), bytes.data() + entry.begin, entry.end - entry.begin);
      }
      if (entry.crc32) {
        const uint32_t read = SafetensorsCrc32(bytes.data() + entry.begin, entry.end - entry.begin);
        if (read != *entry.crc32)
          return SafetensorsChecksumMismatch(path, entry.name, *entry.crc32, read);
      }
      tensors.emplace_back(std::move(entry.name), std::move(tensor));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("safetensors: ", path, ": ", e.what()));
  }
  return decoded;
}

absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path) {
  if (absl::Status file = CheckUserFile(path, int64_t{1} << 40); !file.ok()) return file;
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("safetensors: ", path, ": ", ec.message()));
  std::ifstream in(path, std::ios::binary);
  char first[sizeof(uint64_t)] = {};
  if (!in.read(first, std::min<uint64_t>(sizeof(first), file_size)) && file_size >= sizeof(first)) {
    return absl::DataLossError(absl::StrCat("safetensors: ", path, ": cannot read the header"));
  }
  absl::StatusOr<uint64_t> header_size = SafetensorsHeaderSize(path, first, file_size);
  if (!header_size.ok()) return header_size.status();
  std::string text(*header_size, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(text.size()))) {
    return absl::DataLossError(absl::StrCat("safetensors: ", path, ": cannot read the header"));
  }
  const uint64_t data_start = sizeof(uint64_t) + *header_size;
  absl::StatusOr<SafetensorsLayout> layout =
      ParseSafetensorsHeader(path, text, data_start, file_size - data_start);
  if (!layout.ok()) return layout.status();
  return ToHeader(path, *std::move(layout));
}

absl::StatusOr<at::Tensor> ReadSafetensor(const SafetensorsHeader& header,
                                          const std::string& name) {
  const SafetensorsEntry* entry = header.Find(name);
  if (entry == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("safetensors: ", header.path, ": no tensor '", name, "'"));
  }
  at::Tensor tensor = at::empty(entry->shape, at::TensorOptions().dtype(entry->dtype));
  std::ifstream in(header.path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(entry->begin));
  if (!in || !in.read(static_cast<char*>(tensor.data_ptr()),
                      static_cast<std::streamsize>(entry->end - entry->begin))) {
    return absl::DataLossError(
        absl::StrCat("safetensors: ", header.path, ": cannot read tensor '", name, "'"));
  }
  if (entry->crc32) {
    const uint32_t read = SafetensorsCrc32(tensor.data_ptr(), entry->end - entry->begin);
    if (read != *entry->crc32)
      return SafetensorsChecksumMismatch(header.path, name, *entry->crc32, read);
  }
  return tensor;
}

}  // namespace tandem::engine
