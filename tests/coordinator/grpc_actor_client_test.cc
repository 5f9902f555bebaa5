// The gRPC actor client (coordinator/grpc_actor_client.h) against a scripted tandem.v1.Actor
// service in this process, on 127.0.0.1 with a port the OS picks: what goes on the wire, the
// AssignJob retry while the channel answers UNAVAILABLE, and the messages of failed calls.
#include "coordinator/grpc_actor_client.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "proto/tandem/v1/actor.grpc.pb.h"

namespace tandem::coordinator {
namespace {

// AssignJob answers `assign_failures` times with `assign_failure`, then succeeds; RunStep and
// Release answer what the test sets.
class ScriptedActor final : public v1::Actor::Service {
 public:
  grpc::Status AssignJob(grpc::ServerContext*, const v1::AssignJobRequest* request,
                         v1::AssignJobResponse* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++assign_calls_;
    last_assign_ = *request;
    called_.notify_all();
    if (assign_calls_ <= assign_failures_) return assign_failure_;
    response->set_parameters(5);
    response->set_vocab_size(6);
    response->set_train_samples(7);
    response->set_eval_samples(8);
    response->set_step(9);
    return grpc::Status::OK;
  }
  grpc::Status RunStep(grpc::ServerContext* context, const v1::RunStepRequest* request,
                       v1::RunStepResponse* response) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++step_calls_;
    called_.notify_all();
    // A hung actor: the step answers when the client gives up (or after ten minutes).
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(10);
    while (hang_steps_ && !context->IsCancelled() && std::chrono::steady_clock::now() < give_up) {
      called_.wait_for(lock, std::chrono::milliseconds(10));
    }
    if (!step_status_.ok()) return step_status_;
    response->set_loss(0.5 * static_cast<double>(request->step()));
    response->set_grad_norm(0.25);
    response->set_lr(0.125);
    response->set_skipped(true);
    response->set_compute_s(1.5);
    response->set_wait_s(2.5);
    response->set_bytes_sent(4096);
    response->set_planned(3.5);
    return grpc::Status::OK;
  }
  grpc::Status Release(grpc::ServerContext*, const v1::ReleaseRequest*,
                       v1::ReleaseResponse*) override {
    std::lock_guard<std::mutex> lock(mu_);
    return release_status_;
  }

  void FailAssign(int times, grpc::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    assign_failures_ = times;
    assign_failure_ = std::move(status);
  }
  void HangSteps() {
    std::lock_guard<std::mutex> lock(mu_);
    hang_steps_ = true;
  }
  bool WaitForStepCalls(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return called_.wait_for(lock, std::chrono::minutes(2), [&] { return step_calls_ >= n; });
  }
  void FailSteps(grpc::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    step_status_ = std::move(status);
  }
  void FailReleases(grpc::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    release_status_ = std::move(status);
  }
  int assign_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return assign_calls_;
  }
  bool WaitForAssignCalls(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return called_.wait_for(lock, std::chrono::minutes(2), [&] { return assign_calls_ >= n; });
  }
  v1::AssignJobRequest last_assign() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_assign_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable called_;
  int assign_calls_ = 0;
  int step_calls_ = 0;
  bool hang_steps_ = false;
  int assign_failures_ = 0;
  grpc::Status assign_failure_;
  grpc::Status step_status_;
  grpc::Status release_status_;
  v1::AssignJobRequest last_assign_;
};

class GrpcActorClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&actor_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  void TearDown() override { server_->Shutdown(std::chrono::system_clock::now()); }

  std::unique_ptr<ActorClient> Connect(
      std::chrono::milliseconds retry_delay,
      std::chrono::milliseconds command_timeout = std::chrono::seconds(60)) {
    GrpcActorClientOptions options = GrpcActorClientOptions::ForCommandTimeout(command_timeout);
    options.assign_retry_delay = retry_delay;
    return GrpcActorClientFactory(options).Connect(address_, "llm-0 (llm rank 1, test)");
  }

  static ActorAssignment Assignment() {
    ActorAssignment a;
    a.job_id = "job-000007";
    auto spec = std::make_shared<v1::JobSpec>();
    spec->set_name("sent");
    spec->mutable_data()->mutable_jsonl()->set_train("/specs/train.jsonl");
    a.spec = std::move(spec);
    a.role = Role::kLlm;
    a.rank = 1;
    a.group_size = 2;
    a.peers = {"10.0.0.1:1", "10.0.0.2:2"};
    a.rendezvous_prefix = "job-000007/3/llm";
    a.run_dir = "/runs/a";
    a.timeout = std::chrono::milliseconds(1234);
    a.threads = 4;
    a.attempt = 3;
    a.resume_from = "/runs/a/checkpoints/step-000002";
    return a;
  }

  ScriptedActor actor_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(GrpcActorClientTest, AssignJobSendsTheAssignmentAndReadsTheReply) {
  absl::StatusOr<ActorAssignReply> reply =
      Connect(std::chrono::seconds(1))->AssignJob(Assignment());
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->parameters, 5);
  EXPECT_EQ(reply->vocab_size, 6);
  EXPECT_EQ(reply->train_samples, 7);
  EXPECT_EQ(reply->eval_samples, 8);
  EXPECT_EQ(reply->step, 9);
  const v1::AssignJobRequest sent = actor_.last_assign();
  EXPECT_EQ(sent.job_id(), "job-000007");
  EXPECT_EQ(sent.spec().name(), "sent");
  EXPECT_EQ(sent.spec().data().jsonl().train(), "/specs/train.jsonl");
  EXPECT_EQ(sent.role(), v1::ROLE_LLM);
  EXPECT_EQ(sent.rank(), 1);
  EXPECT_EQ(sent.group_size(), 2);
  ASSERT_EQ(sent.peers().addresses_size(), 2);
  EXPECT_EQ(sent.peers().addresses(1), "10.0.0.2:2");
  EXPECT_EQ(sent.rendezvous_prefix(), "job-000007/3/llm");
  EXPECT_EQ(sent.run_dir(), "/runs/a");
  EXPECT_EQ(sent.timeout_ms(), 1234);
  EXPECT_EQ(sent.threads(), 4);
  EXPECT_EQ(sent.attempt(), 3);
  EXPECT_EQ(sent.resume_from(), "/runs/a/checkpoints/step-000002");
  EXPECT_EQ(actor_.assign_calls(), 1);
}

TEST_F(GrpcActorClientTest, AssignJobAnsweredUnavailableIsTriedAgain) {
  actor_.FailAssign(2, grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection not open"));
  absl::StatusOr<ActorAssignReply> reply =
      Connect(std::chrono::milliseconds(1))->AssignJob(Assignment());
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->step, 9);
  EXPECT_EQ(actor_.assign_calls(), 3);
}

TEST_F(GrpcActorClientTest, AssignJobGivesUpAfterThreeUnavailableAnswers) {
  actor_.FailAssign(5, grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection not open"));
  absl::StatusOr<ActorAssignReply> reply =
      Connect(std::chrono::milliseconds(1))->AssignJob(Assignment());
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(reply.status().message(), "connection not open (is it running and reachable?)");
  EXPECT_EQ(actor_.assign_calls(), 3);
}

TEST_F(GrpcActorClientTest, AssignJobFailingOtherwiseIsNotTriedAgain) {
  actor_.FailAssign(5, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "vision.model: bad"));
  absl::StatusOr<ActorAssignReply> reply =
      Connect(std::chrono::milliseconds(1))->AssignJob(Assignment());
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reply.status().message(), "vision.model: bad");
  EXPECT_EQ(actor_.assign_calls(), 1);
}

TEST_F(GrpcActorClientTest, StopRetryingEndsTheWaitBetweenAttempts) {
  actor_.FailAssign(5, grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection not open"));
  std::unique_ptr<ActorClient> client = Connect(std::chrono::minutes(10));
  auto assigned = std::async(std::launch::async, [&] { return client->AssignJob(Assignment()); });
  ASSERT_TRUE(actor_.WaitForAssignCalls(1));
  client->StopRetrying();
  ASSERT_EQ(assigned.wait_for(std::chrono::minutes(2)), std::future_status::ready);
  EXPECT_EQ(assigned.get().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(actor_.assign_calls(), 1);
}

// A lost actor's step fails at once, not at the command deadline (ten minutes here), and so does
// every later command; a Release still goes out.
TEST_F(GrpcActorClientTest, CancelCallsEndsAStepInFlightAndRefusesLaterCommands) {
  actor_.HangSteps();
  std::unique_ptr<ActorClient> client = Connect(std::chrono::seconds(1), std::chrono::minutes(10));
  auto step = std::async(std::launch::async, [&] { return client->RunStep("job-000007", 4); });
  ASSERT_TRUE(actor_.WaitForStepCalls(1));
  client->CancelCalls();
  ASSERT_EQ(step.wait_for(std::chrono::minutes(2)), std::future_status::ready);
  EXPECT_EQ(step.get().status().code(), absl::StatusCode::kCancelled);
  const absl::StatusOr<ActorStepReply> later = client->RunStep("job-000007", 5);
  EXPECT_EQ(later.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(later.status().message(), "the actor was lost; its commands are cancelled");
  EXPECT_TRUE(client->Release("job-000007", "lost").ok());
}

TEST_F(GrpcActorClientTest, RunStepReadsTheReplyAndAddsAHintToUnavailable) {
  std::unique_ptr<ActorClient> client = Connect(std::chrono::seconds(1));
  absl::StatusOr<ActorStepReply> reply = client->RunStep("job-000007", 4);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->loss, 2.0);
  EXPECT_EQ(reply->grad_norm, 0.25);
  EXPECT_EQ(reply->lr, 0.125);
  EXPECT_TRUE(reply->skipped);
  EXPECT_EQ(reply->compute_s, 1.5);
  EXPECT_EQ(reply->wait_s, 2.5);
  EXPECT_EQ(reply->planned, 3.5);
  EXPECT_EQ(reply->bytes_sent, 4096);
  actor_.FailSteps(grpc::Status(grpc::StatusCode::UNAVAILABLE, "peer gone"));
  EXPECT_EQ(client->RunStep("job-000007", 5).status(),
            absl::UnavailableError("peer gone (is it running and reachable?)"));
  actor_.FailSteps(grpc::Status(grpc::StatusCode::ABORTED, "an earlier step failed"));
  EXPECT_EQ(client->RunStep("job-000007", 6).status(),
            absl::AbortedError("an earlier step failed"));
}

TEST_F(GrpcActorClientTest, ReleaseFailureKeepsTheChannelsMessage) {
  std::unique_ptr<ActorClient> client = Connect(std::chrono::seconds(1));
  EXPECT_TRUE(client->Release("job-000007", "job succeeded").ok());
  actor_.FailReleases(grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed"));
  EXPECT_EQ(client->Release("job-000007", "job failed"), absl::UnavailableError("Socket closed"));
}

}  // namespace
}  // namespace tandem::coordinator
