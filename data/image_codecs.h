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

// Refuse images above this many pixels before allocating for them: a corrupt header can claim
// 2^31 x 2^31, and 2^28 pixels (16384^2) already need 3 GiB as floats.
inline constexpr uint64_t kMaxImagePixels = uint64_t{1} << 28;

absl::StatusOr<Image> DecodePng(std::string_view bytes, const std::string& name);
absl::StatusOr<Image> DecodeJpeg(std::string_view bytes, const std::string& name);

}  // namespace tandem::data::internal
