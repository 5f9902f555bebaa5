// The body of the PNG and JPEG fuzzers: DecodeImage on the input, with the format's magic bytes put
// in front when the input lacks them, so every mutation reaches the decoder under test. Beyond "no
// crash, no hang, no leak": a decoded image is 3 x H x W within the pixel cap, every value in [0,
// 1].
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "data/image.h"

namespace tandem::fuzz {

inline int DecodeImageInput(const uint8_t* data, size_t size, std::string_view magic) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.compare(0, magic.size(), magic) != 0) bytes.insert(0, magic);
  // A 224-pixel model's cap (2^26 pixels): what a training job would allow.
  const uint64_t cap = data::MaxPixelsFor(224);
  absl::StatusOr<data::Image> image = data::DecodeImage(bytes, "fuzz", cap);
  if (!image.ok()) return 0;
  const uint64_t plane = static_cast<uint64_t>(image->height) * static_cast<uint64_t>(image->width);
  if (image->channels != 3 || image->height <= 0 || image->width <= 0 || plane > cap ||
      image->pixels.size() != 3 * plane) {
    std::fprintf(stderr, "decoded %lld x %lld x %lld with %zu values\n",
                 static_cast<long long>(image->channels), static_cast<long long>(image->height),
                 static_cast<long long>(image->width), image->pixels.size());
    std::abort();
  }
  for (float v : image->pixels) {
    if (!(v >= 0.0f && v <= 1.0f)) {
      std::fprintf(stderr, "a decoded value out of [0, 1]: %g\n", v);
      std::abort();
    }
  }
  return 0;
}

}  // namespace tandem::fuzz
