#include "cli/watch.h"

#include <google/protobuf/util/json_util.h>

#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rpc/status.h"
#include "rundir/progress.h"
#include "rundir/summary.h"

namespace tandem::cli {

std::string ToJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

std::string StateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  const std::string prefix = "JOB_STATE_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

std::string Printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  int continuation = 0;  // bytes still owed to the UTF-8 sequence being copied
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (continuation > 0 && c >= 0x80 && c <= 0xbf) {
      out += static_cast<char>(c);
      --continuation;
      continue;
    }
    continuation = 0;
    const bool c1 = c == 0xc2 && i + 1 < text.size() &&
                    static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(text[i + 1]) <= 0x9f;  // U+0080..U+009F in UTF-8
    if (c1) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(text[++i]));
    } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0xbf) || c >= 0xf5 || c == 0xc0 ||
               c == 0xc1) {
      out += absl::StrFormat("\\x%02x",
                             c);  // controls, and bytes that start no UTF-8 character (0x9b is CSI)
    } else {
      out += static_cast<char>(c);
      continuation = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 ? 1 : 0;
    }
  }
  return out;
}

std::string DescribeOutcome(const v1::Job& job) {
  if (job.state() == v1::JOB_STATE_SUCCEEDED && !job.summary_json().empty()) {
    absl::StatusOr<rundir::RunSummary> summary = rundir::ParseSummaryJson(job.summary_json());
    if (summary.ok()) {
      // The text is lines of its own; what came from users is escaped.
      rundir::RunSummary printable = *summary;
      printable.job_name = Printable(printable.job_name);
      printable.run_dir = Printable(printable.run_dir);
      printable.last_checkpoint = Printable(printable.last_checkpoint);
      return rundir::SummaryText(printable);
    }
  }
  return absl::StrCat(job.job_id(), " ", StateName(job.state()), job.message().empty() ? "" : ": ",
                      Printable(job.message()), "\n");
}

absl::StatusOr<v1::Job> WatchJob(v1::Coordinator::Stub& stub, grpc::ClientContext* context,
                                 const std::string& job_id, const WatchOptions& options) {
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  request.set_from_start(options.from_start);
  request.set_follow(options.follow);
  std::unique_ptr<grpc::ClientReader<v1::JobUpdate>> reader = stub.WatchJob(context, request);
  rundir::ProgressPrinter printer(options.progress, options.interactive);
  v1::JobUpdate update;
  v1::Job last;
  bool have_job = false;
  while (reader->Read(&update)) {
    if (update.has_event() && options.progress && options.json) {
      std::fprintf(options.progress, "%s\n", ToJson(update.event()).c_str());
    } else if (update.has_step() && options.progress && !options.json) {
      const v1::StepMetrics& m = update.step();
      printer.Update({m.step(), m.steps(), m.loss(), m.samples_per_s(), m.elapsed_s(), ""});
    } else if (update.has_event() && options.progress) {
      printer.Finish();
      std::time_t t = static_cast<std::time_t>(update.event().time());
      std::tm local{};
      localtime_r(&t, &local);
      char stamp[32];
      std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
      std::fprintf(options.progress, "%s  %s\n", stamp, Printable(update.event().text()).c_str());
    } else if (update.has_job()) {
      last = update.job();
      have_job = true;
    }
  }
  printer.Finish();
  grpc::Status status = reader->Finish();
  if (!status.ok()) return rpc::FromGrpc(status, absl::StrCat("watching ", job_id));
  if (!have_job)
    return absl::UnavailableError(
        absl::StrCat("the coordinator ended the watch of ", job_id, " early"));
  return last;
}

}  // namespace tandem::cli
