// libFuzzer target: the PNG decoder (data/png_codec.cc through data::DecodeImage).
// fuzz/image_fuzzer_main.h.
#include "fuzz/image_fuzzer_main.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz::DecodeImageInput(data, size, std::string_view("\x89PNG\r\n\x1a\n", 8));
}
