#include "rpc/security.h"

#include <grpcpp/client_context.h>
#include <grpcpp/security/auth_metadata_processor.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace tandem::rpc {
namespace {

constexpr char kComponent[] = "security";
constexpr char kMetadataKey[] = "authorization";
constexpr char kBearer[] = "Bearer ";

Security& Installed() {
  static Security* security = new Security();
  return *security;
}

// The file's whole text; InvalidArgument naming the flag and the file when it cannot be read or
// holds nothing.
absl::StatusOr<std::string> ReadFlagFile(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  if (absl::StripAsciiWhitespace(text.str()).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is empty"));
  }
  return text.str();
}

absl::Status CheckTokenLength(const std::string& token, const std::string& where) {
  if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a token of ", token.size(), " characters; a token has ",
                     kMinTokenLength, " to ", kMaxTokenLength, " (e.g. openssl rand -hex 32)"));
  }
  return absl::OkStatus();
}

// Compares in time independent of where the texts differ.
bool SameSecret(std::string_view a, std::string_view b) {
  unsigned char differ = a.size() == b.size() ? 0 : 1;
  const std::string_view& longer = a.size() >= b.size() ? a : b;
  for (size_t i = 0; i < longer.size(); ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    differ |= x ^ y;
  }
  return differ == 0;
}

// "ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7": each connection has a port of its own.
std::string PeerHost(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  const size_t first = peer.find(':');
  return colon == std::string::npos || colon == first ? peer : peer.substr(0, colon);
}

}  // namespace

absl::StatusOr<Security> LoadSecurity(const SecurityFlags& flags) {
  Security security;
  if (!flags.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadFlagFile("--token-file", flags.token_file);
    if (!token.ok()) return token.status();
    security.token = std::string(absl::StripAsciiWhitespace(*token));
    RETURN_IF_ERROR(
        CheckTokenLength(security.token, absl::StrCat("--token-file: ", flags.token_file)));
  } else if (const char* env = std::getenv(kTokenEnvironment); env != nullptr) {
    security.token = std::string(absl::StripAsciiWhitespace(env));
    if (security.token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("$", kTokenEnvironment, " is set but empty; unset it or give a token"));
    }
    RETURN_IF_ERROR(CheckTokenLength(security.token, absl::StrCat("$", kTokenEnvironment)));
  }
  if (flags.tls_cert.empty() != flags.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together: give both (or neither)");
  }
  if (!flags.tls_cert.empty()) {
    absl::StatusOr<std::string> cert = ReadFlagFile("--tls-cert", flags.tls_cert);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFlagFile("--tls-key", flags.tls_key);
    if (!key.ok()) return key.status();
    security.cert_pem = *std::move(cert);
    security.key_pem = *std::move(key);
  }
  if (!flags.tls_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadFlagFile("--tls-ca", flags.tls_ca);
    if (!ca.ok()) return ca.status();
    security.ca_pem = *std::move(ca);
  }
  return security;
}

void InstallSecurity(Security security) { Installed() = std::move(security); }

const Security& InstalledSecurity() { return Installed(); }

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials() {
  const Security& security = Installed();
  if (!security.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = security.ca_pem;  // empty: the system's roots
  options.pem_private_key = security.key_pem;
  options.pem_cert_chain = security.cert_pem;
  return grpc::SslCredentials(options);
}

namespace {

// With TLS, gRPC core asks this for every call's initial metadata before it reads the message, so
// a call without the token costs no request parsing. (gRPC 1.51 has no such hook for plaintext
// ports: InsecureServerCredentials asserts on SetAuthMetadataProcessor, and server interceptors run
// after the request is parsed; there rpc/channel.h's ServerLimits bound the cost instead.)
class TokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenProcessor(std::string token) : token_(std::move(token)) {}
  bool IsBlocking() const override { return false; }  // compares strings only
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*, OutputMetadata*,
                       OutputMetadata*) override {
    const auto path = metadata.find(":path");
    if (path != metadata.end() &&
        absl::StartsWith(absl::string_view(path->second.data(), path->second.size()),
                         "/grpc.health.v1.Health/")) {
      return grpc::Status::OK;  // probes carry no token
    }
    const auto found = metadata.find(kMetadataKey);
    const std::string_view presented =
        found == metadata.end() ? std::string_view()
                                : std::string_view(found->second.data(), found->second.size());
    const std::string_view bearer(kBearer);
    if (presented.substr(0, bearer.size()) == bearer &&
        SameSecret(presented.substr(bearer.size()), token_)) {
      return grpc::Status::OK;
    }
    const char* what = found == metadata.end() ? "no token" : "a wrong token";
    LogRefusal(what);
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat(what, ": calls need the cluster's token (--token-file or $",
                                     kTokenEnvironment, ")"));
  }

 private:
  // The peer's address is not known here: one line a minute, with the count since the last.
  void LogRefusal(const char* what) {
    std::lock_guard<std::mutex> lock(mu_);
    ++refused_;
    const auto now = std::chrono::steady_clock::now();
    if (logged_ != std::chrono::steady_clock::time_point{} &&
        now - logged_ < std::chrono::minutes(1))
      return;
    TANDEM_LOG(kWarning, kComponent)
        << "refused a TLS call with " << what << " before reading it (UNAUTHENTICATED; " << refused_
        << " refused since the last such line)";
    logged_ = now;
    refused_ = 0;
  }

  const std::string token_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point logged_{};  // guarded by mu_
  int64_t refused_ = 0;                             // guarded by mu_
};

}  // namespace

std::shared_ptr<grpc::ServerCredentials> ServerCredentials() {
  const Security& security = Installed();
  if (security.cert_pem.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      security.ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = security.ca_pem;
  options.pem_key_cert_pairs.push_back({security.key_pem, security.cert_pem});
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::SslServerCredentials(options);
  if (!security.token.empty())
    credentials->SetAuthMetadataProcessor(std::make_shared<TokenProcessor>(security.token));
  return credentials;
}

void AttachToken(grpc::ClientContext& context) {
  const Security& security = Installed();
  if (!security.token.empty()) context.AddMetadata(kMetadataKey, kBearer + security.token);
}

grpc::Status Authorize(const grpc::ServerContext& context) {
  const Security& security = Installed();
  if (security.token.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find(kMetadataKey);
  std::string_view presented;
  if (found != metadata.end())
    presented = std::string_view(found->second.data(), found->second.size());
  const std::string_view bearer(kBearer);
  const bool has_bearer = presented.substr(0, bearer.size()) == bearer;
  static GuessThrottle* throttle = new GuessThrottle();
  const std::string host = PeerHost(context.peer());
  if (!throttle->Allows(host, GuessThrottle::Clock::now())) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat(host, " presented ", GuessThrottle::kMaxWrongTokens,
                     " wrong tokens within a minute: its calls are refused until the minute ends"));
  }
  if (has_bearer && SameSecret(presented.substr(bearer.size()), security.token)) {
    return grpc::Status::OK;
  }
  const char* what = found == metadata.end() ? "no token" : "a wrong token";
  static std::mutex mu;
  static std::set<std::string>* logged = new std::set<std::string>();
  if (found != metadata.end()) throttle->Refused(host, GuessThrottle::Clock::now());
  {
    std::lock_guard<std::mutex> lock(mu);
    if (logged->size() >= GuessThrottle::kMaxHosts)
      logged->clear();  // bounded: hosts may be logged again
    if (logged->insert(host).second) {
      TANDEM_LOG(kWarning, kComponent)
          << "refused a call from " << context.peer() << " with " << what
          << " (UNAUTHENTICATED; later refusals from " << host << " are not logged)";
    }
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      absl::StrCat(what, ": calls need the cluster's token (--token-file or $",
                                   kTokenEnvironment, ")"));
}

bool GuessThrottle::Allows(const std::string& host, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hosts_.find(host);
  return it == hosts_.end() || now - it->second.start >= kWindow ||
         it->second.wrong < kMaxWrongTokens;
}

void GuessThrottle::Refused(const std::string& host, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (hosts_.size() >= kMaxHosts && hosts_.count(host) == 0) {
    std::erase_if(hosts_, [&](const auto& entry) { return now - entry.second.start >= kWindow; });
    if (hosts_.size() >= kMaxHosts) {  // every window is current: forget the oldest
      hosts_.erase(std::min_element(hosts_.begin(), hosts_.end(), [](const auto& a, const auto& b) {
        return a.second.start < b.second.start;
      }));
    }
  }
  Window& window = hosts_[host];
  if (window.wrong == 0 || now - window.start >= kWindow) window = Window{now, 0};
  ++window.wrong;
}

std::string RandomToken() {
  std::random_device random;
  std::string bytes(32, '\0');
  for (char& b : bytes) b = static_cast<char>(random() & 0xff);
  return absl::BytesToHexString(bytes);
}

}  // namespace tandem::rpc
