#include "cli/security_flags.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace tandem::cli {

void AddSecurityFlags(CLI::App* command, rpc::SecurityFlags* flags) {
  command->add_option("--token-file", flags->token_file,
                      absl::StrCat("File holding the cluster's shared token, sent and required on "
                                   "every rpc (default: $",
                                   rpc::kTokenEnvironment, "; neither: no token)"));
  command->add_option("--tls-cert", flags->tls_cert,
                      "PEM certificate this process presents, as server and as client (with "
                      "--tls-key)");
  command->add_option("--tls-key", flags->tls_key, "PEM private key of --tls-cert");
  command->add_option("--tls-ca", flags->tls_ca,
                      "PEM CA certificates to verify peers with; servers then require client "
                      "certificates signed by them");
}

int WithSecurity(const std::string& command, const rpc::SecurityFlags& flags,
                 const std::function<int()>& run) {
  absl::StatusOr<rpc::Security> security = rpc::LoadSecurity(flags);
  if (!security.ok()) {
    std::fprintf(stderr, "tandem %s: %s\n", command.c_str(),
                 std::string(security.status().message()).c_str());
    return 2;
  }
  rpc::InstallSecurity(*std::move(security));
  return run();
}

}  // namespace tandem::cli
