// The gRPC face of an actor: tandem.v1.Actor over a Worker (actors/worker.h). It turns requests
// into plain values, builds the job's transport and rendezvous store, and serialises commands. The
// coordinator sends an actor's next RunStep while the current one runs; it waits for its turn
// (steps run in order, and none after one failed). A Release may arrive while a step runs: it
// cancels the step's transfers first, so the step fails fast instead of waiting out its deadline.
//
// Thread-safety: handlers run on gRPC's threads; commands hold one mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "actors/command_thread.h"
#include "actors/worker.h"
#include "proto/tandem/v1/actor.grpc.pb.h"
#include "transport/inbox.h"

namespace tandem::actors {

class ActorService final : public v1::Actor::Service {
 public:
  // `worker` and `inbox` outlive the service; `coordinator` is HOST:PORT of the rendezvous store;
  // `local_links`: the jobs' transports send over local links where they can.
  // `stuck_grace`: how far past the command timeout one command may run before the actor calls
  // itself stuck (Stuck()).
  ActorService(Worker* worker, std::shared_ptr<transport::Inbox> inbox, std::string coordinator,
               bool local_links = true,
               std::chrono::milliseconds stuck_grace = std::chrono::seconds(30));

  grpc::Status AssignJob(grpc::ServerContext* context, const v1::AssignJobRequest* request,
                         v1::AssignJobResponse* response) override;
  grpc::Status RunStep(grpc::ServerContext* context, const v1::RunStepRequest* request,
                       v1::RunStepResponse* response) override;
  grpc::Status Evaluate(grpc::ServerContext* context, const v1::EvaluateRequest* request,
                        v1::EvaluateResponse* response) override;
  grpc::Status SaveCheckpoint(grpc::ServerContext* context,
                              const v1::SaveCheckpointRequest* request,
                              v1::SaveCheckpointResponse* response) override;
  grpc::Status FinishCheckpoint(grpc::ServerContext* context,
                                const v1::FinishCheckpointRequest* request,
                                v1::FinishCheckpointResponse* response) override;
  grpc::Status Export(grpc::ServerContext* context, const v1::ExportRequest* request,
                      v1::ExportResponse* response) override;
  grpc::Status Release(grpc::ServerContext* context, const v1::ReleaseRequest* request,
                       v1::ReleaseResponse* response) override;
  grpc::Status HeldSnapshots(grpc::ServerContext* context, const v1::HeldSnapshotsRequest* request,
                             v1::HeldSnapshotsResponse* response) override;

  // Releases whatever job the actor runs, e.g. when the coordinator no longer knows the actor (it
  // restarted, or declared the actor lost): that job is scheduled again from its checkpoint, and
  // the actor must be free to take it.
  void ReleaseCurrentJob(const std::string& reason);

  // Why the actor cannot serve, when one command (a step, an assignment reading its data, ...) has
  // run on the command thread for longer than the job's command timeout and the grace: no call
  // waits that long for it, so the thread is stuck (a read that never returns, a hung collective)
  // and every later command would queue behind it. "stuck: RunStep 12 has run for 331 s, past the
  // command timeout (330 s with the grace)"; nullopt when it is not. Heartbeats carry it, the
  // health service says NOT_SERVING, and the coordinator schedules nothing on the actor.
  std::optional<std::string> Stuck() const;

  // RunStep calls that arrived before their predecessor was posted and wait for their turn.
  int steps_waiting_for_turn() const { return steps_waiting_.load(); }

 private:
  // Releases `job` if it is the current one.
  void ReleaseJob(const std::string& job, const std::string& reason);
  // FailedPrecondition unless `job_id` is the current job.
  absl::Status CheckJob(const std::string& job_id) const;
  // OK when `path` (a checkpoint's directory, an export's file) lies inside the current job's run
  // directory, as the file system resolves it; InvalidArgument naming both otherwise. An actor
  // writes nowhere else. REQUIRES: command_mu_ held.
  absl::Status CheckInsideRunDir(const std::string& path, const char* what) const;
  std::string job_id() const;
  void set_job_id(std::string job_id);

  Worker* worker_;
  std::shared_ptr<transport::Inbox> inbox_;
  std::string coordinator_;
  bool local_links_;
  std::mutex command_mu_;  // commands are posted one at a time
  // With command_mu_: a step was posted, or the job was released.
  std::condition_variable step_posted_;
  int64_t last_posted_step_ = 0;  // guarded by command_mu_
  std::atomic<int> steps_waiting_{0};
  // A step of the current job failed; set by the command thread, read by the steps queued after it.
  std::atomic<bool> step_failed_{false};
  CommandThread commands_;  // runs every worker_ command but status()
  mutable std::mutex id_mu_;
  std::string job_id_;  // guarded by id_mu_; changes only under command_mu_
  // The job AssignJob is building, and its cancellation flag (Assignment::cancelled), which a
  // Release of that job sets; guarded by id_mu_.
  std::string assigning_job_;
  std::shared_ptr<std::atomic<bool>> assigning_cancelled_;
  std::string assigning_release_reason_;
  std::string run_dir_;  // the current job's, from AssignJob; guarded by command_mu_
  const std::chrono::milliseconds stuck_grace_;
  std::atomic<int64_t> command_timeout_ms_{300000};  // the last assignment's
};

}  // namespace tandem::actors
