// A tensor's bytes as plain values: how tensors cross the seam between LibTorch code and gRPC code
// (docs/design.md §6), which must never meet in one translation unit. Torch code fills it from a
// contiguous tensor (data_ptr, sizes, element type); the transport reads or writes the bytes in
// place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

// Element types a tensor crosses in; the values match tandem.v1.DType.
enum class DType : int { kFloat32 = 1, kBFloat16 = 2, kFloat16 = 3, kFloat64 = 4, kUInt8 = 5 };

inline size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
    case DType::kFloat64:
      return 8;
    case DType::kUInt8:
      return 1;
  }
  return 0;
}

inline const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
    case DType::kFloat64:
      return "float64";
    case DType::kUInt8:
      return "uint8";
  }
  return "unknown";
}

// A view of a contiguous, row-major tensor's bytes. Does not own them.
struct TensorBytes {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::byte* data = nullptr;
  size_t size = 0;  // bytes: product(shape) * DTypeSize(dtype)
};

// "[4, 16, 64]"
inline std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace tandem
