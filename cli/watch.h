// Following a job from the CLI (`tandem submit --wait`, `tandem logs -f`, the embedded `tandem
// run`): the live progress line from its step metrics, events as log lines, and the final job. gRPC
// code.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "proto/tandem/v1/coordinator.grpc.pb.h"

namespace tandem::cli {

struct WatchOptions {
  std::FILE* progress = stderr;  // progress line and events; nullptr for none
  bool interactive = false;      // redraw the progress line in place
  bool from_start = false;       // replay the recorded events first
  bool follow = true;
  bool json = false;  // events as JSON lines (tandem.v1.JobEvent), no progress line
};

// Streams the job's updates until it ends (or, without follow, until what is recorded was sent) and
// returns its final state. `context` may be cancelled from another thread (Ctrl-C).
absl::StatusOr<v1::Job> WatchJob(v1::Coordinator::Stub& stub, grpc::ClientContext* context,
                                 const std::string& job_id, const WatchOptions& options);

// Text from the coordinator (a job's name, message or events, which may quote a spec or a file) as
// it is safe to print on a terminal: control characters, C1 controls included, become "\x1b"-style
// escapes, so no escape sequence reaches the terminal. Other UTF-8 is kept.
std::string Printable(std::string_view text);

// A message as the CLI prints it with --output json: one line, the proto's field names.
std::string ToJson(const google::protobuf::Message& message);

// "SUCCEEDED", ... without the enum's prefix.
std::string StateName(v1::JobState state);

// The summary of a succeeded job for people (rundir::SummaryText), or its message.
std::string DescribeOutcome(const v1::Job& job);

}  // namespace tandem::cli
