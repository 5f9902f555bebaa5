// The coordinator's jobs' specs, each read from its stored JSON (JobRecord::spec_json) once: the
// scheduler's every round, `tandem describe` and each attempt's runner all take the same resolved
// spec from here instead of parsing it again.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/job_store.h"
#include "jobspec/job_spec.h"

namespace tandem::coordinator {

class JobSpecs {
 public:
  using Spec = std::shared_ptr<const jobspec::ResolvedJobSpec>;

  // The job's spec: the one Put or an earlier Get gave, else `job.spec_json` resolved
  // (jobspec::ResolveJobSpecJson, the job's id as the source of its errors). A stored spec that no
  // longer validates (recorded by a version that accepted it) is InvalidArgument, not cached.
  absl::StatusOr<Spec> Get(const JobRecord& job);
  // The spec of a job just submitted, resolved by the caller.
  void Put(const std::string& job_id, jobspec::ResolvedJobSpec spec);
  // A job that will not be scheduled again (it ended, or was deleted).
  void Forget(const std::string& job_id);

 private:
  std::mutex mu_;
  std::map<std::string, Spec> specs_;
};

}  // namespace tandem::coordinator
