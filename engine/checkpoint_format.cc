#include "engine/checkpoint_format.h"

#include <algorithm>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tandem::engine {

std::string CheckpointShardName(int rank, int world) {
  return absl::StrCat("rank_", rank, "_of_", world, ".safetensors");
}

const std::string* CheckpointMeta(const SafetensorsHeader& shard, const std::string& key) {
  auto it = shard.metadata.find(key);
  return it == shard.metadata.end() ? nullptr : &it->second;
}

absl::StatusOr<int> SavedWorldSize(const std::string& marker) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(marker));
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("world_size") ||
      !json["world_size"].is_number_integer() || json["world_size"].get<int64_t>() < 1 ||
      json["world_size"].get<int64_t>() > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: ", marker, ": no valid world_size"));
  }
  return static_cast<int>(json["world_size"].get<int64_t>());
}

absl::StatusOr<std::vector<int64_t>> ParseUnitElements(const SafetensorsHeader& shard,
                                                       int64_t num_parameters) {
  const std::string* value = CheckpointMeta(shard, "unit_elements");
  std::vector<int64_t> elements;
  int64_t total = 0;
  bool ok = value != nullptr && (!value->empty() || num_parameters == 0);
  if (ok && !value->empty()) {
    for (absl::string_view part : absl::StrSplit(*value, ',')) {
      int64_t numel = 0;
      ok = absl::SimpleAtoi(part, &numel) && numel > 0 &&
           !__builtin_add_overflow(total, numel, &total);
      if (!ok) break;
      elements.push_back(numel);
    }
  }
  if (!ok || total != num_parameters) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: ", shard.path, ": unit_elements is ", value ? *value : "absent",
                     ", not the element counts of units holding ", num_parameters, " parameters"));
  }
  return elements;
}

std::vector<DomainSegment> DomainSegments(const std::vector<int64_t>& unit_elements, int world,
                                          int stage, int rank, int64_t* domain_elements) {
  std::vector<DomainSegment> segments;
  int64_t global = 0, local = 0;
  for (int64_t numel : unit_elements) {
    const int64_t padded = (numel + world - 1) / world * world;
    const int64_t start = stage == 0 ? 0 : rank * (padded / world);
    const int64_t length = stage == 0 ? padded : padded / world;
    const int64_t real_end = std::min(start + length, numel);
    if (real_end > start) segments.push_back({global + start, local, real_end - start});
    local += length;
    global += numel;
  }
  *domain_elements = local;
  return segments;
}

}  // namespace tandem::engine
