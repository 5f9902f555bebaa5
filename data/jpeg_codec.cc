// JPEG decoding with libjpeg(-turbo).
//
// libjpeg's error_exit must not return: ours formats the message and longjmps back to the setjmp in
// ReadJpegPixels, which owns no C++ objects (the caller's vector holds the pixels), and the caller
// always runs jpeg_destroy_decompress. A truncated file is only a warning to libjpeg (it pads the
// image with grey); we make that one warning fatal, since a half-grey image is not a training
// sample.
// jpeglib.h uses FILE and size_t without including their headers, so stdio.h goes first.
// clang-format off
#include <stdio.h>
#include <jerror.h>
#include <jpeglib.h>
// clang-format on

#include <csetjmp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/image.h"
#include "data/image_codecs.h"

namespace tandem::data::internal {
namespace {

// libjpeg finds this through cinfo->err, which points at its first member.
struct JpegErrorManager {
  jpeg_error_mgr base;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = "";
};

[[noreturn]] void OnJpegError(j_common_ptr cinfo) {
  auto* manager = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, manager->message);
  std::longjmp(manager->jump, 1);
}

// msg_level < 0 is a warning; others are trace messages. Nothing is printed.
void OnJpegMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) OnJpegError(cinfo);
}

enum class JpegOutcome { kOk, kError, kUnsupportedColourSpace, kTooLarge };

struct JpegLayout {
  JDIMENSION width = 0;
  JDIMENSION height = 0;
  int components = 0;  // 1 (grey) or 3 (RGB)
  J_COLOR_SPACE colour_space = JCS_UNKNOWN;
};

JpegOutcome ReadJpegPixels(jpeg_decompress_struct* cinfo, JpegErrorManager* errors,
                           std::string_view bytes, JpegLayout* layout,
                           std::vector<unsigned char>* pixels) {
  if (setjmp(errors->jump)) return JpegOutcome::kError;
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(cinfo, TRUE);
  layout->colour_space = cinfo->jpeg_color_space;
  switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
      cinfo->out_color_space = JCS_GRAYSCALE;
      break;
    case JCS_YCbCr:
    case JCS_RGB:
      cinfo->out_color_space = JCS_RGB;
      break;
    default:
      return JpegOutcome::kUnsupportedColourSpace;
  }
  jpeg_start_decompress(cinfo);
  layout->width = cinfo->output_width;
  layout->height = cinfo->output_height;
  layout->components = cinfo->output_components;
  if (uint64_t{layout->width} * layout->height > kMaxImagePixels) return JpegOutcome::kTooLarge;
  const size_t stride = size_t{layout->width} * layout->components;
  pixels->resize(stride * layout->height);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = pixels->data() + size_t{cinfo->output_scanline} * stride;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return JpegOutcome::kOk;
}

}  // namespace

absl::StatusOr<Image> DecodeJpeg(std::string_view bytes, const std::string& name) {
  // Zeroed, so that jpeg_destroy_decompress is safe even when jpeg_create_decompress failed early
  // (a library version mismatch is reported before it clears the struct).
  jpeg_decompress_struct cinfo{};
  JpegErrorManager errors;
  cinfo.err = jpeg_std_error(&errors.base);
  errors.base.error_exit = OnJpegError;
  errors.base.emit_message = OnJpegMessage;
  JpegLayout layout;
  std::vector<unsigned char> interleaved;
  const JpegOutcome outcome = ReadJpegPixels(&cinfo, &errors, bytes, &layout, &interleaved);
  jpeg_destroy_decompress(&cinfo);
  switch (outcome) {
    case JpegOutcome::kOk:
      break;
    case JpegOutcome::kError:
      return absl::DataLossError(absl::StrCat(name, ": corrupt JPEG: ", errors.message));
    case JpegOutcome::kUnsupportedColourSpace:
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": unsupported JPEG colour space ", static_cast<int>(layout.colour_space),
          " (only greyscale and YCbCr/RGB are decoded; CMYK is not)"));
    case JpegOutcome::kTooLarge:
      return absl::InvalidArgumentError(absl::StrCat(name, ": JPEG of ", layout.width, " x ",
                                                     layout.height, " pixels is too large"));
  }

  Image image;
  image.height = layout.height;
  image.width = layout.width;
  const int64_t plane = image.height * image.width;
  image.pixels.resize(3 * plane);
  for (int64_t i = 0; i < plane; ++i) {
    const unsigned char* pixel = interleaved.data() + i * layout.components;
    for (int c = 0; c < 3; ++c) {
      image.pixels[c * plane + i] = pixel[layout.components == 3 ? c : 0] / 255.0f;
    }
  }
  return image;
}

}  // namespace tandem::data::internal
