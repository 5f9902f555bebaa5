// JobRecord (job_store.h) as the tandem.v1.Job message that GetJob, ListJobs and WatchJob answer
// with. Kept apart from the job store, which is protobuf-free.
#pragma once

#include "coordinator/job_store.h"
#include "proto/tandem/v1/coordinator.pb.h"

namespace tandem::coordinator {

// The proto view of a stored job. JobState's values are tandem.v1.JobState's.
v1::Job ToProto(const JobRecord& job);

}  // namespace tandem::coordinator
