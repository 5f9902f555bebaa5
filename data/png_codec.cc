// PNG decoding and encoding with libpng.
//
// libpng reports errors by calling our error function, which must not return: it records the
// message and longjmps back to the setjmp in ReadPngPixels / WritePngRows. Those functions own no
// C++ objects (their vectors belong to the caller), so the jump skips no destructor, and the caller
// always runs png_destroy_*_struct afterwards.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/image.h"
#include "data/image_codecs.h"

namespace tandem::data {
namespace {

// State shared with libpng's callbacks. Plain data only: it is live across the longjmp.
struct PngContext {
  jmp_buf jump;
  char message[256] = "";
  const unsigned char* input = nullptr;  // reading: the file's bytes
  size_t input_size = 0;
  size_t input_offset = 0;
  std::string* output = nullptr;  // writing: the encoded file
  bool out_of_memory = false;
  uint64_t max_pixels = 0;  // reading: the cap
  bool too_large = false;   // reading: above max_pixels
};

[[noreturn]] void OnPngError(png_structp png, png_const_charp message) {
  auto* context = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(context->message, sizeof context->message, "%s", message);
  std::longjmp(context->jump, 1);
}

// Warnings (an odd iCCP profile, a bad sRGB chunk) do not affect the pixels: decode regardless.
void OnPngWarning(png_structp, png_const_charp) {}

void ReadFromMemory(png_structp png, png_bytep out, png_size_t length) {
  auto* context = static_cast<PngContext*>(png_get_io_ptr(png));
  if (context->input_size - context->input_offset < length) png_error(png, "file is truncated");
  std::memcpy(out, context->input + context->input_offset, length);
  context->input_offset += length;
}

void WriteToMemory(png_structp png, png_bytep data, png_size_t length) {
  auto* context = static_cast<PngContext*>(png_get_io_ptr(png));
  try {
    context->output->append(reinterpret_cast<const char*>(data), length);
  } catch (const std::bad_alloc&) {
    context->out_of_memory = true;  // png_error longjmps: never from inside a catch block
  }
  if (context->out_of_memory) png_error(png, "out of memory");
}

void FlushMemory(png_structp) {}

// The decoded size and layout (after the transforms below: 8-bit RGB or RGBA).
struct PngLayout {
  uint32_t width = 0;
  uint32_t height = 0;
  int channels = 0;
};

// Reads the whole image as interleaved 8-bit RGB(A) into *pixels. Returns false after a libpng
// error (the message is in the context). `rows` is only scratch space, owned by the caller for the
// reason at the top of this file.
bool ReadPngPixels(png_structp png, png_infop info, PngContext* context, PngLayout* layout,
                   std::vector<unsigned char>* pixels, std::vector<png_bytep>* rows) {
  if (setjmp(context->jump)) return false;
  png_read_info(png, info);
  if (uint64_t{png_get_image_width(png, info)} * png_get_image_height(png, info) >
      context->max_pixels) {
    layout->width = png_get_image_width(png, info);
    layout->height = png_get_image_height(png, info);
    context->too_large = true;
    return false;
  }
  png_set_expand(png);    // palette -> RGB, grey below 8 bits -> 8 bits, tRNS -> alpha
  png_set_scale_16(png);  // 16 -> 8 bits, rounded
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  layout->width = png_get_image_width(png, info);
  layout->height = png_get_image_height(png, info);
  layout->channels = png_get_channels(png, info);
  if (png_get_bit_depth(png, info) != 8 || (layout->channels != 3 && layout->channels != 4)) {
    png_error(png, "unexpected layout after conversion to 8-bit RGB");
  }
  const size_t stride = size_t{layout->width} * layout->channels;
  pixels->resize(stride * layout->height);
  rows->resize(layout->height);
  for (uint32_t y = 0; y < layout->height; ++y) (*rows)[y] = pixels->data() + y * stride;
  png_read_image(png, rows->data());
  // No png_read_end: the pixels are complete, and chunks after the image data cannot change them.
  return true;
}

bool WritePngRows(png_structp png, png_infop info, PngContext* context, const Image* image,
                  std::vector<png_bytep>* rows) {
  if (setjmp(context->jump)) return false;
  png_set_IHDR(png, info, static_cast<png_uint_32>(image->width),
               static_cast<png_uint_32>(image->height), 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows->data());
  png_write_end(png, nullptr);
  return true;
}

unsigned char ToByte(float value) {
  if (!(value > 0.0f)) return 0;  // also NaN
  if (value >= 1.0f) return 255;
  return static_cast<unsigned char>(value * 255.0f + 0.5f);
}

}  // namespace

namespace internal {

absl::StatusOr<Image> DecodePng(std::string_view bytes, const std::string& name,
                                uint64_t max_pixels) {
  PngContext context;
  context.max_pixels = max_pixels;
  context.input = reinterpret_cast<const unsigned char*>(bytes.data());
  context.input_size = bytes.size();
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &context, OnPngError, OnPngWarning);
  if (png == nullptr)
    return absl::ResourceExhaustedError(absl::StrCat(name, ": libpng setup failed"));
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return absl::ResourceExhaustedError(absl::StrCat(name, ": libpng setup failed"));
  }
  png_set_read_fn(png, &context, ReadFromMemory);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  // As libpng's own fuzzer: mutated files would nearly all stop at a chunk's CRC or the IDAT
  // stream's Adler-32, and never reach the decoding behind them.
  png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
#ifdef PNG_IGNORE_ADLER32
  png_set_option(png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
#endif
#endif
  PngLayout layout;
  std::vector<unsigned char> interleaved;
  std::vector<png_bytep> rows;
  const bool ok = ReadPngPixels(png, info, &context, &layout, &interleaved, &rows);
  png_destroy_read_struct(&png, &info, nullptr);
  if (context.too_large) return TooLargeError(name, "PNG", layout.width, layout.height, max_pixels);
  if (!ok) return absl::DataLossError(absl::StrCat(name, ": corrupt PNG: ", context.message));

  Image image;
  image.height = layout.height;
  image.width = layout.width;
  const int64_t plane = image.height * image.width;
  image.pixels.resize(3 * plane);
  for (int64_t i = 0; i < plane; ++i) {
    const unsigned char* pixel = interleaved.data() + i * layout.channels;
    const float alpha = layout.channels == 4 ? pixel[3] / 255.0f : 1.0f;
    for (int c = 0; c < 3; ++c) image.pixels[c * plane + i] = pixel[c] / 255.0f * alpha;
  }
  return image;
}

}  // namespace internal

absl::StatusOr<std::string> EncodePng(const Image& image) {
  if (image.channels != 3 || image.height <= 0 || image.width <= 0 ||
      image.pixels.size() != static_cast<size_t>(3 * image.height * image.width)) {
    return absl::InvalidArgumentError(
        absl::StrCat("EncodePng: expected a 3 x H x W image, got ", image.channels, " x ",
                     image.height, " x ", image.width, " with ", image.pixels.size(), " values"));
  }
  const int64_t plane = image.height * image.width;
  std::vector<unsigned char> interleaved(3 * plane);
  for (int64_t i = 0; i < plane; ++i) {
    for (int c = 0; c < 3; ++c) interleaved[3 * i + c] = ToByte(image.pixels[c * plane + i]);
  }
  std::vector<png_bytep> rows(image.height);
  for (int64_t y = 0; y < image.height; ++y) rows[y] = interleaved.data() + y * 3 * image.width;

  std::string encoded;
  PngContext context;
  context.output = &encoded;
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, &context, OnPngError, OnPngWarning);
  if (png == nullptr) return absl::ResourceExhaustedError("EncodePng: libpng setup failed");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    return absl::ResourceExhaustedError("EncodePng: libpng setup failed");
  }
  png_set_write_fn(png, &context, WriteToMemory, FlushMemory);
  const bool ok = WritePngRows(png, info, &context, &image, &rows);
  png_destroy_write_struct(&png, &info);
  if (!ok) return absl::InternalError(absl::StrCat("EncodePng: ", context.message));
  return encoded;
}

}  // namespace tandem::data
