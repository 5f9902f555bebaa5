// The doors (docs/design.md §5) with real processes: every rpc of every service refuses a call
// without the cluster's token or with a wrong one (each method is called by name, from the
// services' descriptors, so a handler added later without the check fails here), the health service
// answers without one, a job runs end to end over the token-carrying data plane and over TLS, and
// bad flags are named.
#include <gmock/gmock.h>
#include <google/protobuf/descriptor.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/tandem/v1/actor.grpc.pb.h"
#include "proto/tandem/v1/coordinator.grpc.pb.h"
#include "proto/tandem/v1/peer.grpc.pb.h"
#include "tests/service/service_testing.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using testing::Outcome;
using testing::ProcessCluster;

constexpr char kToken[] = "3f1c0ffee-cluster-token";

// Calls `method` ("/package.Service/Method") with one empty message, whatever its kind (an empty
// message is a valid encoding of every request), optionally with `token`; returns the status.
grpc::Status CallEmpty(const std::string& address, const std::string& method,
                       const std::string& token) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue queue;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  if (!token.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &queue);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  queue.Next(&tag, &ok);
  grpc::Slice empty("");
  grpc::ByteBuffer message(&empty, 1);
  call->Write(message, reinterpret_cast<void*>(2));
  queue.Next(&tag, &ok);
  call->WritesDone(reinterpret_cast<void*>(3));
  queue.Next(&tag, &ok);
  // Finish completes only once every reply was read.
  for (ok = true; ok;) {
    grpc::ByteBuffer reply;
    call->Read(&reply, reinterpret_cast<void*>(4));
    queue.Next(&tag, &ok);
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  queue.Next(&tag, &ok);
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  return status;
}

// "/tandem.v1.Actor/AssignJob", ... for every method of `service`.
std::vector<std::string> Methods(const google::protobuf::ServiceDescriptor* service) {
  std::vector<std::string> methods;
  for (int i = 0; i < service->method_count(); ++i) {
    methods.push_back(absl::StrCat("/", service->full_name(), "/", service->method(i)->name()));
  }
  return methods;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A four-step fp32 job of one vision and one LLM actor.
std::string TinyJob(const std::string& name) { return testing::TinyJobSpec({.name = name}); }

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override { token_file_ = cluster_.WriteFile("token", absl::StrCat(kToken, "\n")); }

  // The flags every process of the token-guarded cluster takes.
  std::vector<std::string> TokenFlags() const { return {"--token-file", token_file_}; }

  ProcessCluster cluster_;
  std::string token_file_;
};

TEST_F(SecurityTest, EveryRpcRefusesAMissingOrWrongTokenAndTheRefusalIsLoggedOnce) {
  cluster_.StartCoordinator("127.0.0.1:0", TokenFlags());
  ASSERT_FALSE(cluster_.address().empty());
  const std::string actor_ready = cluster_.dir() + "/actor.ready";
  cluster_.Spawn({"actor", "--pool", "vision", "--coordinator", cluster_.address(), "--ready-file",
                  actor_ready, "--token-file", token_file_});
  const std::string actor = testing::AwaitLine(actor_ready);
  ASSERT_FALSE(actor.empty()) << "the actor never registered";

  // Each service's descriptor comes from its file's, which linking a request message registers.
  auto service = [](const google::protobuf::Descriptor* message, const std::string& name) {
    const google::protobuf::ServiceDescriptor* found = message->file()->FindServiceByName(name);
    EXPECT_NE(found, nullptr) << name;
    return found;
  };
  const std::vector<std::pair<const google::protobuf::ServiceDescriptor*, std::string>> services = {
      {service(v1::GetJobRequest::descriptor(), "Coordinator"), cluster_.address()},
      {service(v1::AssignJobRequest::descriptor(), "Actor"), actor},
      {service(v1::LocalEndpointRequest::descriptor(), "Peer"), actor}};
  int methods = 0;
  for (const auto& [descriptor, address] : services) {
    if (descriptor == nullptr) continue;
    for (const std::string& method : Methods(descriptor)) {
      ++methods;
      for (const std::string& token : {std::string(), std::string("not-the-token")}) {
        const grpc::Status status = CallEmpty(address, method, token);
        EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
            << method << (token.empty() ? " without a token: " : " with a wrong token: ")
            << status.error_message();
      }
    }
  }
  EXPECT_EQ(methods, 15 + 8 + 3);
  // Probes carry no token.
  for (const std::string& address : {cluster_.address(), actor}) {
    const grpc::Status health = CallEmpty(address, "/grpc.health.v1.Health/Check", "");
    EXPECT_TRUE(health.ok()) << address << ": " << health.error_message();
  }
  // With the token, the same kind of call gets past the door (to the handler's own answer).
  EXPECT_EQ(CallEmpty(cluster_.address(), "/tandem.v1.Coordinator/GetJob", kToken).error_code(),
            grpc::StatusCode::NOT_FOUND);

  const std::string log = ReadAll(cluster_.dir() + "/1-coordinator.log");
  const std::vector<std::string> lines = absl::StrSplit(log, '\n');
  const auto refusals = std::count_if(lines.begin(), lines.end(), [](const std::string& line) {
    return line.find("refused a call from ipv4:127.0.0.1:") != std::string::npos;
  });
  EXPECT_EQ(refusals, 1) << log;
  EXPECT_THAT(log, HasSubstr("with no token (UNAUTHENTICATED; later refusals from "
                             "ipv4:127.0.0.1 are not logged)"));
}

TEST_F(SecurityTest, JobRunsWithTheTokenFromAFileOrTheEnvironmentAndNotWithout) {
  cluster_.StartCoordinator("127.0.0.1:0", TokenFlags());
  // gRPC for every transfer, so the data plane's streams carry the token too.
  std::vector<std::string> actor_flags = TokenFlags();
  actor_flags.push_back("--no-local-links");
  cluster_.StartActor("vision", actor_flags);
  cluster_.StartActor("llm", actor_flags);

  const Outcome run =
      cluster_.Cli(absl::StrCat("submit ", cluster_.WriteFile("job.json", TinyJob("doors")),
                                " --wait --threads 1 --token-file ", token_file_));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("SUCCEEDED"));

  const Outcome from_environment =
      testing::Tandem(absl::StrCat("jobs --coordinator ", cluster_.address()),
                      absl::StrCat("TANDEM_TOKEN=", kToken));
  EXPECT_EQ(from_environment.exit_code, 0) << from_environment.output;
  EXPECT_THAT(from_environment.output, HasSubstr("doors"));

  const Outcome without = cluster_.Cli("jobs");
  EXPECT_EQ(without.exit_code, 1);
  EXPECT_THAT(
      without.output,
      HasSubstr("no token: calls need the cluster's token (--token-file or $TANDEM_TOKEN)"));
  const Outcome wrong = testing::Tandem(absl::StrCat("jobs --coordinator ", cluster_.address()),
                                        "TANDEM_TOKEN=a-guess-of-the-right-length");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_THAT(wrong.output, HasSubstr("a wrong token"));
  // A token too short to resist guessing is refused before any call is made.
  const Outcome short_token = testing::Tandem(
      absl::StrCat("jobs --coordinator ", cluster_.address()), "TANDEM_TOKEN=guess");
  EXPECT_EQ(short_token.exit_code, 2);
  EXPECT_THAT(short_token.output, HasSubstr("$TANDEM_TOKEN: a token of 5 characters; a token has "
                                            "16 to 4096 (e.g. openssl rand -hex 32)"));

  // An actor without the token is refused at registration and says so, at once.
  const std::string log = cluster_.dir() + "/tokenless-actor.log";
  const pid_t tokenless =
      cluster_.Spawn({"actor", "--pool", "llm", "--coordinator", cluster_.address()}, log);
  const int status = cluster_.Wait(tokenless);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;
  EXPECT_THAT(ReadAll(log), HasSubstr("no token: calls need the cluster's token"));
}

TEST_F(SecurityTest, TlsClusterRunsAJobAndRefusesPlaintextAndClientsWithoutACertificate) {
  const std::string dir = cluster_.dir();
  const std::string make = absl::StrCat(
      "cd ", dir, " && ",
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=tandem-test-ca -keyout ca.key -out ca.pem && ",
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=127.0.0.1 "
      "-keyout node.key -out node.csr && ",
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth,"
      "clientAuth\\n' > node.ext && ",
      "openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
      "-extfile node.ext -out node.pem 2>/dev/null");
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  const std::vector<std::string> tls = {"--tls-cert",      dir + "/node.pem", "--tls-key",
                                        dir + "/node.key", "--tls-ca",        dir + "/ca.pem"};
  std::string tls_flags;
  for (const std::string& flag : tls) tls_flags += " " + flag;
  std::vector<std::string> flags = TokenFlags();
  flags.insert(flags.end(), tls.begin(), tls.end());

  cluster_.StartCoordinator("127.0.0.1:0", flags);
  ASSERT_FALSE(cluster_.address().empty());
  std::vector<std::string> actor_flags = flags;
  actor_flags.push_back("--no-local-links");
  cluster_.StartActor("vision", actor_flags);
  cluster_.StartActor("llm", actor_flags);
  const Outcome run =
      cluster_.Cli(absl::StrCat("submit ", cluster_.WriteFile("job.json", TinyJob("sealed")),
                                " --wait --threads 1", " --token-file ", token_file_, tls_flags));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("SUCCEEDED"));

  const Outcome plaintext = cluster_.Cli(absl::StrCat("jobs --token-file ", token_file_));
  EXPECT_EQ(plaintext.exit_code, 1) << plaintext.output;
  EXPECT_THAT(plaintext.output, HasSubstr("(is it running and reachable?)"));
  const Outcome no_certificate =
      cluster_.Cli(absl::StrCat("jobs --token-file ", token_file_, " --tls-ca ", dir, "/ca.pem"));
  EXPECT_EQ(no_certificate.exit_code, 1) << no_certificate.output;
  const Outcome sealed = cluster_.Cli(absl::StrCat("jobs --token-file ", token_file_, tls_flags));
  EXPECT_EQ(sealed.exit_code, 0) << sealed.output;
  EXPECT_THAT(sealed.output, HasSubstr("sealed"));
}

TEST_F(SecurityTest, UnreadableOrIncompleteSecurityFlagsAreNamed) {
  const Outcome missing = testing::Tandem("jobs --token-file /nonexistent/token");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.output,
              HasSubstr("tandem jobs: --token-file: cannot read /nonexistent/token"));
  const Outcome empty =
      testing::Tandem(absl::StrCat("jobs --token-file ", cluster_.WriteFile("empty", "\n")));
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_THAT(empty.output, HasSubstr("--token-file: "));
  EXPECT_THAT(empty.output, HasSubstr("/empty is empty"));
  const Outcome half =
      testing::Tandem(absl::StrCat("coordinator --tls-cert ", cluster_.WriteFile("cert.pem", "x")));
  EXPECT_EQ(half.exit_code, 2);
  EXPECT_THAT(half.output, HasSubstr("--tls-cert and --tls-key go together"));
  const Outcome blank_environment = testing::Tandem("actors", "TANDEM_TOKEN=");
  EXPECT_EQ(blank_environment.exit_code, 2);
  EXPECT_THAT(blank_environment.output, HasSubstr("$TANDEM_TOKEN is set but empty"));
}

}  // namespace
}  // namespace tandem
