#include "rundir/checkpoint_dir.h"

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tandem::rundir {
namespace {
namespace fs = std::filesystem;
constexpr char kMarker[] = "complete";
constexpr char kDamaged[] = "damaged";
constexpr char kPrefix[] = "step-";
}  // namespace

std::string CheckpointName(int64_t step) { return absl::StrFormat("%s%06d", kPrefix, step); }

absl::Status MarkCheckpointComplete(const CheckpointInfo& info) {
  const nlohmann::json marker = {
      {"step", info.step}, {"vision_actors", info.vision_actors}, {"llm_actors", info.llm_actors}};
  return WriteFileAtomically((fs::path(info.directory) / kMarker).string(), marker.dump() + "\n");
}

absl::StatusOr<CheckpointInfo> ReadCheckpoint(const std::string& directory) {
  const std::string path = (fs::path(directory) / kMarker).string();
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", directory, " does not exist or is not a directory"));
  }
  absl::StatusOr<std::string> text = ReadUserFile(path);
  if (absl::IsNotFound(text.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", directory, " is incomplete (no '", kMarker,
                     "' marker: its save was interrupted, or it is not a checkpoint directory)"));
  }
  RETURN_IF_ERROR(text.status());
  const nlohmann::json marker = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  CheckpointInfo info;
  info.directory = directory;
  auto number = [&](const char* key, int64_t* out) {
    if (!marker.is_object() || !marker.contains(key) || !marker[key].is_number_integer()) {
      return false;
    }
    *out = marker[key].get<int64_t>();
    return *out >= 0;
  };
  if (!number("step", &info.step) || !number("vision_actors", &info.vision_actors) ||
      !number("llm_actors", &info.llm_actors)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": not a checkpoint marker (want {\"step\", \"vision_actors\", "
                     "\"llm_actors\"} as integers >= 0)"));
  }
  return info;
}

std::optional<CheckpointInfo> LatestCheckpoint(const std::string& run_dir, int64_t at_most) {
  std::optional<CheckpointInfo> latest;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (name.rfind(kPrefix, 0) != 0 || !absl::SimpleAtoi(name.substr(sizeof(kPrefix) - 1), &step) ||
        step > at_most || (latest && step <= latest->step)) {
      continue;
    }
    if (fs::exists(entry.path() / kDamaged, ec)) continue;
    absl::StatusOr<CheckpointInfo> info = ReadCheckpoint(entry.path().string());
    if (info.ok() && info->step == step) latest = *std::move(info);
  }
  return latest;
}

absl::Status MarkCheckpointDamaged(const std::string& directory, const std::string& reason) {
  return WriteFileAtomically((fs::path(directory) / kDamaged).string(), reason + "\n");
}

}  // namespace tandem::rundir
