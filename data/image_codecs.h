// Internal to data/: the libpng and libjpeg adapters behind data/image.h. Each decodes bytes that
// already passed the magic-byte check; `name` (the file) opens every error message. Codes as in
// data/image.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "data/image.h"

namespace tandem::data::internal {

// Each refuses an image of more than max_pixels before allocating for its pixels.
absl::StatusOr<Image> DecodePng(std::string_view bytes, const std::string& name,
                                uint64_t max_pixels);
absl::StatusOr<Image> DecodeJpeg(std::string_view bytes, const std::string& name,
                                 uint64_t max_pixels);
absl::StatusOr<Image8> DecodeJpeg8(std::string_view bytes, const std::string& name,
                                   uint64_t max_pixels);

// The height and width a JPEG's frame header declares.
absl::StatusOr<Resolution> JpegSize(std::string_view bytes, const std::string& name);

// "PNG of W x H pixels is too large: at most N are decoded" (kind = "PNG" or "JPEG").
absl::Status TooLargeError(const std::string& name, const char* kind, uint64_t width,
                           uint64_t height, uint64_t max_pixels);

}  // namespace tandem::data::internal
