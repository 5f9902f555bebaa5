// Images as the models see them, and the codecs that read and write them.
//
// An Image is planar float RGB (CHW) with values in [0, 1]: every decoder converts to exactly that,
// so the rest of the pipeline never sees a channel count, a bit depth or an alpha channel. There is
// no colour management: the stored sample values are divided by their maximum (255, or 65535
// rounded to 8 bits) and gamma/ICC chunks are ignored.
//
// Error codes: NotFound (or another errno code) when the file cannot be read; InvalidArgument when
// it is neither PNG nor JPEG, or a JPEG colour space we do not decode (CMYK); DataLoss when it is
// corrupt or truncated. Every message names the file. libpng and libjpeg errors are caught (their
// longjmp lands in a frame that owns nothing), so a bad file never crashes or leaks.
//
// All functions are thread-safe: they share no state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::data {

struct Image {
  int64_t channels = 3;  // always 3 (RGB) for decoded and rendered images
  int64_t height = 0;
  int64_t width = 0;
  std::vector<float> pixels;  // [channels, height, width], row-major; values in [0, 1]

  float& at(int64_t c, int64_t y, int64_t x) { return pixels[(c * height + y) * width + x]; }
  float at(int64_t c, int64_t y, int64_t x) const { return pixels[(c * height + y) * width + x]; }
};

// An image as 8-bit samples, planar as Image: what a JPEG decodes to, resized and cropped in that
// form (data/pil_resize.h: ResizePil8) before it becomes floats, as Pillow works on bytes.
struct Image8 {
  int64_t channels = 3;
  int64_t height = 0;
  int64_t width = 0;
  std::vector<uint8_t> pixels;  // [channels, height, width], row-major
};

// Each sample v / 255.
Image ToFloatImage(const Image8& image);

// An image's size in pixels.
struct Resolution {
  int64_t height = 0;
  int64_t width = 0;
  bool operator==(const Resolution&) const = default;
};

// The most pixels any decoder allocates for: a corrupt or hostile header can claim 2^31 x 2^31,
// and 2^28 pixels (16384^2) already need 3 GiB as floats.
inline constexpr uint64_t kMaxImagePixels = uint64_t{1} << 28;

// The pixel cap for a model that sees image_size x image_size: 256 times what it uses, at least
// 2^26 (67 megapixels: any camera's photo) and at most kMaxImagePixels. A larger image is refused
// before its pixels are allocated (InvalidArgument, naming the cap), so one file in a dataset
// cannot take an actor's memory.
uint64_t MaxPixelsFor(int64_t image_size);

// Decodes a PNG or JPEG file, recognised by its first bytes (not its extension).
//   PNG: grey, grey+alpha, RGB, RGBA and palette images at any bit depth, interlaced or not;
//        16-bit samples are rounded to 8 bits; alpha is composited over black (value * alpha).
//   JPEG: greyscale and YCbCr/RGB baseline or progressive; a truncated file is an error (libjpeg
//        would otherwise pad it with grey); other libjpeg warnings are tolerated.
// Grey images are replicated into the three channels. An image of more than max_pixels (its
// declared width x height) is InvalidArgument before any pixel is decoded; a JPEG is also refused
// after 500 scans (a progressive file can hold thousands of tiny ones, each a full pass) and when
// its coefficient buffers would exceed 8 bytes per allowed pixel (at least 16 MiB).
absl::StatusOr<Image> DecodeImageFile(const std::string& path,
                                      uint64_t max_pixels = kMaxImagePixels);

// As DecodeImageFile, from bytes already in memory; `name` is used in error messages.
absl::StatusOr<Image> DecodeImage(std::string_view bytes, const std::string& name,
                                  uint64_t max_pixels = kMaxImagePixels);

// Whether `bytes` start as a JPEG does (DecodeImage would read them as one).
bool IsJpeg(std::string_view bytes);
// DecodeImage of a JPEG as 8-bit samples: ToFloatImage of it is DecodeImage's image. Its errors.
absl::StatusOr<Image8> DecodeJpeg8(std::string_view bytes, const std::string& name,
                                   uint64_t max_pixels = kMaxImagePixels);

// The size a PNG or JPEG file declares (its IHDR chunk, its frame header), without decoding its
// pixels: what LLaVA-NeXT's tiling needs to plan a batch. DecodeImageFile's errors for a file that
// is not a PNG or JPEG; DataLoss for a corrupt header.
absl::StatusOr<Resolution> ReadImageSize(const std::string& path);
// As ReadImageSize, of a file's bytes already in memory; `name` is used in error messages.
absl::StatusOr<Resolution> ImageSizeOf(std::string_view bytes, const std::string& name);

// Bilinear resampling with align_corners=false and no antialiasing: the same sampling as
// torch.nn.functional.interpolate(mode="bilinear", align_corners=False). Output pixel (y, x) reads
// source coordinate ((y + 0.5) * in_h / height - 0.5, ...), clamped at 0, between its two
// neighbours. Strong downscaling therefore aliases, as torch's does. Returns a copy when the size
// is unchanged. REQUIRES: height > 0, width > 0, image non-empty.
Image ResizeBilinear(const Image& image, int64_t height, int64_t width);

// Encodes an Image as an 8-bit RGB PNG: each value is clamped to [0, 1] and rounded to v * 255.
// InvalidArgument when the image is not 3 x height x width with matching pixels.
absl::StatusOr<std::string> EncodePng(const Image& image);

// EncodePng, then writes the file atomically (common/atomic_file.h).
absl::Status WritePng(const Image& image, const std::string& path);

}  // namespace tandem::data
