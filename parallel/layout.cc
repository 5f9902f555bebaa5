#include "parallel/layout.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::parallel {

std::string EngineGroupName(Role role, int parallel, int index) {
  if (role == Role::kLlm && parallel > 1) return absl::StrCat(RoleName(role), "/dp", index);
  return RoleName(role);
}

std::string ParallelGroupName(Role role, int replica) {
  return absl::StrCat(RoleName(role), role == Role::kVision ? "/sp" : "/tp", replica);
}

std::string RankLayout::Describe() const {
  std::string text =
      absl::StrCat(RoleName(role), " rank ", rank, " of ", group_size, ": replica ", replica(),
                   " of ", replicas(), ", index ", index(), " of ", parallel, "; engine ",
                   engine_group(), " rank ", engine_rank(), " of ", engine_size());
  if (parallel > 1) absl::StrAppend(&text, "; ", parallel_group());
  return text;
}

absl::StatusOr<RankCommunicators> CreateRankCommunicators(const RankLayout& layout,
                                                          std::shared_ptr<KeyValueStore> store,
                                                          const c10::Device& device,
                                                          engine::GroupOptions options) {
  RankCommunicators out;
  options.group_name = layout.engine_group();
  ASSIGN_OR_RETURN(
      out.engine, engine::CreateGroupCommunicator(store, layout.engine_rank(), layout.engine_size(),
                                                  device, options));
  if (layout.parallel > 1) {
    options.group_name = layout.parallel_group();
    ASSIGN_OR_RETURN(out.parallel,
                     engine::CreateGroupCommunicator(std::move(store), layout.index(),
                                                     layout.parallel, device, options));
  }
  return out;
}

}  // namespace tandem::parallel
