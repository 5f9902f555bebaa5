#include "rpc/health_check.h"

#include "absl/strings/str_cat.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "rpc/channel.h"
#include "rpc/status.h"

namespace tandem::rpc {

absl::Status CheckHealth(const std::string& address, std::chrono::milliseconds timeout,
                         const std::string& what) {
  using grpc::health::v1::HealthCheckResponse;
  auto stub = grpc::health::v1::Health::NewStub(MakeChannel(address));
  grpc::ClientContext context;  // the health service takes no token
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::health::v1::HealthCheckRequest request;
  HealthCheckResponse response;
  const absl::Status status = FromGrpc(stub->Check(&context, request, &response), what);
  if (!status.ok()) return status;
  if (response.status() != HealthCheckResponse::SERVING) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " is not serving (",
                     HealthCheckResponse::ServingStatus_Name(response.status()), ")"));
  }
  return absl::OkStatus();
}

bool HealthStreak::Record(const absl::Status& check) {
  failed_ = check.ok() ? 0 : failed_ + 1;
  last_ = check;
  return failed_ >= limit_;
}

std::string HealthStreak::Why() const {
  if (absl::IsFailedPrecondition(last_)) {
    return absl::StrCat("was stuck (health NOT_SERVING ", failed_,
                        " times in a row: a command ran past the command timeout) and was killed");
  }
  return absl::StrCat("did not answer ", failed_,
                      " health checks in a row (stopped or hung: ", last_.message(),
                      ") and was killed");
}

}  // namespace tandem::rpc
