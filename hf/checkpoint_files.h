// The safetensors files of a Hugging Face model directory, as one table of tensors: sharded with
// model.safetensors.index.json ({"weight_map": {name: file}}), or every *.safetensors file of the
// directory when there is no index. Headers are read at Open; tensor bytes only when asked for.
//
// Errors: NotFound when the directory has no safetensors file (a PyTorch .bin checkpoint is named
// as unsupported), InvalidArgument naming the file for a malformed index or header, a tensor the
// index places in a file that lacks it, or a name held by two files.
// Thread-compatible.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/safetensors.h"

namespace tandem::hf {

class CheckpointFiles {
 public:
  static absl::StatusOr<CheckpointFiles> Open(const std::string& directory);

  // Every tensor name, sorted.
  std::vector<std::string> Names() const;
  // The entry of `name` (dtype, shape), or null.
  const engine::SafetensorsEntry* Find(const std::string& name) const;
  // Reads one tensor to the CPU; NotFound naming the directory for a name it does not hold.
  absl::StatusOr<at::Tensor> Read(const std::string& name) const;

  const std::string& directory() const { return directory_; }

 private:
  std::string directory_;
  std::vector<engine::SafetensorsHeader> headers_;
  std::map<std::string, size_t> file_of_;  // tensor name -> index into headers_
};

}  // namespace tandem::hf
