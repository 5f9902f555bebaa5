#include "hf/checkpoint_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "common/strict_json.h"

namespace tandem::hf {
namespace fs = std::filesystem;

absl::StatusOr<CheckpointFiles> CheckpointFiles::Open(const std::string& directory) {
  CheckpointFiles files;
  files.directory_ = directory;
  std::set<std::string> file_names;
  const fs::path index_path = fs::path(directory) / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    ASSIGN_OR_RETURN(const std::string text, ReadUserFile(index_path.string()));
    auto index = ParseJsonStrict(text);
    if (!index.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(index_path.string(), ": ", index.status().message()));
    const auto map = index->find("weight_map");
    if (map == index->end() || !map->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path.string(), ": weight_map must be an object"));
    }
    for (const auto& [name, file] : map->items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": weight_map.", name,
                                                       " must name a file of the directory"));
      }
      weight_map[name] = file.get<std::string>();
      file_names.insert(file.get<std::string>());
    }
  } else {
    for (const auto& entry : fs::directory_iterator(directory, ec)) {
      const std::string name = entry.path().filename().string();
      if (absl::EndsWith(name, ".safetensors")) file_names.insert(name);
    }
    if (ec) return absl::NotFoundError(absl::StrCat(directory, ": ", ec.message()));
  }
  if (file_names.empty()) {
    const bool bin = fs::exists(fs::path(directory) / "pytorch_model.bin", ec) ||
                     fs::exists(fs::path(directory) / "pytorch_model.bin.index.json", ec);
    return absl::NotFoundError(
        absl::StrCat(directory, ": no *.safetensors weights",
                     bin ? " (PyTorch .bin checkpoints are not read: convert them to "
                           "safetensors with transformers' save_pretrained)"
                         : ""));
  }
  for (const std::string& name : file_names) {
    ASSIGN_OR_RETURN(auto header,
                     engine::ReadSafetensorsHeader((fs::path(directory) / name).string()));
    const size_t at = files.headers_.size();
    for (const auto& tensor : header.tensors) {
      const auto [it, inserted] = files.file_of_.emplace(tensor.name, at);
      if (!inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat(directory, ": tensor '", tensor.name, "' is in both ",
                         files.headers_[it->second].path, " and ", header.path));
      }
    }
    files.headers_.push_back(std::move(header));
  }
  for (const auto& [name, file] : weight_map) {
    const auto it = files.file_of_.find(name);
    if (it == files.file_of_.end() ||
        fs::path(files.headers_[it->second].path).filename() != file) {
      return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": tensor '", name,
                                                     "' is not in ", file, " as the index says"));
    }
  }
  return files;
}

std::vector<std::string> CheckpointFiles::Names() const {
  std::vector<std::string> names;
  names.reserve(file_of_.size());
  for (const auto& [name, file] : file_of_) names.push_back(name);
  return names;
}

const engine::SafetensorsEntry* CheckpointFiles::Find(const std::string& name) const {
  const auto it = file_of_.find(name);
  return it == file_of_.end() ? nullptr : headers_[it->second].Find(name);
}

absl::StatusOr<at::Tensor> CheckpointFiles::Read(const std::string& name) const {
  const auto it = file_of_.find(name);
  if (it == file_of_.end())
    return absl::NotFoundError(absl::StrCat(directory_, ": no tensor '", name, "'"));
  return engine::ReadSafetensor(headers_[it->second], name);
}

}  // namespace tandem::hf
