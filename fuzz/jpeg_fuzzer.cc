// libFuzzer target: the JPEG decoder (data/jpeg_codec.cc through data::DecodeImage).
// fuzz/image_fuzzer_main.h.
#include "fuzz/image_fuzzer_main.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz::DecodeImageInput(data, size, std::string_view("\xff\xd8\xff", 3));
}
