// libFuzzer target: the coordinator's /metrics HTTP request handling (coordinator/metrics_http.h,
// MetricsHttpResponse) on arbitrary request bytes. Beyond "no crash, no hang, no leak": every
// answer is a whole HTTP/1.1 response whose Content-Length is its body's length, and the metrics
// text is served only for GET /metrics.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "coordinator/metrics_http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string request(reinterpret_cast<const char*>(data), size);
  bool served_metrics = false;
  const std::string response = tandem::coordinator::MetricsHttpResponse(request, [&] {
    served_metrics = true;
    return std::string("tandem_up 1\n");
  });
  if (response.rfind("HTTP/1.1 ", 0) != 0) std::abort();
  const size_t head_end = response.find("\r\n\r\n");
  const size_t length_at = response.find("Content-Length: ");
  if (head_end == std::string::npos || length_at == std::string::npos || length_at > head_end)
    std::abort();
  size_t length = 0;
  const size_t length_end = response.find("\r\n", length_at);
  if (!absl::SimpleAtoi(response.substr(length_at + 16, length_end - length_at - 16), &length) ||
      length != response.size() - head_end - 4) {
    std::abort();
  }
  if (served_metrics && (request.rfind("GET /metrics", 0) != 0)) std::abort();
  return 0;
}
