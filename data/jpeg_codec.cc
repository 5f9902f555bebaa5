// JPEG decoding with libjpeg(-turbo).
//
// libjpeg's error_exit must not return: ours formats the message and longjmps back to the setjmp in
// ReadJpegPixels, which owns no C++ objects (the caller's vector holds the pixels), and the caller
// always runs jpeg_destroy_decompress. A truncated file is only a warning to libjpeg (it pads the
// image with grey); we make that one warning fatal, since a half-grey image is not a training
// sample.
//
// A small file can still cost much: its header may declare any size (checked right after
// jpeg_read_header, before any buffer is made), a progressive file's coefficient buffers are
// allocated whole (max_memory_to_use bounds them, and with no backing store libjpeg fails instead
// of going past it), and every scan of a progressive file is a pass over the image, so thousands
// of tiny scans make a CPU bomb (the progress monitor stops at kMaxScans, as djpeg -maxscans does).
// jpeglib.h uses FILE and size_t without including their headers, so stdio.h goes first.
// clang-format off
#include <stdio.h>
#include <jerror.h>
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <climits>
#include <csetjmp>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/image.h"
#include "data/image_codecs.h"

namespace tandem::data::internal {
namespace {

constexpr int kMaxScans = 500;

// libjpeg finds this through cinfo->err, which points at its first member.
struct JpegErrorManager {
  jpeg_error_mgr base;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = "";
};

// libjpeg calls this between passes; cinfo->progress points at its first member.
struct JpegScanLimit {
  jpeg_progress_mgr base;
  JpegErrorManager* errors = nullptr;
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

void OnJpegProgress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  const int scan = reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number;
  if (scan <= kMaxScans) return;
  auto* limit = reinterpret_cast<JpegScanLimit*>(cinfo->progress);
  std::snprintf(limit->errors->message, sizeof limit->errors->message,
                "more than %d scans (a normal progressive file has about 10)", kMaxScans);
  std::longjmp(limit->errors->jump, 1);
}

enum class JpegOutcome { kOk, kError, kUnsupportedColourSpace, kTooLarge };

struct JpegLayout {
  JDIMENSION width = 0;
  JDIMENSION height = 0;
  int components = 0;  // 1 (grey) or 3 (RGB)
  J_COLOR_SPACE colour_space = JCS_UNKNOWN;
};

JpegOutcome ReadJpegPixels(jpeg_decompress_struct* cinfo, JpegErrorManager* errors,
                           JpegScanLimit* scan_limit, std::string_view bytes, uint64_t max_pixels,
                           JpegLayout* layout, std::vector<unsigned char>* pixels) {
  if (setjmp(errors->jump)) return JpegOutcome::kError;
  jpeg_create_decompress(cinfo);
  // 8 bytes per allowed pixel covers 4:4:4 colour's 6 bytes of coefficients; the 16 MiB floor keeps
  // a tiny cap from failing on libjpeg's own tables.
  const uint64_t memory = std::max<uint64_t>(max_pixels * 8, uint64_t{16} << 20);
  cinfo->mem->max_memory_to_use = static_cast<long>(std::min<uint64_t>(memory, LONG_MAX));
  scan_limit->base.progress_monitor = OnJpegProgress;
  scan_limit->errors = errors;
  cinfo->progress = &scan_limit->base;
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(cinfo, TRUE);
  layout->width = cinfo->image_width;
  layout->height = cinfo->image_height;
  if (pixels == nullptr) return JpegOutcome::kOk;  // the header only
  if (uint64_t{layout->width} * layout->height > max_pixels) return JpegOutcome::kTooLarge;
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
  const size_t stride = size_t{layout->width} * layout->components;
  pixels->resize(stride * layout->height);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = pixels->data() + size_t{cinfo->output_scanline} * stride;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return JpegOutcome::kOk;
}

// One decompression: libjpeg's state with the handlers above, destroyed with it.
struct JpegReader {
  // Zeroed, so that jpeg_destroy_decompress is safe even when jpeg_create_decompress failed early
  // (a library version mismatch is reported before it clears the struct).
  jpeg_decompress_struct cinfo{};
  JpegErrorManager errors;
  JpegScanLimit scan_limit;
  JpegLayout layout;

  JpegReader() {
    cinfo.err = jpeg_std_error(&errors.base);
    errors.base.error_exit = OnJpegError;
    errors.base.emit_message = OnJpegMessage;
  }
  ~JpegReader() { jpeg_destroy_decompress(&cinfo); }
  JpegReader(const JpegReader&) = delete;
  JpegReader& operator=(const JpegReader&) = delete;

  // `pixels` null: the header only.
  JpegOutcome Read(std::string_view bytes, uint64_t max_pixels,
                   std::vector<unsigned char>* pixels) {
    return ReadJpegPixels(&cinfo, &errors, &scan_limit, bytes, max_pixels, &layout, pixels);
  }
};

}  // namespace

absl::StatusOr<Image8> DecodeJpeg8(std::string_view bytes, const std::string& name,
                                   uint64_t max_pixels) {
  JpegReader reader;
  std::vector<unsigned char> interleaved;
  const JpegOutcome outcome = reader.Read(bytes, max_pixels, &interleaved);
  const JpegErrorManager& errors = reader.errors;
  const JpegLayout& layout = reader.layout;
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
      return TooLargeError(name, "JPEG", layout.width, layout.height, max_pixels);
  }

  // libjpeg's interleaved samples into planes; grey into all three.
  Image8 image;
  image.height = layout.height;
  image.width = layout.width;
  const int64_t plane = image.height * image.width;
  image.pixels.resize(3 * plane);
  const unsigned char* __restrict from = interleaved.data();
  uint8_t* __restrict to = image.pixels.data();
  if (layout.components == 3) {
    uint8_t* __restrict red = to;
    uint8_t* __restrict green = to + plane;
    uint8_t* __restrict blue = to + 2 * plane;
    for (int64_t i = 0; i < plane; ++i) {
      red[i] = from[3 * i];
      green[i] = from[3 * i + 1];
      blue[i] = from[3 * i + 2];
    }
  } else {
    for (int c = 0; c < 3; ++c) std::copy(from, from + plane, to + c * plane);
  }
  return image;
}

absl::StatusOr<Image> DecodeJpeg(std::string_view bytes, const std::string& name,
                                 uint64_t max_pixels) {
  ASSIGN_OR_RETURN(const Image8 image, DecodeJpeg8(bytes, name, max_pixels));
  return ToFloatImage(image);
}

absl::StatusOr<Resolution> JpegSize(std::string_view bytes, const std::string& name) {
  JpegReader reader;
  if (reader.Read(bytes, kMaxImagePixels, /*pixels=*/nullptr) != JpegOutcome::kOk)
    return absl::DataLossError(absl::StrCat(name, ": corrupt JPEG: ", reader.errors.message));
  return Resolution{static_cast<int64_t>(reader.layout.height),
                    static_cast<int64_t>(reader.layout.width)};
}

}  // namespace tandem::data::internal
