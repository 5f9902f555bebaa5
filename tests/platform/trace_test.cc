// platform/trace.h: a Chrome trace of LibTorch's operators; one at a time.
#include "platform/trace.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"

namespace tandem::platform {
namespace {

TEST(Trace, RecordsTheOperatorsRunBetweenStartAndSave) {
  const std::string path = (std::filesystem::path(::testing::TempDir()) /
                            ("tandem_trace_" + std::to_string(::getpid()) + ".json"))
                               .string();
  const absl::Status started = StartTrace(/*cuda=*/false);
#if TORCH_VERSION_MAJOR >= 2
  ASSERT_TRUE(started.ok()) << started;  // PyPI's LibTorch has Kineto
#else
  if (started.code() == absl::StatusCode::kUnimplemented) {  // Debian's 1.13 has none
    EXPECT_EQ(started.message(), "LibTorch " TORCH_VERSION " is built without the Kineto profiler");
    return;
  }
  ASSERT_TRUE(started.ok()) << started;
#endif
  EXPECT_EQ(StartTrace(false).code(), absl::StatusCode::kFailedPrecondition);
  const at::Tensor product = at::mm(torch::ones({8, 8}), torch::ones({8, 8}));
  EXPECT_EQ(product.sum().item<float>(), 512.0f);
  const absl::Status saved = SaveTrace(path);
  ASSERT_TRUE(saved.ok()) << saved;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json trace =
      nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(trace.is_object() && trace.contains("traceEvents")) << text.str().substr(0, 500);
  bool mm = false;
  for (const auto& event : trace["traceEvents"]) mm |= event.value("name", "") == "aten::mm";
  EXPECT_TRUE(mm) << "no aten::mm event in the trace";
  std::filesystem::remove(path);
}

TEST(Trace, SavingWithoutATraceIsRefused) {
  const absl::Status status = SaveTrace("/nonexistent/trace.json");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), "no trace is recording");
}

}  // namespace
}  // namespace tandem::platform
