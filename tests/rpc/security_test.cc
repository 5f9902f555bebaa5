// rpc/security.h without a server: which tokens LoadSecurity takes, and how GuessThrottle counts
// wrong tokens per host and window; rpc/health_check.h's HealthStreak, which decides when a
// supervised actor is killed.
#include "rpc/security.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "rpc/health_check.h"

namespace tandem::rpc {
namespace {

namespace fs = std::filesystem;

std::string TokenFile(const std::string& token) {
  const std::string path =
      (fs::temp_directory_path() / ("tandem-token-" + std::to_string(::getpid()))).string();
  std::ofstream(path) << token << "\n";
  return path;
}

TEST(LoadSecurity, RefusesATokenTooShortToResistGuessingOrTooLongForMetadata) {
  SecurityFlags flags;
  flags.token_file = TokenFile("x");
  absl::StatusOr<Security> short_token = LoadSecurity(flags);
  EXPECT_EQ(short_token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(short_token.status().message(),
            "--token-file: " + flags.token_file +
                ": a token of 1 characters; a token has 16 to 4096 (e.g. openssl rand -hex 32)");
  flags.token_file = TokenFile(std::string(4097, 't'));
  EXPECT_EQ(LoadSecurity(flags).status().code(), absl::StatusCode::kInvalidArgument);
  flags.token_file = TokenFile(std::string(16, 't'));
  EXPECT_EQ(LoadSecurity(flags).value().token, std::string(16, 't'));
  fs::remove(flags.token_file);

  ::setenv(kTokenEnvironment, "short", 1);
  EXPECT_EQ(
      LoadSecurity(SecurityFlags{}).status().message(),
      "$TANDEM_TOKEN: a token of 5 characters; a token has 16 to 4096 (e.g. openssl rand -hex 32)");
  ::setenv(kTokenEnvironment, RandomToken().c_str(), 1);
  EXPECT_EQ(LoadSecurity(SecurityFlags{}).value().token.size(), 64u);
  ::unsetenv(kTokenEnvironment);
}

TEST(GuessThrottle, AHostIsRefusedAfterItsWrongTokensUntilItsMinuteEnds) {
  GuessThrottle throttle;
  const auto start = GuessThrottle::Clock::now();
  for (int n = 0; n < GuessThrottle::kMaxWrongTokens; ++n) {
    ASSERT_TRUE(throttle.Allows("ipv4:10.0.0.9", start)) << n;
    throttle.Refused("ipv4:10.0.0.9", start + std::chrono::milliseconds(n));
  }
  EXPECT_FALSE(throttle.Allows("ipv4:10.0.0.9", start + std::chrono::seconds(30)));
  EXPECT_TRUE(throttle.Allows("ipv4:10.0.0.7", start + std::chrono::seconds(30)))
      << "other hosts are not held";
  EXPECT_TRUE(throttle.Allows("ipv4:10.0.0.9", start + std::chrono::seconds(60))) << "a new window";
  throttle.Refused("ipv4:10.0.0.9", start + std::chrono::seconds(60));
  EXPECT_TRUE(throttle.Allows("ipv4:10.0.0.9", start + std::chrono::seconds(61)))
      << "one wrong token of the new window";
}

TEST(GuessThrottle, RemembersABoundedNumberOfHosts) {
  GuessThrottle throttle;
  const auto start = GuessThrottle::Clock::now();
  for (int n = 0; n < GuessThrottle::kMaxWrongTokens; ++n) throttle.Refused("first", start);
  EXPECT_FALSE(throttle.Allows("first", start));
  for (size_t n = 0; n < GuessThrottle::kMaxHosts; ++n) {
    throttle.Refused("host-" + std::to_string(n), start + std::chrono::seconds(1));
  }
  EXPECT_TRUE(throttle.Allows("first", start + std::chrono::seconds(2)))
      << "the oldest window was forgotten";
  EXPECT_TRUE(throttle.Allows("host-0", start + std::chrono::seconds(2)));
}

// A stopped process answers no health check: that counts as much as NOT_SERVING (it once reset the
// count, so a stopped actor was never started again).
TEST(HealthStreak, CountsUnansweredAndNotServingChecksAlikeAndStartsOverOnServing) {
  HealthStreak streak(3);
  const absl::Status silent = absl::DeadlineExceededError("the actor: Deadline Exceeded");
  EXPECT_FALSE(streak.Record(silent));
  EXPECT_FALSE(
      streak.Record(absl::FailedPreconditionError("the actor is not serving (NOT_SERVING)")));
  EXPECT_TRUE(streak.Record(silent));
  EXPECT_EQ(
      streak.Why(),
      "did not answer 3 health checks in a row (stopped or hung: the actor: Deadline Exceeded) "
      "and was killed");
  EXPECT_FALSE(streak.Record(absl::OkStatus()));
  EXPECT_FALSE(streak.Record(absl::FailedPreconditionError("not serving")));
  EXPECT_FALSE(streak.Record(absl::FailedPreconditionError("not serving")));
  EXPECT_TRUE(streak.Record(absl::FailedPreconditionError("not serving")));
  EXPECT_EQ(streak.Why(),
            "was stuck (health NOT_SERVING 3 times in a row: a command ran past the command "
            "timeout) and was killed");
}

}  // namespace
}  // namespace tandem::rpc
