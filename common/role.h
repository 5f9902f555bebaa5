// The two groups of a job, by one name everywhere: the vision encoder's and the LLM's. The values
// are tandem.v1.Role's (proto/tandem/v1/actor.proto), so the wire converts with a cast; job specs,
// messages, logs, rendezvous keys and checkpoint folders use RoleName's words.
#pragma once

namespace tandem {

enum class Role { kVision = 1, kLlm = 2 };

inline constexpr Role kRoles[] = {Role::kVision, Role::kLlm};

// "vision", "llm".
inline const char* RoleName(Role role) { return role == Role::kVision ? "vision" : "llm"; }

}  // namespace tandem
