// libFuzzer target: a safetensors file's header (common/safetensors_format.h): the 8-byte length,
// then the JSON, validated against the bytes that follow. Beyond "no crash, no hang, no leak":
// every tensor of a header that validates lies inside the data, in file order, without overlap,
// and holds exactly its shape's bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/safetensors_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  absl::StatusOr<uint64_t> header_size = tandem::SafetensorsHeaderSize("fuzz", bytes, size);
  if (!header_size.ok()) return 0;
  const uint64_t data_start = 8 + *header_size;
  absl::StatusOr<tandem::SafetensorsLayout> layout = tandem::ParseSafetensorsHeader(
      "fuzz", std::string_view(bytes + 8, *header_size), data_start, size - data_start);
  if (!layout.ok()) return 0;
  uint64_t previous_end = data_start;
  for (const tandem::SafetensorsRecord& t : layout->tensors) {
    uint64_t bytes_needed = tandem::SafetensorsElementSize(t.dtype);
    for (int64_t dim : t.shape) bytes_needed *= static_cast<uint64_t>(dim);
    const bool empty = t.begin == t.end;
    if (t.begin < data_start || t.end > size || t.begin > t.end ||
        bytes_needed != t.end - t.begin || (!empty && t.begin < previous_end)) {
      std::fprintf(stderr, "tensor '%s' [%llu, %llu) breaks the layout\n", t.name.c_str(),
                   static_cast<unsigned long long>(t.begin),
                   static_cast<unsigned long long>(t.end));
      std::abort();
    }
    if (!empty) previous_end = t.end;
  }
  return 0;
}
