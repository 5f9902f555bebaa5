#include "cli/doctor_command.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/security_flags.h"
#include "platform/local_socket_probe.h"
#include "platform/report.h"
#include "proto/tandem/v1/coordinator.grpc.pb.h"
#include "rpc/channel.h"
#include "rpc/health_check.h"
#include "rpc/status.h"

namespace tandem::cli {
namespace {

using Json = nlohmann::ordered_json;

struct DoctorFlags {
  std::string coordinator;  // "": not checked
  double timeout_s = 5;
  std::string output = "text";
  bool skip_probes = false;
  rpc::SecurityFlags security;
};

// ---- The coordinator ----

struct CoordinatorCheck {
  std::string address;
  bool reachable = false;
  std::string reason;  // when unreachable: "connection refused", "timeout", "unauthenticated", ...
  std::string detail;  // when unreachable: the call's message
  int actors = 0;      // when reachable: registered actors
};

// A short reason for a failed call, from its code and (for UNAVAILABLE) gRPC's message.
std::string Reason(const absl::Status& status, double timeout_s) {
  const std::string message = absl::AsciiStrToLower(status.message());
  switch (status.code()) {
    case absl::StatusCode::kUnauthenticated:
      return "unauthenticated";
    case absl::StatusCode::kDeadlineExceeded:
      return absl::StrCat("timeout (no answer within ", timeout_s, " s)");
    case absl::StatusCode::kUnavailable:
      if (absl::StrContains(message, "is not serving")) return "not serving";
      if (absl::StrContains(message, "connection refused")) return "connection refused";
      if (absl::StrContains(message, "dns") || absl::StrContains(message, "resolv")) {
        return "cannot resolve the host";
      }
      if (absl::StrContains(message, "handshake") || absl::StrContains(message, "ssl")) {
        return "TLS handshake failed";
      }
      return "unavailable";
    default:
      return absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
  }
}

// The health service first (no token: is anything serving there?), then ListActors, which every
// coordinator answers only with the cluster's token.
CoordinatorCheck CheckCoordinator(const std::string& address, double timeout_s) {
  CoordinatorCheck check;
  check.address = address;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  const std::string what = absl::StrCat("coordinator ", address);
  absl::Status status = rpc::CheckHealth(address, timeout, what);
  if (status.ok()) {
    auto stub = v1::Coordinator::NewStub(rpc::MakeChannel(address));
    v1::ListActorsResponse actors;
    status = rpc::FromGrpc(stub->ListActors(rpc::ContextWithTimeout(timeout).get(), {}, &actors),
                           absl::StrCat(what, ": ListActors"));
    check.actors = actors.actors_size();
  }
  check.reachable = status.ok();
  if (!status.ok()) {
    check.reason = Reason(status, timeout_s);
    check.detail = std::string(status.message());
  }
  return check;
}

// ---- Findings and the verdict ----

struct Findings {
  std::vector<std::string> failures, warnings, notes;

  std::string Verdict() const {
    if (!failures.empty()) return absl::StrCat("not ready: ", absl::StrJoin(failures, "; "));
    if (!warnings.empty())
      return absl::StrCat("ready with warnings: ", absl::StrJoin(warnings, "; "));
    return "ready";
  }
};

Findings Assess(const platform::PlatformReport& report, const platform::LocalSocketProbe& link,
                const std::optional<CoordinatorCheck>& coordinator) {
  Findings f;
  const BlasInfo& blas = report.blas;
  if (blas.kind == BlasInfo::Kind::kReference) {
    f.warnings.push_back(
        "the reference BLAS multiplies fp32 matrices about 40x slower than OpenBLAS (install "
        "libopenblas0-openmp; scripts/setup does)");
  } else if (blas.kind == BlasInfo::Kind::kOpenBlas && blas.threading == "pthreads") {
    f.warnings.push_back(
        "OpenBLAS runs its own pthreads beside LibTorch's OpenMP threads, 3-4x slower on small "
        "models (point the libblas.so.3 and libopenblas.so.0 alternatives at openblas-openmp)");
  } else if (blas.kind == BlasInfo::Kind::kNone &&
             (report.libtorch.blas_info.empty() || report.libtorch.blas_info == "generic")) {
    f.warnings.push_back("no BLAS found: LibTorch exports no sgemm_ and names none of its own");
  } else if (blas.kind == BlasInfo::Kind::kOther) {
    f.notes.push_back(absl::StrCat("unrecognised BLAS ", blas.library));
  }
  if (!report.cpu.bf16.native) {
    const bool emulated = report.cpu.bf16_override == platform::CpuBf16Override::kEmulated;
    f.notes.push_back(absl::StrCat(
        "no native bf16 on the CPU (", report.cpu.bf16.detail,
        "): torch_autocast \"auto\" computes in ",
        emulated ? "emulated bf16 there, as TANDEM_CPU_BF16=emulated asks" : "fp32 there"));
  }
  const platform::CudaReport& cuda = report.cuda;
  if (cuda.unusable) {
    f.warnings.push_back(cuda.none_reason);
  } else if (cuda.devices.empty()) {
    f.notes.push_back(cuda.none_reason);
  }
  for (const platform::CudaDevice& d : cuda.devices) {
    if (!d.error.empty()) f.failures.push_back(absl::StrCat("cuda:", d.index, ": ", d.error));
    if (d.error.empty() && !d.bf16.native) {
      f.notes.push_back(absl::StrCat("cuda:", d.index, " (", d.name,
                                     ") has no native bf16 (compute capability ", d.major, ".",
                                     d.minor, ")"));
    }
  }
  if (!report.nccl.error.empty()) f.failures.push_back(report.nccl.error);
  if (!link.ok) {
    f.warnings.push_back(absl::StrCat("no local links on this host (", link.error,
                                      "): actors here talk over gRPC on loopback, slower"));
  }
  if (coordinator && !coordinator->reachable) {
    f.failures.push_back(absl::StrCat("coordinator ", coordinator->address, " unreachable (",
                                      coordinator->reason, ")"));
  }
  return f;
}

// ---- Output ----

std::string BlasKind(BlasInfo::Kind kind) {
  switch (kind) {
    case BlasInfo::Kind::kReference:
      return "reference";
    case BlasInfo::Kind::kOpenBlas:
      return "openblas";
    case BlasInfo::Kind::kBlis:
      return "blis";
    case BlasInfo::Kind::kMkl:
      return "mkl";
    case BlasInfo::Kind::kOther:
      return "other";
    case BlasInfo::Kind::kNone:
      break;
  }
  return "none";
}

Json OrNull(const std::optional<double>& value) { return value ? Json(*value) : Json(nullptr); }

Json ToJson(const platform::PlatformReport& r, const platform::LocalSocketProbe& link,
            const std::optional<CoordinatorCheck>& coordinator, const Findings& findings) {
  Json out;
  out["verdict"] = !findings.failures.empty()   ? "not ready"
                   : !findings.warnings.empty() ? "ready with warnings"
                                                : "ready";
  out["summary"] = findings.Verdict();
  out["failures"] = findings.failures;
  out["warnings"] = findings.warnings;
  out["notes"] = findings.notes;
  out["libtorch"] = {{"version", r.libtorch.version},
                     {"cuda", r.libtorch.cuda},
                     {"cuda_version", r.libtorch.cuda_version},
                     {"tandem_cuda", r.libtorch.tandem_cuda},
                     {"blas_info", r.libtorch.blas_info},
                     {"mkl", r.libtorch.mkl},
                     {"threads", r.libtorch.threads}};
  out["blas"] = {{"kind", BlasKind(r.blas.kind)},
                 {"library", r.blas.library},
                 {"implementation", r.blas.implementation},
                 {"version", r.blas.version},
                 {"threading", r.blas.threading}};
  Json cpu = {{"model", r.cpu.features.model},
              {"arch", r.cpu.features.arch},
              {"features", r.cpu.features.Summary()},
              {"native_bf16", r.cpu.bf16.native},
              {"bf16_detail", r.cpu.bf16.detail},
              {"bf16_override",
               r.cpu.bf16_override == platform::CpuBf16Override::kAbsent     ? Json("absent")
               : r.cpu.bf16_override == platform::CpuBf16Override::kEmulated ? Json("emulated")
                                                                             : Json(nullptr)},
              {"matmul", nullptr}};
  if (r.cpu.matmul) {
    cpu["matmul"] = {{"fp32_gflops", r.cpu.matmul->fp32_gflops},
                     {"bf16_gflops", r.cpu.matmul->bf16_gflops},
                     {"bf16_slowdown", r.cpu.matmul->slowdown()}};
  }
  out["cpu"] = cpu;
  Json devices = Json::array();
  for (const platform::CudaDevice& d : r.cuda.devices) {
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"compute_capability", absl::StrCat(d.major, ".", d.minor)},
                       {"memory_bytes", d.memory_bytes},
                       {"native_bf16", d.bf16.native},
                       {"bf16_matmul_tflops", OrNull(d.bf16_matmul_tflops)},
                       {"error", d.error}});
  }
  out["cuda"] = {{"devices", devices}, {"none_reason", r.cuda.none_reason}};
  Json all_reduce = nullptr;
  if (const auto& a = r.nccl.all_reduce) {
    all_reduce = {
        {"gpus", a->gpus},       {"bytes", a->bytes},           {"iterations", a->iterations},
        {"seconds", a->seconds}, {"algbw_gbps", a->algbw_gbps}, {"busbw_gbps", a->busbw_gbps}};
  }
  out["nccl"] = {{"built_in", r.nccl.built_in},
                 {"version", r.nccl.built_in ? Json(r.nccl.version) : Json(nullptr)},
                 {"all_reduce", all_reduce},
                 {"error", r.nccl.error}};
  out["local_link"] = {{"ok", link.ok},     {"name", link.name},          {"bytes", link.bytes},
                       {"step", link.step}, {"errno", link.error_number}, {"error", link.error}};
  out["coordinator"] = nullptr;
  if (coordinator) {
    out["coordinator"] = {
        {"address", coordinator->address},
        {"reachable", coordinator->reachable},
        {"actors", coordinator->reachable ? Json(coordinator->actors) : Json(nullptr)},
        {"reason", coordinator->reason},
        {"detail", coordinator->detail}};
  }
  return out;
}

void Line(const char* label, const std::string& text) {
  std::printf("%-13s%s\n", label, text.c_str());
}

void PrintText(const platform::PlatformReport& r, const platform::LocalSocketProbe& link,
               const std::optional<CoordinatorCheck>& coordinator, const Findings& findings,
               bool probes) {
  const platform::LibTorchInfo& torch = r.libtorch;
  Line("LibTorch",
       absl::StrCat(
           torch.version,
           torch.cuda ? absl::StrCat(" with CUDA ", torch.cuda_version) : ", built without CUDA",
           torch.cuda && !torch.tandem_cuda ? " (this build of Tandem has no CUDA code)" : "", "; ",
           torch.threads, torch.threads == 1 ? " intra-op thread" : " intra-op threads"));
  std::string blas;
  if (r.blas.kind != BlasInfo::Kind::kNone) {
    blas = absl::StrCat(
        r.blas.Describe(),
        r.blas.threading.empty() ? "" : absl::StrCat(", ", r.blas.threading, " threading"));
  } else {
    blas = absl::StrCat(
        "LibTorch's own: BLAS_INFO=", torch.blas_info.empty() ? "unknown" : torch.blas_info,
        torch.mkl.empty() ? "" : absl::StrCat(" (", torch.mkl, ")"));
  }
  Line("BLAS", blas);
  const CpuFeatures& cpu = r.cpu.features;
  Line("CPU", absl::StrCat(cpu.model.empty() ? "unknown model" : cpu.model, " (", cpu.arch, ": ",
                           cpu.Summary(), ")"));
  std::string bf16 = r.cpu.bf16.native ? absl::StrCat("native (", r.cpu.bf16.detail, ")")
                                       : absl::StrCat("not native: ", r.cpu.bf16.detail);
  if (r.cpu.bf16_override != platform::CpuBf16Override::kNone) {
    absl::StrAppend(&bf16, " (the CPU itself: ",
                    cpu.native_bf16() ? cpu.Bf16Instructions() : "no bf16 instructions", ")");
  }
  Line("CPU bf16", bf16);
  if (const auto& m = r.cpu.matmul) {
    Line("CPU matmul",
         absl::StrFormat("fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s (bf16 %.1fx %s)", m->fp32_gflops,
                         m->bf16_gflops, m->slowdown() >= 1 ? m->slowdown() : 1 / m->slowdown(),
                         m->slowdown() >= 1 ? "slower" : "faster"));
  } else {
    Line("CPU matmul", "not measured (--skip-probes)");
  }
  if (r.cuda.devices.empty()) Line("CUDA", absl::StrCat("none: ", r.cuda.none_reason));
  for (const platform::CudaDevice& d : r.cuda.devices) {
    std::string text = absl::StrFormat(
        "cuda:%d %s, compute capability %d.%d, %.1f GiB, %s", d.index, d.name, d.major, d.minor,
        d.memory_bytes / double(1 << 30), d.bf16.native ? "native bf16" : "no native bf16");
    if (d.bf16_matmul_tflops)
      absl::StrAppendFormat(&text, "; bf16 matmul %.1f TFLOP/s", *d.bf16_matmul_tflops);
    if (!d.error.empty()) absl::StrAppend(&text, "; failed: ", d.error);
    Line(d.index == 0 ? "CUDA" : "", text);
  }
  std::string nccl = r.nccl.built_in ? r.nccl.version : "not built in";
  if (const auto& a = r.nccl.all_reduce) {
    absl::StrAppendFormat(
        &nccl, "; all-reduce of %d MiB across %d GPUs: busbw %.1f GB/s (algbw %.1f GB/s)",
        static_cast<int>(a->bytes >> 20), a->gpus, a->busbw_gbps, a->algbw_gbps);
  } else if (!r.nccl.error.empty()) {
    absl::StrAppend(&nccl, "; all-reduce failed: ", r.nccl.error);
  } else if (r.nccl.built_in && probes && r.cuda.devices.size() == 1) {
    absl::StrAppend(&nccl, "; one GPU, no all-reduce to measure");
  }
  Line("NCCL", nccl);
  Line("Local links", link.ok ? absl::StrCat("OK: abstract Unix socket @", link.name, ", ",
                                             link.bytes, " bytes each way")
                              : absl::StrCat("failed: ", link.error));
  if (!coordinator) {
    Line("Coordinator", "not checked (--coordinator HOST:PORT)");
  } else if (coordinator->reachable) {
    Line("Coordinator", absl::StrCat(coordinator->address, " serving, token accepted, ",
                                     coordinator->actors, " actors registered"));
  } else {
    Line("Coordinator", absl::StrCat(coordinator->address, " unreachable: ", coordinator->reason,
                                     " (", coordinator->detail, ")"));
  }
  std::printf("\n");
  for (const std::string& note : findings.notes) std::printf("note: %s\n", note.c_str());
  std::printf("%s\n", findings.Verdict().c_str());
}

int RunDoctor(const DoctorFlags& flags) {
  platform::ReportOptions options;
  options.probes = !flags.skip_probes;
  const platform::PlatformReport report = platform::ReportPlatform(options);
  const platform::LocalSocketProbe link = platform::ProbeLocalSocket();
  std::optional<CoordinatorCheck> coordinator;
  if (!flags.coordinator.empty())
    coordinator = CheckCoordinator(flags.coordinator, flags.timeout_s);
  const Findings findings = Assess(report, link, coordinator);
  if (flags.output == "json") {
    std::printf("%s\n", ToJson(report, link, coordinator, findings).dump().c_str());
  } else {
    PrintText(report, link, coordinator, findings, options.probes);
  }
  return findings.failures.empty() ? 0 : 1;
}

}  // namespace

void AddDoctorCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<DoctorFlags>();
  CLI::App* doctor = app.add_subcommand("doctor",
                                        "Check this host for Tandem: LibTorch, BLAS, CPU and bf16, "
                                        "CUDA devices, NCCL, local links and "
                                        "(given --coordinator) the coordinator; ends with a "
                                        "verdict. Exit code 0 when ready (warnings "
                                        "allowed), 1 when not");
  doctor->add_option(
      "--coordinator", flags->coordinator,
      "Coordinator HOST:PORT to check: its health service, then one call with the token "
      "(default: not checked)");
  doctor->add_option("--timeout", flags->timeout_s, "Seconds each coordinator call may take")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  doctor
      ->add_option("--output", flags->output,
                   "text: one line per part and the verdict; json: one object")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  doctor->add_flag(
      "--skip-probes", flags->skip_probes,
      "Skip the timed measurements (CPU matmul fp32 against bf16; on GPUs a bf16 matmul each "
      "and an NCCL all-reduce across them)");
  AddSecurityFlags(doctor, &flags->security);
  doctor->callback([=] {
    *exit_code = WithSecurity("doctor", flags->security, [&] { return RunDoctor(*flags); });
  });
}

}  // namespace tandem::cli
