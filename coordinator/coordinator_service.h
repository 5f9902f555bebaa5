// tandem.v1.Coordinator over a Coordinator (coordinator.h): request/response plumbing only.
// Thread-safety: handlers run on gRPC's threads; the Coordinator is thread-safe.
#pragma once

#include "coordinator/coordinator.h"
#include "proto/tandem/v1/coordinator.grpc.pb.h"

namespace tandem::coordinator {

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  explicit CoordinatorService(Coordinator* coordinator) : coordinator_(coordinator) {}

  grpc::Status RegisterActor(grpc::ServerContext*, const v1::RegisterActorRequest*,
                             v1::RegisterActorResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse*) override;
  grpc::Status ListActors(grpc::ServerContext*, const v1::ListActorsRequest*,
                          v1::ListActorsResponse*) override;
  grpc::Status ReportActorExit(grpc::ServerContext*, const v1::ReportActorExitRequest*,
                               v1::ReportActorExitResponse*) override;
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*,
                         v1::SubmitJobResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::Job*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse*) override;
  grpc::Status PruneJobs(grpc::ServerContext*, const v1::PruneJobsRequest*,
                         v1::PruneJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*, v1::Job*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*,
                        grpc::ServerWriter<v1::JobUpdate>*) override;
  grpc::Status StoreSet(grpc::ServerContext*, const v1::StoreSetRequest*,
                        v1::StoreSetResponse*) override;
  grpc::Status StoreGet(grpc::ServerContext*, const v1::StoreGetRequest*,
                        v1::StoreGetResponse*) override;
  grpc::Status StoreAdd(grpc::ServerContext*, const v1::StoreAddRequest*,
                        v1::StoreAddResponse*) override;
  grpc::Status StoreCheck(grpc::ServerContext*, const v1::StoreCheckRequest*,
                          v1::StoreCheckResponse*) override;
  grpc::Status StoreDelete(grpc::ServerContext*, const v1::StoreDeleteRequest*,
                           v1::StoreDeleteResponse*) override;

 private:
  // The job with its actors (by rank) when it runs.
  v1::Job Describe(const JobRecord& job);

  Coordinator* coordinator_;
};

}  // namespace tandem::coordinator
