#include "coordinator/job_specs.h"

#include <utility>

#include "common/status_macros.h"

namespace tandem::coordinator {

absl::StatusOr<JobSpecs::Spec> JobSpecs::Get(const JobRecord& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = specs_.find(job.id); it != specs_.end()) return it->second;
  }
  ASSIGN_OR_RETURN(jobspec::ResolvedJobSpec resolved,
                   jobspec::ResolveJobSpecJson(job.spec_json, job.id));
  auto spec = std::make_shared<const jobspec::ResolvedJobSpec>(std::move(resolved));
  std::lock_guard<std::mutex> lock(mu_);
  return specs_.try_emplace(job.id, std::move(spec)).first->second;
}

void JobSpecs::Put(const std::string& job_id, jobspec::ResolvedJobSpec spec) {
  std::lock_guard<std::mutex> lock(mu_);
  specs_[job_id] = std::make_shared<const jobspec::ResolvedJobSpec>(std::move(spec));
}

void JobSpecs::Forget(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  specs_.erase(job_id);
}

}  // namespace tandem::coordinator
