// WriteSafetensors / ReadSafetensors / ReadSafetensorsHeader / ReadSafetensor.
//
// Layout of a file, as huggingface/safetensors writes it (safetensors/src/tensor.rs, `prepare` and
// `serialize`):
//   bytes [0, 8)        N, the header length, u64 little-endian
//   bytes [8, 8 + N)    compact UTF-8 JSON, padded with spaces so that 8 + N is a multiple of 8:
//                       {"__metadata__":{"k":"v",...},"name":{"dtype":"F32","shape":[2,3],
//                        "data_offsets":[begin,end]},...}
//   bytes [8 + N, EOF)  the data; offsets are relative to its start, end exclusive
// "__metadata__" is left out when there is no metadata. Tensors are laid out back to back in the
// order given (the reference sorts them by alignment and name; readers do not depend on the order).
#include "engine/safetensors.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/atomic_file.h"
#include "nlohmann/json.hpp"

namespace tandem::engine {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

using OrderedJson = nlohmann::ordered_json;

struct DtypeInfo {
  absl::string_view name;  // the safetensors dtype string
  at::ScalarType type;
  uint64_t size;  // bytes per element
};

constexpr DtypeInfo kDtypes[] = {
    {"F32", at::kFloat, 4}, {"BF16", at::kBFloat16, 2}, {"F16", at::kHalf, 2},
    {"I64", at::kLong, 8},  {"I32", at::kInt, 4},       {"U8", at::kByte, 1},
};
constexpr absl::string_view kSupportedDtypes = "F32, BF16, F16, I64, I32, U8";
constexpr absl::string_view kMetadataKey = "__metadata__";

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

// One header entry, validated.
struct Entry {
  std::string name;
  const DtypeInfo* dtype = nullptr;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Reads a JSON array of non-negative integers into `out`. False if `value` is anything else.
bool ReadUnsignedArray(const OrderedJson& value, std::vector<uint64_t>* out) {
  if (!value.is_array()) return false;
  for (const OrderedJson& element : value) {
    if (!element.is_number_unsigned()) return false;
    out->push_back(element.get<uint64_t>());
  }
  return true;
}

// Validates one tensor entry of the header against a data section of `data_size` bytes. `error`
// receives the reason, without the file and tensor names.
bool ParseEntry(const std::string& name, const OrderedJson& value, uint64_t data_size, Entry* entry,
                std::string* error) {
  entry->name = name;
  if (!value.is_object()) {
    *error = absl::StrCat("entry is not a JSON object: ", value.dump());
    return false;
  }
  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) {
    *error = "\"dtype\" is missing or not a string";
    return false;
  }
  entry->dtype = FindDtype(dtype->get<std::string>());
  if (entry->dtype == nullptr) {
    *error = absl::StrCat("unknown or unsupported dtype ", dtype->dump(),
                          " (supported: ", kSupportedDtypes, ")");
    return false;
  }
  auto shape = value.find("shape");
  std::vector<uint64_t> dims;
  if (shape == value.end() || !ReadUnsignedArray(*shape, &dims)) {
    *error = "\"shape\" is missing or not an array of non-negative integers";
    return false;
  }
  auto offsets = value.find("data_offsets");
  std::vector<uint64_t> range;
  if (offsets == value.end() || !ReadUnsignedArray(*offsets, &range) || range.size() != 2) {
    *error = "\"data_offsets\" is missing or not [begin, end] with non-negative integers";
    return false;
  }
  entry->begin = range[0];
  entry->end = range[1];
  if (entry->begin > entry->end || entry->end > data_size) {
    *error = absl::StrCat("data_offsets [", entry->begin, ", ", entry->end,
                          "] out of range of the data section of ", data_size, " bytes");
    return false;
  }
  // numel * element size, with overflow counted as a mismatch.
  uint64_t bytes = entry->dtype->size;
  bool overflow = false;
  for (uint64_t dim : dims) {
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      *error = absl::StrCat("shape dimension ", dim, " is too large");
      return false;
    }
    entry->shape.push_back(static_cast<int64_t>(dim));
    overflow = __builtin_mul_overflow(bytes, dim, &bytes) || overflow;
  }
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) {  // no elements, whatever the rest
    bytes = 0;
    overflow = false;
  }
  if (overflow || bytes != entry->end - entry->begin) {
    *error = absl::StrCat("shape ", shape->dump(), " of ", dtype->get<std::string>(), " needs ",
                          overflow ? "more than 2^64" : absl::StrCat(bytes),
                          " bytes, but data_offsets [", entry->begin, ", ", entry->end, "] hold ",
                          entry->end - entry->begin);
    return false;
  }
  return true;
}

absl::Status Invalid(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", path, ": ", what));
}

absl::Status InvalidTensor(const std::string& path, absl::string_view name,
                           absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("safetensors: ", path, ": tensor '", name, "': ", what));
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson& map = header[std::string(kMetadataKey)];
    map = OrderedJson::object();
    for (const auto& [key, value] : metadata) map[key] = value;
  }

  std::vector<at::Tensor> contiguous;
  contiguous.reserve(tensors.size());
  std::set<absl::string_view> names;
  uint64_t data_size = 0;
  try {
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& [name, tensor] = tensors[i];
      if (name.empty()) return Invalid(path, absl::StrCat("tensor #", i, " has an empty name"));
      if (name == kMetadataKey) return InvalidTensor(path, name, "the name is reserved");
      if (!names.insert(name).second) return InvalidTensor(path, name, "duplicate name");
      if (!tensor.defined()) return InvalidTensor(path, name, "undefined tensor");
      if (!tensor.device().is_cpu()) {
        return InvalidTensor(path, name,
                             absl::StrCat("is on ", tensor.device().str(), ", not the CPU"));
      }
      const DtypeInfo* dtype = FindDtype(tensor.scalar_type());
      if (dtype == nullptr) {
        return InvalidTensor(path, name,
                             absl::StrCat("dtype ", c10::toString(tensor.scalar_type()),
                                          " is not supported (supported: ", kSupportedDtypes, ")"));
      }
      contiguous.push_back(tensor.contiguous());
      const uint64_t bytes = contiguous.back().nbytes();
      OrderedJson entry = OrderedJson::object();
      entry["dtype"] = std::string(dtype->name);
      entry["shape"] = tensor.sizes().vec();
      entry["data_offsets"] = {data_size, data_size + bytes};
      header[name] = std::move(entry);
      data_size += bytes;
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("safetensors: ", path, ": ", e.what()));
  }

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
  return WriteFileAtomically(path, file);
}

namespace {

// Validates the header text of a file whose data section holds `data_size` bytes.
absl::StatusOr<SafetensorsHeader> ParseHeader(const std::string& path, std::string_view header_text,
                                              uint64_t data_start, uint64_t data_size) {
  OrderedJson header;
  try {
    header = OrderedJson::parse(header_text);
  } catch (const nlohmann::json::exception& e) {
    return Invalid(path, absl::StrCat("header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) return Invalid(path, "header is not a JSON object");

  SafetensorsHeader parsed;
  parsed.path = path;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object() ||
          !std::all_of(value.begin(), value.end(), [](const auto& v) { return v.is_string(); })) {
        return Invalid(path, "\"__metadata__\" is not a map of strings");
      }
      for (const auto& [key, text] : value.items()) parsed.metadata[key] = text.get<std::string>();
      continue;
    }
    Entry entry;
    std::string error;
    if (!ParseEntry(name, value, data_size, &entry, &error)) {
      return InvalidTensor(path, name, error);
    }
    entries.push_back(std::move(entry));
  }

  // File order; empty tensors may sit anywhere, the others must not share a byte.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    if (entry.begin == entry.end) continue;
    if (previous != nullptr && entry.begin < previous->end) {
      return InvalidTensor(
          path, entry.name,
          absl::StrCat("data_offsets [", entry.begin, ", ", entry.end, "] overlap those of '",
                       previous->name, "' [", previous->begin, ", ", previous->end, "]"));
    }
    previous = &entry;
  }
  for (Entry& entry : entries) {
    parsed.tensors.push_back({std::move(entry.name), entry.dtype->type, std::move(entry.shape),
                              data_start + entry.begin, data_start + entry.end});
  }
  return parsed;
}

// The header length of a file of `file_size` bytes, from its first 8 bytes.
absl::StatusOr<uint64_t> HeaderSize(const std::string& path, const char* first,
                                    uint64_t file_size) {
  uint64_t header_size = 0;
  if (file_size < sizeof(header_size)) {
    return Invalid(path, absl::StrCat("file is ", file_size,
                                      " bytes, too short for the 8-byte header length"));
  }
  std::memcpy(&header_size, first, sizeof(header_size));
  const uint64_t rest = file_size - sizeof(header_size);
  if (header_size > rest) {
    return Invalid(path, absl::StrCat("header length ", header_size, " exceeds the ", rest,
                                      " bytes that follow it"));
  }
  return header_size;
}

}  // namespace

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
  const std::string& bytes = *file;
  absl::StatusOr<uint64_t> header_size = HeaderSize(path, bytes.data(), bytes.size());
  if (!header_size.ok()) return header_size.status();
  const uint64_t data_start = sizeof(uint64_t) + *header_size;
  absl::StatusOr<SafetensorsHeader> header =
      ParseHeader(path, std::string_view(bytes.data() + sizeof(uint64_t), *header_size), data_start,
                  bytes.size() - data_start);
  if (!header.ok()) return header.status();

  std::vector<std::pair<std::string, at::Tensor>> tensors;
  tensors.reserve(header->tensors.size());
  try {
    for (SafetensorsEntry& entry : header->tensors) {
      at::Tensor tensor = at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype));
      if (entry.end > entry.begin) {
        std::memcpy(tensor.data_ptr(), bytes.data() + entry.begin, entry.end - entry.begin);
      }
      tensors.emplace_back(std::move(entry.name), std::move(tensor));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("safetensors: ", path, ": ", e.what()));
  }
  return tensors;
}

absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path) {
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("safetensors: ", path, ": ", ec.message()));
  std::ifstream in(path, std::ios::binary);
  char first[sizeof(uint64_t)] = {};
  if (!in.read(first, std::min<uint64_t>(sizeof(first), file_size)) && file_size >= sizeof(first)) {
    return absl::DataLossError(absl::StrCat("safetensors: ", path, ": cannot read the header"));
  }
  absl::StatusOr<uint64_t> header_size = HeaderSize(path, first, file_size);
  if (!header_size.ok()) return header_size.status();
  std::string text(*header_size, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(text.size()))) {
    return absl::DataLossError(absl::StrCat("safetensors: ", path, ": cannot read the header"));
  }
  const uint64_t data_start = sizeof(uint64_t) + *header_size;
  return ParseHeader(path, text, data_start, file_size - data_start);
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
  return tensor;
}

}  // namespace tandem::engine
