// engine::CreateGroupCommunicator (communicator.h): which backend a group's rank joins.
#include <utility>

#include "engine/communicator.h"

namespace tandem::engine {

absl::StatusOr<std::shared_ptr<Communicator>> CreateGroupCommunicator(
    std::shared_ptr<KeyValueStore> store, int rank, int world_size, const c10::Device& device,
    const GroupOptions& options) {
  if (world_size == 1) return CreateSingleRankCommunicator(options.group_name);
  if (device.is_cuda()) {
#ifdef TANDEM_HAVE_NCCL
    NcclOptions nccl;
    nccl.group_name = options.group_name;
    nccl.device_index = device.index();
    nccl.timeout = options.timeout;
    return CreateNcclCommunicator(std::move(store), rank, world_size, nccl);
#else
    return absl::InvalidArgumentError(
        "this actor was built without NCCL; it cannot join a CUDA group");
#endif
  }
  GlooOptions gloo;
  gloo.group_name = options.group_name;
  gloo.hostname = options.hostname;
  gloo.timeout = options.timeout;
  return CreateGlooCommunicator(std::move(store), rank, world_size, gloo);
}

}  // namespace tandem::engine
