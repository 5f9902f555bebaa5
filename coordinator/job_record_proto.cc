#include "coordinator/job_record_proto.h"

namespace tandem::coordinator {

v1::Job ToProto(const JobRecord& job) {
  v1::Job out;
  out.set_job_id(job.id);
  out.set_name(job.name);
  out.set_state(static_cast<v1::JobState>(job.state));
  out.set_message(job.message);
  out.set_run_dir(job.run_dir);
  out.set_step(job.step);
  out.set_steps(job.steps);
  out.set_loss(job.loss);
  out.set_submitted_at(job.submitted_at);
  out.set_started_at(job.started_at);
  out.set_ended_at(job.ended_at);
  out.set_spec_json(job.spec_json);
  out.set_summary_json(job.summary_json);
  out.set_restarts(job.restarts);
  return out;
}

}  // namespace tandem::coordinator
