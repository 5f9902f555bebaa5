#include "coordinator/coordinator_service.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/job_record_proto.h"
#include "jobspec/job_spec.h"
#include "rpc/security.h"
#include "rpc/status.h"

namespace tandem::coordinator {

using rpc::ToGrpc;

grpc::Status CoordinatorService::RegisterActor(grpc::ServerContext* context,
                                               const v1::RegisterActorRequest* request,
                                               v1::RegisterActorResponse* response) {
  TANDEM_AUTHORIZE(context);
  absl::StatusOr<std::string> id = coordinator_->registry().Register(
      request->pool(), request->device(), request->address(), request->memory_bytes());
  if (!id.ok()) return ToGrpc(id.status());
  response->set_actor_id(*id);
  response->set_heartbeat_interval_ms(coordinator_->options().heartbeat_interval.count());
  coordinator_->Schedule();
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* context,
                                           const v1::HeartbeatRequest* request,
                                           v1::HeartbeatResponse*) {
  TANDEM_AUTHORIZE(context);
  return ToGrpc(coordinator_->registry().Heartbeat(
      request->actor_id(), request->job_id(), request->step(), request->phase(),
      request->last_collective(), request->unhealthy()));
}

grpc::Status CoordinatorService::ReportActorExit(grpc::ServerContext* context,
                                                 const v1::ReportActorExitRequest* request,
                                                 v1::ReportActorExitResponse*) {
  TANDEM_AUTHORIZE(context);
  if (request->address().empty()) {
    return ToGrpc(absl::InvalidArgumentError("ReportActorExit: address is empty"));
  }
  coordinator_->ReportActorExit(request->address(), request->description());
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListActors(grpc::ServerContext* context,
                                            const v1::ListActorsRequest*,
                                            v1::ListActorsResponse* response) {
  TANDEM_AUTHORIZE(context);
  const Clock::time_point now = coordinator_->registry().now();
  for (const ActorEntry& a : coordinator_->registry().List()) {
    v1::ActorInfo* info = response->add_actors();
    info->set_actor_id(a.id);
    info->set_pool(a.pool);
    info->set_device(a.device);
    info->set_address(a.address);
    const double silence = std::chrono::duration<double>(now - a.last_heartbeat).count();
    info->set_alive(
        silence <=
        std::chrono::duration<double>(coordinator_->registry().heartbeat_timeout()).count());
    info->set_job_id(a.job_id);
    info->set_step(a.step);
    info->set_phase(a.phase);
    info->set_last_collective(a.last_collective);
    info->set_seconds_since_heartbeat(silence);
    info->set_unhealthy(a.unhealthy);
    info->set_memory_bytes(a.memory_bytes);
  }
  return grpc::Status::OK;
}

v1::Job CoordinatorService::Describe(const JobRecord& job) {
  v1::Job out = ToProto(job);
  constexpr std::string_view kRestarting = "RESTARTING: ";
  absl::StatusOr<std::vector<JobEventRecord>> events = absl::NotFoundError("not read");
  if (job.restarts > 0 || job.state == JobState::kRestarting)
    events = coordinator_->store().Events(job.id);
  if (events.ok()) {
    for (auto it = events->rbegin(); it != events->rend(); ++it) {
      if (!it->text.starts_with(kRestarting)) continue;
      out.set_last_restart(it->text.substr(kRestarting.size()));
      break;
    }
  }
  if (job.state == JobState::kRunning) {
    // Actor ids by group, in rank order: Reserve takes the vision group first, oldest actors first,
    // so registration order within the job is rank order.
    absl::StatusOr<JobSpecs::Spec> spec = coordinator_->specs().Get(job);
    if (spec.ok()) {
      const jobspec::JobConfig* config = &(*spec)->config;
      int vision = 0;
      for (const ActorEntry& a : coordinator_->registry().List()) {
        if (a.job_id != job.id) continue;
        if (a.pool == config->vision.pool && vision < config->vision.actors) {
          out.add_vision_actors(a.id);
          ++vision;
        } else {
          out.add_llm_actors(a.id);
        }
      }
    }
  }
  return out;
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* context,
                                           const v1::SubmitJobRequest* request,
                                           v1::SubmitJobResponse* response) {
  TANDEM_AUTHORIZE(context);
  absl::StatusOr<JobRecord> job = coordinator_->Submit(*request);
  if (!job.ok()) return ToGrpc(job.status());
  *response->mutable_job() = Describe(*job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* context,
                                        const v1::GetJobRequest* request, v1::Job* response) {
  TANDEM_AUTHORIZE(context);
  absl::StatusOr<JobRecord> job = coordinator_->store().GetJob(request->job_id());
  if (!job.ok()) return ToGrpc(job.status());
  *response = Describe(*job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest*,
                                          v1::ListJobsResponse* response) {
  TANDEM_AUTHORIZE(context);
  absl::StatusOr<std::vector<JobRecord>> jobs = coordinator_->store().ListJobs();
  if (!jobs.ok()) return ToGrpc(jobs.status());
  for (const JobRecord& job : *jobs) {
    v1::Job* out = response->add_jobs();
    *out = Describe(job);
    out->clear_spec_json();  // keep the listing small; GetJob has it
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::PruneJobs(grpc::ServerContext* context,
                                           const v1::PruneJobsRequest* request,
                                           v1::PruneJobsResponse* response) {
  TANDEM_AUTHORIZE(context);
  if (!(request->older_than_s() >= 0) || !std::isfinite(request->older_than_s())) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
        "older_than_s must be a non-negative number of seconds, got ", request->older_than_s())));
  }
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  absl::StatusOr<std::vector<std::string>> pruned =
      coordinator_->store().DeleteJobsEndedBefore(now - request->older_than_s());
  if (!pruned.ok()) return ToGrpc(pruned.status());
  for (const std::string& id : *pruned) response->add_job_ids(id);
  if (!pruned->empty()) {
    TANDEM_LOG(kInfo, "coordinator")
        << "pruned " << pruned->size() << " ended jobs from the state database";
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* context,
                                           const v1::CancelJobRequest* request, v1::Job* response) {
  TANDEM_AUTHORIZE(context);
  absl::StatusOr<JobRecord> job = coordinator_->Cancel(request->job_id());
  if (!job.ok()) return ToGrpc(job.status());
  *response = Describe(*job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* context,
                                          const v1::WatchJobRequest* request,
                                          grpc::ServerWriter<v1::JobUpdate>* writer) {
  TANDEM_AUTHORIZE(context);
  absl::StatusOr<JobRecord> job = coordinator_->store().GetJob(request->job_id());
  if (!job.ok()) return ToGrpc(job.status());
  int64_t last_sequence = 0;
  if (request->from_start()) {
    absl::StatusOr<std::vector<JobEventRecord>> events = coordinator_->store().Events(job->id);
    if (!events.ok()) return ToGrpc(events.status());
    for (const JobEventRecord& e : *events) {
      v1::JobUpdate update;
      update.mutable_event()->set_sequence(e.sequence);
      update.mutable_event()->set_time(e.time);
      update.mutable_event()->set_text(e.text);
      if (!writer->Write(update)) return grpc::Status::OK;
      last_sequence = e.sequence;
    }
  }
  if (!request->follow() || IsFinal(job->state)) {
    // Read it again: it may have ended while the events were sent.
    job = coordinator_->store().GetJob(request->job_id());
    if (!job.ok()) return ToGrpc(job.status());
    v1::JobUpdate update;
    *update.mutable_job() = Describe(*job);
    writer->Write(update);
    if (!request->follow() || IsFinal(job->state)) return grpc::Status::OK;
  }
  // Follow the live feed. Without from_start, start at its current end.
  bool closed = false;
  size_t next = request->from_start() ? 0 : coordinator_->feeds().Size(job->id);
  while (!context->IsCancelled()) {
    std::vector<v1::JobUpdate> updates =
        coordinator_->feeds().Read(job->id, &next, std::chrono::milliseconds(500), &closed);
    for (const v1::JobUpdate& update : updates) {
      if (update.has_event() && update.event().sequence() != 0 &&
          update.event().sequence() <= last_sequence)
        continue;
      if (!writer->Write(update)) return grpc::Status::OK;
    }
    if (closed) return grpc::Status::OK;
    if (updates.empty()) {  // its feed may be gone (the coordinator keeps the last ones only)
      job = coordinator_->store().GetJob(request->job_id());
      if (!job.ok()) return ToGrpc(job.status());
      if (IsFinal(job->state)) {
        v1::JobUpdate update;
        *update.mutable_job() = Describe(*job);
        writer->Write(update);
        return grpc::Status::OK;
      }
    }
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled by the client");
}

grpc::Status CoordinatorService::StoreSet(grpc::ServerContext* context,
                                          const v1::StoreSetRequest* request,
                                          v1::StoreSetResponse*) {
  TANDEM_AUTHORIZE(context);
  if (absl::Status key = coordinator_->CheckStoreKey(request->key()); !key.ok()) return ToGrpc(key);
  return ToGrpc(coordinator_->rendezvous().Set(request->key(), request->value()));
}

grpc::Status CoordinatorService::StoreGet(grpc::ServerContext* context,
                                          const v1::StoreGetRequest* request,
                                          v1::StoreGetResponse* response) {
  TANDEM_AUTHORIZE(context);
  if (absl::Status key = coordinator_->CheckStoreKey(request->key()); !key.ok()) return ToGrpc(key);
  absl::StatusOr<std::string> value = coordinator_->rendezvous().Get(
      request->key(), std::chrono::milliseconds(std::max<int64_t>(0, request->timeout_ms())));
  if (!value.ok()) return ToGrpc(value.status());
  response->set_value(*value);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::StoreAdd(grpc::ServerContext* context,
                                          const v1::StoreAddRequest* request,
                                          v1::StoreAddResponse* response) {
  TANDEM_AUTHORIZE(context);
  if (absl::Status key = coordinator_->CheckStoreKey(request->key()); !key.ok()) return ToGrpc(key);
  absl::StatusOr<int64_t> value = coordinator_->rendezvous().Add(request->key(), request->delta());
  if (!value.ok()) return ToGrpc(value.status());
  response->set_value(*value);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::StoreCheck(grpc::ServerContext* context,
                                            const v1::StoreCheckRequest* request,
                                            v1::StoreCheckResponse* response) {
  TANDEM_AUTHORIZE(context);
  if (absl::Status key = coordinator_->CheckStoreKey(request->key()); !key.ok()) return ToGrpc(key);
  absl::StatusOr<bool> present = coordinator_->rendezvous().Check(request->key());
  if (!present.ok()) return ToGrpc(present.status());
  response->set_present(*present);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::StoreDelete(grpc::ServerContext* context,
                                             const v1::StoreDeleteRequest* request,
                                             v1::StoreDeleteResponse*) {
  TANDEM_AUTHORIZE(context);
  if (absl::Status key = coordinator_->CheckStoreKey(request->key()); !key.ok()) return ToGrpc(key);
  return ToGrpc(coordinator_->rendezvous().Delete(request->key()));
}

}  // namespace tandem::coordinator
