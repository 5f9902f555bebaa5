// A rank's place in its group's parallel layout, the names of its communicators, and the one
// function that creates them, as torchtitan's ParallelDims is one object a reader can print.
//
// A group of group_size ranks with a parallel degree p > 1 (vision.parallel.sequence,
// llm.parallel.tensor) is group_size / p data-parallel replicas of p ranks: rank = replica * p +
// index (NOTE [Parallel sets] in step/stage.h). Each rank joins
//   the engine's group   the whole group for the vision side (its sequence-parallel ranks hold
//                        whole weights) and for any group without parallelism ("vision", "llm");
//                        with tensor parallelism the replicas' ranks of its index ("llm/dp<index>")
//   its replica's group  with p > 1: "vision/sp<replica>" or "llm/tp<replica>"
// Each name keys its own rendezvous, so an error names the dimension. Nothing else names them:
// the actors, the step tests and the benches all take the names from here.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/kv_store.h"
#include "common/role.h"
#include "engine/communicator.h"

namespace tandem::parallel {

// "vision", "llm", or with tensor parallelism "llm/dp<index>".
std::string EngineGroupName(Role role, int parallel, int index);
// "vision/sp<replica>", "llm/tp<replica>".
std::string ParallelGroupName(Role role, int replica);

struct RankLayout {
  Role role = Role::kVision;
  int rank = 0;        // in its group
  int group_size = 1;  // ranks of the group
  int parallel = 1;    // ranks each model splits over; divides group_size

  int replica() const { return rank / parallel; }
  int index() const { return rank % parallel; }
  int replicas() const { return group_size / parallel; }
  bool engine_over_replicas() const { return role == Role::kLlm && parallel > 1; }
  int engine_rank() const { return engine_over_replicas() ? replica() : rank; }
  int engine_size() const { return engine_over_replicas() ? replicas() : group_size; }
  std::string engine_group() const { return EngineGroupName(role, parallel, index()); }
  std::string parallel_group() const { return ParallelGroupName(role, replica()); }
  // "llm rank 3 of 4: replica 1 of 2, index 1 of 2; engine llm/dp1 rank 1 of 2; llm/tp1"
  std::string Describe() const;
};

struct RankCommunicators {
  std::shared_ptr<engine::Communicator> engine;    // the engine's group
  std::shared_ptr<engine::Communicator> parallel;  // the replica's; null when parallel is 1
};

// Joins the rank's groups through `store` (engine::CreateGroupCommunicator under each group's
// name; `options.group_name` is ignored). Its errors name the group.
absl::StatusOr<RankCommunicators> CreateRankCommunicators(const RankLayout& layout,
                                                          std::shared_ptr<KeyValueStore> store,
                                                          const c10::Device& device,
                                                          engine::GroupOptions options);

}  // namespace tandem::parallel
