// libFuzzer target: the engine config parser (engine_config::ParseConfig: DeepSpeed's JSON keys,
// strict) on arbitrary bytes. An error must name a key path or say the text is not JSON.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine_config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<tandem::engine_config::Config> config = tandem::engine_config::ParseConfig(text);
  if (!config.ok() && config.status().message().empty()) {
    std::fprintf(stderr, "an error without a message (%d)\n",
                 static_cast<int>(config.status().code()));
    std::abort();
  }
  return 0;
}
