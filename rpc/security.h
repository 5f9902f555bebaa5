// Who may call: a shared token on every rpc and optional TLS, the same for every server and client
// of one process (the coordinator, an actor, the CLI).
//
// The token travels as "authorization: Bearer <token>" metadata on each call (every client context
// comes from NewContext or ContextWithTimeout in rpc/channel.h), and every handler of Tandem's
// services starts with TANDEM_AUTHORIZE, which answers UNAUTHENTICATED when it is missing or wrong
// and logs that once per peer host. The local data plane (transport/local_link.h) needs no token of
// its own: its socket name and nonce are only handed out by Peer.LocalEndpoint, which checks it.
// The standard gRPC health service (grpc.health.v1, for Kubernetes probes) answers without one.
//
// With TLS, servers present --tls-cert/--tls-key and, given --tls-ca, require clients to present a
// certificate signed by it; clients verify the server against --tls-ca and present their own
// certificate and key. One certificate whose names cover every address in use serves all.
//
// Install once in main, before the first channel or server; the settings are read-only afterwards.
// gRPC code only (never included by LibTorch translation units).
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"

namespace tandem::rpc {

// The environment variable that holds the token when no --token-file is given.
inline constexpr char kTokenEnvironment[] = "TANDEM_TOKEN";
// A token is 16 to 4096 characters: a shorter one is guessed, a longer one does not fit gRPC's
// metadata. RandomToken makes 64.
inline constexpr size_t kMinTokenLength = 16;
inline constexpr size_t kMaxTokenLength = 4096;

// Paths as given on the command line; empty: not given.
struct SecurityFlags {
  std::string token_file;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
};

struct Security {
  std::string token;  // empty: calls carry none and servers ask for none
  std::string cert_pem, key_pem, ca_pem;
  bool tls() const { return !cert_pem.empty() || !ca_pem.empty(); }
};

// Reads the files `flags` name; the token comes from --token-file, else from $TANDEM_TOKEN (with
// surrounding whitespace removed). InvalidArgument naming the flag and the file when one cannot be
// read, is empty, holds a token shorter than kMinTokenLength or longer than kMaxTokenLength, or
// when --tls-cert and --tls-key are not given together.
absl::StatusOr<Security> LoadSecurity(const SecurityFlags& flags);

// Sets this process's settings. Call once from main, before any channel or server exists.
void InstallSecurity(Security security);
const Security& InstalledSecurity();

// Credentials for channels and listening ports under the installed settings: TLS or plaintext.
std::shared_ptr<grpc::ChannelCredentials> ClientCredentials();
std::shared_ptr<grpc::ServerCredentials> ServerCredentials();

// Adds the installed token to a call's metadata (nothing without a token).
void AttachToken(grpc::ClientContext& context);

// OK when the call carries the installed token (or none is installed); UNAUTHENTICATED otherwise,
// logged once per peer host. A host that presented kMaxWrongTokens wrong tokens within a minute is
// refused without a comparison until that minute ends (GuessThrottle).
grpc::Status Authorize(const grpc::ServerContext& context);

// Counts each peer host's wrong tokens (a call without one guesses nothing) per minute-long window,
// so a token cannot be guessed at the rate the server answers. Bounded: it remembers at most
// kMaxHosts hosts, forgetting the oldest windows first. Thread-safe.
class GuessThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kMaxWrongTokens = 100;
  static constexpr size_t kMaxHosts = 4096;
  static constexpr Clock::duration kWindow = std::chrono::minutes(1);

  // False while `host` has used up its wrong tokens in its current window.
  bool Allows(const std::string& host, Clock::time_point now);
  // Counts one wrong token from `host`.
  void Refused(const std::string& host, Clock::time_point now);

 private:
  struct Window {
    Clock::time_point start;
    int wrong = 0;
  };
  std::mutex mu_;
  std::map<std::string, Window> hosts_;  // guarded by mu_
};

// A random token of 32 bytes in hex, for a process that starts its own cluster (`tandem run`).
std::string RandomToken();

}  // namespace tandem::rpc

// The first line of every rpc handler: returns UNAUTHENTICATED unless the call carries the token.
#define TANDEM_AUTHORIZE(context)                                                     \
  do {                                                                                \
    if (::grpc::Status denied = ::tandem::rpc::Authorize(*(context)); !denied.ok()) { \
      return denied;                                                                  \
    }                                                                                 \
  } while (false)
