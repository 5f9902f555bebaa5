// The coordinator's rendezvous store (tandem.v1.Coordinator Store* rpcs) as a KeyValueStore, for
// the groups' communicators to bootstrap from (docs/design.md §5). Thread-safe (gRPC stubs are).
#pragma once

#include <memory>
#include <string>

#include "common/kv_store.h"

namespace tandem::rpc {

// Talks to the coordinator at HOST:PORT; every call names it in its errors.
std::shared_ptr<KeyValueStore> CreateRemoteStore(const std::string& coordinator_address);

}  // namespace tandem::rpc
