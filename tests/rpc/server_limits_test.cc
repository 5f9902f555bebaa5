// rpc/channel.h's ServerLimits and rpc/security.h's TLS token check, on in-process servers whose
// Coordinator service implements nothing (so a call that passes every check is UNIMPLEMENTED):
// an oversized request is refused before it is parsed, and with TLS a call without the token is
// refused from its metadata, before its message is read, while health probes need none.
#include <grpcpp/create_channel.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "proto/tandem/v1/coordinator.grpc.pb.h"
#include "rpc/channel.h"
#include "rpc/health_check.h"
#include "rpc/security.h"

namespace tandem::rpc {
namespace {

class NothingImplemented final : public v1::Coordinator::Service {};

struct Served {
  NothingImplemented service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

std::unique_ptr<Served> Serve(const ServerLimits& limits) {
  auto served = std::make_unique<Served>();
  grpc::ServerBuilder builder;
  int port = 0;
  ConfigureServer(builder, "127.0.0.1:0", &port, limits);
  builder.RegisterService(&served->service);
  served->server = builder.BuildAndStart();
  served->address = absl::StrCat("127.0.0.1:", port);
  return served;
}

// SubmitJob with a run_dir of `bytes`, with `token` when not empty.
grpc::Status Submit(const std::shared_ptr<grpc::Channel>& channel, size_t bytes,
                    const std::string& token = "") {
  v1::SubmitJobRequest request;
  request.set_run_dir(std::string(bytes, 'x'));
  v1::SubmitJobResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  return v1::Coordinator::NewStub(channel)->SubmitJob(&context, request, &response);
}

std::shared_ptr<grpc::Channel> Channel(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  return grpc::CreateCustomChannel(address, credentials, args);
}

TEST(ServerLimits, ARequestOverTheServersMaximumIsRefusedBeforeItIsParsed) {
  InstallSecurity({});
  std::unique_ptr<Served> coordinator = Serve(kCoordinatorLimits);
  const auto channel = Channel(coordinator->address, grpc::InsecureChannelCredentials());
  EXPECT_EQ(Submit(channel, 1 << 20).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  const grpc::Status big = Submit(channel, 5 << 20);
  EXPECT_EQ(big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << big.error_message();

  std::unique_ptr<Served> actor = Serve(kActorLimits);  // the data plane's 1 MiB chunks fit
  EXPECT_EQ(
      Submit(Channel(actor->address, grpc::InsecureChannelCredentials()), 5 << 20).error_code(),
      grpc::StatusCode::UNIMPLEMENTED);
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ServerLimits, WithTlsACallWithoutTheTokenIsRefusedFromItsMetadataAndProbesPass) {
  const std::string dir =
      (std::filesystem::path(::testing::TempDir()) / ("tls_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  const std::string make = absl::StrCat(
      "cd ", dir, " && ",
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=tandem-test-ca -keyout ca.key -out ca.pem 2>/dev/null && ",
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=127.0.0.1 "
      "-keyout node.key -out node.csr 2>/dev/null && ",
      "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > node.ext "
      "&& ",
      "openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
      "-extfile node.ext -out node.pem 2>/dev/null");
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  Security security;
  security.token = "0123-the-token";
  security.cert_pem = Slurp(dir + "/node.pem");
  security.key_pem = Slurp(dir + "/node.key");
  security.ca_pem = Slurp(dir + "/ca.pem");
  InstallSecurity(security);
  std::unique_ptr<Served> coordinator = Serve(kCoordinatorLimits);
  const auto channel = Channel(coordinator->address, ClientCredentials());

  const grpc::Status none = Submit(channel, 16);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(none.error_message(),
            "no token: calls need the cluster's token (--token-file or $TANDEM_TOKEN)");
  EXPECT_EQ(Submit(channel, 16, "wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // Over the size limit too: the metadata is judged first, so the message is never read.
  EXPECT_EQ(Submit(channel, 5 << 20).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Submit(channel, 16, security.token).error_code(), grpc::StatusCode::UNIMPLEMENTED);

  // CheckHealth's calls carry no token.
  const absl::Status health = CheckHealth(coordinator->address, std::chrono::seconds(30), "probe");
  EXPECT_TRUE(health.ok()) << health;
  InstallSecurity({});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::rpc
