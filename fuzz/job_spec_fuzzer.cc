// libFuzzer target: the job-spec parser and validator (jobspec::ResolveJobSpecJson) on arbitrary
// bytes. Beyond "no crash, no hang, no leak": a spec that parses must read back, from the JSON it
// is recorded as (ResolvedJobSpec::json, protobuf's printer: what the coordinator stores and
// job.json holds), into an equal config,
// and each group's memory estimate (what submit checks) must be computed without overflowing or
// dividing by zero (UBSan), and be a number of bytes >= 0.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "jobspec/job_spec.h"
#include "jobspec/memory_estimate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<tandem::jobspec::ResolvedJobSpec> resolved =
      tandem::jobspec::ResolveJobSpecJson(text, "fuzz.json");
  if (!resolved.ok()) return 0;
  const tandem::jobspec::JobConfig* config = &resolved->config;
  const std::string& recorded = resolved->json;
  absl::StatusOr<tandem::jobspec::JobConfig> again =
      tandem::jobspec::ParseJobSpecJson(recorded, "recorded.json");
  if (!again.ok() || !(*again == *config)) {
    std::fprintf(stderr, "a valid spec's recorded form does not read back: %s\n%s\n",
                 again.ok() ? "another config" : std::string(again.status().message()).c_str(),
                 recorded.c_str());
    std::abort();
  }
  for (const tandem::Role role : tandem::kRoles) {
    absl::StatusOr<tandem::jobspec::MemoryEstimate> estimate =
        tandem::jobspec::EstimateGroupMemory(*config, role);
    if (!estimate.ok() || estimate->total() < 0 || estimate->model_state_bytes < 0) {
      std::fprintf(stderr, "a valid spec's %s memory estimate is %s\n", tandem::RoleName(role),
                   estimate.ok() ? "negative" : std::string(estimate.status().message()).c_str());
      std::abort();
    }
  }
  return 0;
}
