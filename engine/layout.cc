#include "engine/layout.h"

#include "absl/strings/str_cat.h"

namespace tandem::engine {

absl::StatusOr<Layout> Layout::Build(std::vector<ParamSpec> params, int world_size,
                                     int64_t bucket_elements) {
  if (world_size < 1) return absl::InvalidArgumentError("layout: world size must be >= 1");
  if (bucket_elements < 1) return absl::InvalidArgumentError("layout: bucket size must be >= 1");

  Layout layout;
  layout.world_size_ = world_size;
  layout.slots_.resize(params.size());
  std::vector<bool> group_closed;
  auto close_unit = [&](Unit& unit) {
    unit.padded = (unit.numel + world_size - 1) / world_size * world_size;
    unit.shard = unit.padded / world_size;
    unit.full_offset = layout.full_elements_;
    unit.shard_offset = layout.shard_elements_;
    layout.full_elements_ += unit.padded;
    layout.shard_elements_ += unit.shard;
    layout.units_.push_back(unit);
  };

  Unit current;
  bool open = false;
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    const ParamSpec& p = params[i];
    if (p.numel <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("layout: parameter ", p.name, " is empty"));
    }
    if (p.group >= 0) {
      if (p.group >= static_cast<int>(group_closed.size())) group_closed.resize(p.group + 1, false);
      if (group_closed[p.group]) {
        return absl::InvalidArgumentError(absl::StrCat("layout: parameters of block ", p.group,
                                                       " are not consecutive (at ", p.name, ")"));
      }
    }
    bool starts_new = !open || p.group != current.group ||
                      (p.group < 0 && current.numel + p.numel > bucket_elements);
    if (starts_new && open) {
      if (current.group >= 0) group_closed[current.group] = true;
      close_unit(current);
    }
    if (starts_new) {
      current = Unit{};
      current.first_param = i;
      current.group = p.group;
      open = true;
    }
    layout.slots_[i] = ParamSlot{static_cast<int>(layout.units_.size()), current.numel};
    current.numel += p.numel;
    current.end_param = i + 1;
    layout.num_elements_ += p.numel;
  }
  if (open) close_unit(current);
  layout.params_ = std::move(params);
  return layout;
}

}  // namespace tandem::engine
