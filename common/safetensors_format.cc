#include "common/safetensors_format.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/strict_json.h"
#include "nlohmann/json.hpp"
#include "zlib.h"

namespace tandem {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr int kMaxHeaderDepth = 4;      // {name: {"shape": [...]}} is 3
constexpr size_t kMaxArrayValues = 64;  // a shape's dimensions; data_offsets has 2

// This Abseil's string_view is its own type, so std::string_view goes through this into StrCat.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// A piece of something from the file for an error message: at most 64 characters.
std::string Shown(std::string_view text) {
  if (text.size() <= 64) return std::string(text);
  return absl::StrCat(Sv(text.substr(0, 64)), "... (", text.size(), " characters)");
}

absl::Status Invalid(const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", path, ": ", Sv(what)));
}

absl::Status InvalidTensor(const std::string& path, std::string_view name, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("safetensors: ", path, ": tensor '", Shown(name), "': ", Sv(what)));
}

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
bool ParseEntry(const std::string& name, const OrderedJson& value, uint64_t data_size,
                SafetensorsRecord* entry, std::string* error) {
  entry->name = name;
  if (!value.is_object()) {
    *error = absl::StrCat("entry is not a JSON object but a", value.is_array() ? "n " : " ",
                          value.type_name());
    return false;
  }
  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) {
    *error = "\"dtype\" is missing or not a string";
    return false;
  }
  entry->dtype = dtype->get<std::string>();
  const uint64_t element_size = SafetensorsElementSize(entry->dtype);
  if (element_size == 0) {
    *error =
        absl::StrCat("unknown or unsupported dtype \"", Shown(dtype->get_ref<const std::string&>()),
                     "\" (supported: ", kSafetensorsDtypes, ")");
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
  uint64_t bytes = element_size;
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
    const std::string shown_shape = dims.size() <= 8
                                        ? absl::StrCat("[", absl::StrJoin(dims, ", "), "]")
                                        : absl::StrCat("of ", dims.size(), " dimensions");
    *error = absl::StrCat("shape ", shown_shape, " of ", entry->dtype, " needs ",
                          overflow ? "more than 2^64" : absl::StrCat(bytes),
                          " bytes, but data_offsets [", entry->begin, ", ", entry->end, "] hold ",
                          entry->end - entry->begin);
    return false;
  }
  return true;
}

// Validates the header text of a file whose data section holds `data_size` bytes.
}  // namespace

absl::StatusOr<SafetensorsLayout> ParseSafetensorsHeader(const std::string& path,
                                                         std::string_view header_text,
                                                         uint64_t data_start, uint64_t data_size) {
  // Refused while parsing, before the document is built: nesting, and arrays longer than any shape
  // (100 MB of "[1,1,1,..." would otherwise become gigabytes of JSON values).
  struct TooDeep {};
  struct TooLong {};
  size_t array_values = 0;
  OrderedJson header;
  try {
    header = OrderedJson::parse(header_text,
                                [&](int depth, nlohmann::json::parse_event_t event, OrderedJson&) {
                                  if (depth > kMaxHeaderDepth) throw TooDeep{};
                                  if (event == nlohmann::json::parse_event_t::array_start)
                                    array_values = 0;
                                  if (event == nlohmann::json::parse_event_t::value && depth >= 3 &&
                                      ++array_values > kMaxArrayValues) {
                                    throw TooLong{};
                                  }
                                  return true;
                                });
  } catch (const TooDeep&) {
    return Invalid(path, absl::StrCat("header nests more than ", kMaxHeaderDepth, " levels deep"));
  } catch (const TooLong&) {
    return Invalid(path, absl::StrCat("header has an array of more than ", kMaxArrayValues,
                                      " values (a shape has at most that many dimensions)"));
  } catch (const nlohmann::json::exception& e) {
    return Invalid(path, absl::StrCat("header is not valid JSON: ", Shown(e.what())));
  }
  if (!header.is_object()) return Invalid(path, "header is not a JSON object");

  SafetensorsLayout parsed;
  std::vector<SafetensorsRecord> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kSafetensorsMetadataKey) {
      if (!value.is_object() ||
          !std::all_of(value.begin(), value.end(), [](const auto& v) { return v.is_string(); })) {
        return Invalid(path, "\"__metadata__\" is not a map of strings");
      }
      for (const auto& [key, text] : value.items()) parsed.metadata[key] = text.get<std::string>();
      continue;
    }
    SafetensorsRecord entry;
    std::string error;
    if (!ParseEntry(name, value, data_size, &entry, &error)) {
      return InvalidTensor(path, name, error);
    }
    entries.push_back(std::move(entry));
  }
  // The checksums, by tensor name. A map naming a tensor the file does not hold belongs to another
  // layout (a tool re-saved the tensors and kept the metadata): it is ignored, not trusted.
  if (auto stored = parsed.metadata.find(std::string(kSafetensorsChecksumKey));
      stored != parsed.metadata.end()) {
    const std::string key = absl::StrCat("\"", Sv(kSafetensorsChecksumKey), "\"");
    absl::StatusOr<nlohmann::json> map = ParseJsonStrict(stored->second);
    if (!map.ok() || !map->is_object()) {
      return Invalid(path, absl::StrCat(key, " is not a JSON object of tensor names to checksums"));
    }
    std::map<std::string, uint32_t> checksums;
    for (const auto& [name, value] : map->items()) {
      uint32_t crc = 0;
      if (!value.is_string() || value.get_ref<const std::string&>().size() != 8 ||
          !absl::SimpleHexAtoi(value.get_ref<const std::string&>(), &crc)) {
        return Invalid(path, absl::StrCat(key, " for '", Shown(name), "' is not 8 hex digits"));
      }
      checksums[name] = crc;
    }
    const bool same_tensors =
        std::all_of(checksums.begin(), checksums.end(), [&](const auto& entry) {
          return std::any_of(entries.begin(), entries.end(),
                             [&](const SafetensorsRecord& e) { return e.name == entry.first; });
        });
    if (same_tensors) {
      for (SafetensorsRecord& entry : entries) {
        if (auto it = checksums.find(entry.name); it != checksums.end()) entry.crc32 = it->second;
      }
    }
  }

  // File order; empty tensors may sit anywhere, the others must not share a byte.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const SafetensorsRecord& a, const SafetensorsRecord& b) {
                     return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
                   });
  const SafetensorsRecord* previous = nullptr;
  for (const SafetensorsRecord& entry : entries) {
    if (entry.begin == entry.end) continue;
    if (previous != nullptr && entry.begin < previous->end) {
      return InvalidTensor(
          path, entry.name,
          absl::StrCat("data_offsets [", entry.begin, ", ", entry.end, "] overlap those of '",
                       previous->name, "' [", previous->begin, ", ", previous->end, "]"));
    }
    previous = &entry;
  }
  for (SafetensorsRecord& entry : entries) {
    entry.begin += data_start;
    entry.end += data_start;
    parsed.tensors.push_back(std::move(entry));
  }
  return parsed;
}

// The header length of a file of `file_size` bytes, from its first 8 bytes.
absl::StatusOr<uint64_t> SafetensorsHeaderSize(const std::string& path, const char* first,
                                               uint64_t file_size) {
  uint64_t header_size = 0;
  if (file_size < sizeof(header_size)) {
    return Invalid(path, absl::StrCat("file is ", file_size,
                                      " bytes, too short for the 8-byte header length"));
  }
  std::memcpy(&header_size, first, sizeof(header_size));
  const uint64_t rest = file_size - sizeof(header_size);
  if (header_size > kMaxSafetensorsHeaderBytes) {
    return Invalid(path, absl::StrCat("header length ", header_size, " is over the limit of ",
                                      kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (header_size > rest) {
    return Invalid(path, absl::StrCat("header length ", header_size, " exceeds the ", rest,
                                      " bytes that follow it"));
  }
  return header_size;
}

uint64_t SafetensorsElementSize(std::string_view dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  if (dtype == "I64") return 8;
  if (dtype == "U8") return 1;
  return 0;
}

uint32_t SafetensorsCrc32(const void* data, uint64_t size) {
  return static_cast<uint32_t>(
      crc32_z(crc32_z(0, nullptr, 0), static_cast<const Bytef*>(data), size));
}

std::string SafetensorsHex32(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

absl::Status SafetensorsChecksumMismatch(const std::string& path, std::string_view name,
                                         uint32_t stored, uint32_t read) {
  return absl::DataLossError(absl::StrCat(
      "safetensors: ", path, ": tensor '", Shown(name), "': checksum mismatch (stored crc32 ",
      SafetensorsHex32(stored), ", read ", SafetensorsHex32(read), "): the file is damaged"));
}

}  // namespace tandem
