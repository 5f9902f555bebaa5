#include "coordinator/laggards.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::coordinator {

std::string DescribeLaggards(const std::vector<RankProgress>& ranks) {
  std::map<std::string, int64_t> reached;  // by group: the highest collective a rank entered
  for (const RankProgress& r : ranks) {
    int64_t& highest = reached[r.group];
    highest = std::max(highest, r.last_collective);
  }
  std::vector<std::string> behind;
  for (const RankProgress& r : ranks) {
    const int64_t highest = reached[r.group];
    if (r.last_collective >= highest) continue;
    behind.push_back(absl::StrCat(r.group, " rank ", r.rank, " (", r.actor,
                                  ") did not enter collective #", highest, " of group ", r.group,
                                  " (its last: #", r.last_collective, ")"));
  }
  return absl::StrJoin(behind, "; ");
}

}  // namespace tandem::coordinator
