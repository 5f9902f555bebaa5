// Format detection, resampling and PNG file output for data/image.h; the codecs live in
// png_codec.cc and jpeg_codec.cc.
#include "data/image.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "data/image_codecs.h"

namespace tandem::data {
namespace {

constexpr std::string_view kPngMagic("\x89PNG\r\n\x1a\n", 8);
constexpr std::string_view kJpegMagic("\xff\xd8\xff", 3);

// Where output coordinate `dst` samples its source axis of `in` pixels (scale = in / out), as
// torch's area_pixel_compute_source_index with align_corners=false: the lower neighbour, the upper
// one and the upper one's weight.
struct Tap {
  int64_t lower;
  int64_t upper;
  float weight;
};

std::vector<Tap> Taps(int64_t in, int64_t out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  std::vector<Tap> taps(out);
  for (int64_t dst = 0; dst < out; ++dst) {
    const float source = std::max(scale * (dst + 0.5f) - 0.5f, 0.0f);
    const int64_t lower = std::min(static_cast<int64_t>(source), in - 1);
    taps[dst] = {lower, lower < in - 1 ? lower + 1 : lower, source - static_cast<float>(lower)};
  }
  return taps;
}

}  // namespace

namespace internal {

absl::Status TooLargeError(const std::string& name, const char* kind, uint64_t width,
                           uint64_t height, uint64_t max_pixels) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": ", kind, " of ", width, " x ", height, " pixels is too large: at most ",
                   max_pixels, " pixels are decoded for this model's resolution"));
}

}  // namespace internal

uint64_t MaxPixelsFor(int64_t image_size) {
  constexpr uint64_t kFloor = uint64_t{1} << 26;
  if (image_size <= 0) return kFloor;
  const uint64_t side = static_cast<uint64_t>(image_size);
  if (side >= (uint64_t{1} << 14))
    return kMaxImagePixels;  // 256 x side^2 would pass the cap anyway
  return std::clamp(side * side * 256, kFloor, kMaxImagePixels);
}

absl::StatusOr<Image> DecodeImage(std::string_view bytes, const std::string& name,
                                  uint64_t max_pixels) {
  max_pixels = std::min(max_pixels, kMaxImagePixels);
  if (bytes.substr(0, kPngMagic.size()) == kPngMagic)
    return internal::DecodePng(bytes, name, max_pixels);
  if (bytes.substr(0, kJpegMagic.size()) == kJpegMagic)
    return internal::DecodeJpeg(bytes, name, max_pixels);
  if (bytes.empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": file is empty"));
  // Nothing of the bytes themselves: the file may be any file a job spec named.
  return absl::InvalidArgumentError(absl::StrCat(name, ": not a PNG or JPEG file"));
}

bool IsJpeg(std::string_view bytes) { return bytes.substr(0, kJpegMagic.size()) == kJpegMagic; }

absl::StatusOr<Image8> DecodeJpeg8(std::string_view bytes, const std::string& name,
                                   uint64_t max_pixels) {
  if (!IsJpeg(bytes)) return absl::InvalidArgumentError(absl::StrCat(name, ": not a JPEG file"));
  return internal::DecodeJpeg8(bytes, name, std::min(max_pixels, kMaxImagePixels));
}

Image ToFloatImage(const Image8& image) {
  Image out;
  out.channels = image.channels;
  out.height = image.height;
  out.width = image.width;
  out.pixels.resize(image.pixels.size());
  const uint8_t* __restrict from = image.pixels.data();
  float* __restrict to = out.pixels.data();
  for (size_t i = 0; i < image.pixels.size(); ++i) to[i] = static_cast<float>(from[i]) / 255.0f;
  return out;
}

absl::StatusOr<Image> DecodeImageFile(const std::string& path, uint64_t max_pixels) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadUserFile(path));
  return DecodeImage(bytes, path, max_pixels);
}

absl::StatusOr<Resolution> ReadImageSize(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadUserFile(path));
  return ImageSizeOf(bytes, path);
}

absl::StatusOr<Resolution> ImageSizeOf(std::string_view bytes, const std::string& path) {
  if (bytes.substr(0, kJpegMagic.size()) == kJpegMagic) return internal::JpegSize(bytes, path);
  if (bytes.substr(0, kPngMagic.size()) != kPngMagic) {
    RETURN_IF_ERROR(DecodeImage(bytes, path).status());  // its error for what is no image
  }
  // PNG puts IHDR first: length 13, "IHDR", then width and height, 4 bytes each, big-endian.
  const auto word = [&](size_t at) {
    int64_t value = 0;
    for (size_t i = 0; i < 4; ++i) value = value << 8 | static_cast<unsigned char>(bytes[at + i]);
    return value;
  };
  if (bytes.size() < 24 || bytes.compare(12, 4, "IHDR") != 0 || word(16) <= 0 || word(20) <= 0) {
    return absl::DataLossError(absl::StrCat(path, ": corrupt PNG: no image header"));
  }
  return Resolution{word(20), word(16)};
}

Image ResizeBilinear(const Image& image, int64_t height, int64_t width) {
  if (image.height == height && image.width == width) return image;
  Image out;
  out.channels = image.channels;
  out.height = height;
  out.width = width;
  out.pixels.resize(out.channels * height * width);
  const std::vector<Tap> rows = Taps(image.height, height);
  const std::vector<Tap> columns = Taps(image.width, width);
  for (int64_t c = 0; c < out.channels; ++c) {
    for (int64_t y = 0; y < height; ++y) {
      const Tap& r = rows[y];
      for (int64_t x = 0; x < width; ++x) {
        const Tap& q = columns[x];
        // Same association as torch's CPU kernel, so equal inputs give (nearly) equal bits.
        const float top = (1 - q.weight) * image.at(c, r.lower, q.lower) +
                          q.weight * image.at(c, r.lower, q.upper);
        const float bottom = (1 - q.weight) * image.at(c, r.upper, q.lower) +
                             q.weight * image.at(c, r.upper, q.upper);
        out.at(c, y, x) = (1 - r.weight) * top + r.weight * bottom;
      }
    }
  }
  return out;
}

absl::Status WritePng(const Image& image, const std::string& path) {
  ASSIGN_OR_RETURN(const std::string encoded, EncodePng(image));
  return WriteFileAtomically(path, encoded);
}

}  // namespace tandem::data
