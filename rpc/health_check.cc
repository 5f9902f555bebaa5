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
    return absl::FailedPreconditionError(absl::StrCat(what, " is not serving (",
                                               HealthCheckResponse::ServingStatus_Name(response.status()), ")"));
  }
  return absl::OkStatus();
}

}  // namespace tandem::rpc
