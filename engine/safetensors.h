// The safetensors file format (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length, a JSON header {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the raw little-endian tensor bytes. Tensors are written in the order given, names kept as given.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::engine {

// Writes CPU tensors (fp32, bf16, fp16, int64, int32, uint8) atomically to `path`. Non-contiguous
// tensors are made contiguous. Duplicate or empty names are InvalidArgument.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Reads a safetensors file into CPU tensors, in file order. Malformed files are InvalidArgument naming
// the file and what is wrong (header length, JSON, offsets out of range, unknown dtype).
absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> ReadSafetensors(
    const std::string& path);

}  // namespace tandem::engine
