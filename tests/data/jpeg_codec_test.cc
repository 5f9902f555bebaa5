// Tests for data/jpeg_codec.cc through data/image.h: colour and greyscale JPEGs written here with
// libjpeg, and truncated, damaged and CMYK files.
// jpeglib.h uses FILE and size_t without including their headers, so stdio.h goes first.
// clang-format off
#include <stdio.h>
#include <jpeglib.h>
// clang-format on

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "data/image.h"
#include "data/image_preprocessor.h"
#include "data/pil_resize.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/temp_dir.h"
#include "tests/data/test_files.h"

namespace tandem::data {
namespace {

using ::testing::HasSubstr;

// A smooth test pattern (JPEG's home ground): sample c of pixel (y, x), in 0..255.
uint8_t Pattern(int y, int x, int c) { return static_cast<uint8_t>(40 + 8 * y + 4 * x + 30 * c); }

enum class Scans { kBaseline, kProgressive, kEveryBitOfEveryCoefficient };

// A progressive scan script for one grey component that sends every AC coefficient alone, its top
// bit first and then each lower bit in a scan of its own: 1 + 63 x 11 = 694 valid scans.
std::vector<jpeg_scan_info> OneScanPerBit() {
  std::vector<jpeg_scan_info> script;
  script.push_back({1, {0, 0, 0, 0}, 0, 0, 0, 0});
  for (int k = 1; k < 64; ++k) {
    script.push_back({1, {0, 0, 0, 0}, k, k, 0, 10});
    for (int bit = 10; bit >= 1; --bit) script.push_back({1, {0, 0, 0, 0}, k, k, bit, bit - 1});
  }
  return script;
}

// Encodes a width x height image of `components` channels (1 grey, 3 RGB, 4 CMYK) at quality 95.
std::string EncodeJpeg(int width, int height, int components, Scans scans = Scans::kBaseline) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr errors;
  cinfo.err = jpeg_std_error(&errors);  // default: exits on error, fine for a test fixture
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 95, TRUE);
  std::vector<jpeg_scan_info> script;
  if (scans == Scans::kProgressive) jpeg_simple_progression(&cinfo);
  if (scans == Scans::kEveryBitOfEveryCoefficient) {
    script = OneScanPerBit();
    cinfo.scan_info = script.data();
    cinfo.num_scans = static_cast<int>(script.size());
  }
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(width * components);
  while (cinfo.next_scanline < cinfo.image_height) {
    const int y = static_cast<int>(cinfo.next_scanline);
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < components; ++c) row[x * components + c] = Pattern(y, x, c);
    }
    JSAMPROW pointer = row.data();
    jpeg_write_scanlines(&cinfo, &pointer, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string jpeg(reinterpret_cast<char*>(buffer), size);
  std::free(buffer);
  return jpeg;
}

TEST(JpegCodec, ColourJpegDecodesCloseToTheOriginal) {
  testing::TempDir dir;
  const std::string path = dir / "colour.jpg";
  ASSERT_TRUE(testing::WriteTestFile(path, EncodeJpeg(16, 12, 3)));
  absl::StatusOr<Image> image = DecodeImageFile(path);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->channels, 3);
  EXPECT_EQ(image->height, 12);
  EXPECT_EQ(image->width, 16);
  double worst = 0;
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 12; ++y) {
      for (int x = 0; x < 16; ++x) {
        worst = std::max(worst, std::abs(image->at(c, y, x) - Pattern(y, x, c) / 255.0));
      }
    }
  }
  // Lossy (and 4:2:0 chroma) but close: a few levels out of 255 on this smooth pattern.
  EXPECT_LT(worst, 6 / 255.0);
}

TEST(JpegCodec, GreyJpegIsReplicatedIntoThreeChannels) {
  absl::StatusOr<Image> image = DecodeImage(EncodeJpeg(8, 8, 1), "grey.jpg");
  ASSERT_TRUE(image.ok()) << image.status();
  ASSERT_EQ(image->pixels.size(), 3u * 64);
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 8; ++x) {
      EXPECT_EQ(image->at(1, y, x), image->at(0, y, x));
      EXPECT_EQ(image->at(2, y, x), image->at(0, y, x));
      EXPECT_NEAR(image->at(0, y, x), Pattern(y, x, 0) / 255.0, 3 / 255.0);
    }
  }
}

TEST(JpegCodec, TruncatedFileIsDataLossNamingTheFile) {
  const std::string jpeg = EncodeJpeg(32, 32, 3);
  testing::TempDir dir;
  const std::string path = dir / "truncated.jpg";
  ASSERT_TRUE(testing::WriteTestFile(path, jpeg.substr(0, jpeg.size() * 2 / 3)));
  absl::StatusOr<Image> image = DecodeImageFile(path);
  EXPECT_EQ(image.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(image.status().message(), HasSubstr(path + ": corrupt JPEG"));
}

TEST(JpegCodec, GarbageAfterTheMagicIsDataLoss) {
  const std::string bytes = std::string("\xff\xd8\xff", 3) + "this is not a JPEG stream at all";
  absl::StatusOr<Image> image = DecodeImage(bytes, "garbage.jpg");
  EXPECT_EQ(image.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(image.status().message(), HasSubstr("garbage.jpg: corrupt JPEG"));
}

TEST(JpegCodec, CmykIsRefusedAsUnsupported) {
  absl::StatusOr<Image> image = DecodeImage(EncodeJpeg(8, 8, 4), "print.jpg");
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(image.status().message(), HasSubstr("print.jpg: unsupported JPEG colour space"));
}

// The header's size, patched into a valid 8 x 8 file: the SOF0 marker's height and width.
std::string WithDeclaredSize(std::string jpeg, int width, int height) {
  const size_t sof = jpeg.find("\xff\xc0");
  if (sof == std::string::npos) return "";
  jpeg[sof + 5] = static_cast<char>(height >> 8);
  jpeg[sof + 6] = static_cast<char>(height & 0xff);
  jpeg[sof + 7] = static_cast<char>(width >> 8);
  jpeg[sof + 8] = static_cast<char>(width & 0xff);
  return jpeg;
}

TEST(JpegCodec, DeclaredSizeAboveTheCapIsRefusedBeforeDecoding) {
  const std::string bomb = WithDeclaredSize(EncodeJpeg(8, 8, 3), 65000, 65000);
  ASSERT_FALSE(bomb.empty());
  absl::StatusOr<Image> image = DecodeImage(bomb, "bomb.jpg");
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      image.status().message(),
      HasSubstr("bomb.jpg: JPEG of 65000 x 65000 pixels is too large: at most 268435456 pixels"));
}

TEST(JpegCodec, TheCallersPixelCapHolds) {
  const std::string jpeg = EncodeJpeg(64, 48, 3, Scans::kProgressive);
  EXPECT_TRUE(DecodeImage(jpeg, "exact.jpg", 64 * 48).ok());
  absl::StatusOr<Image> image = DecodeImage(jpeg, "small_cap.jpg", 64 * 48 - 1);
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(image.status().message(),
              HasSubstr("small_cap.jpg: JPEG of 64 x 48 pixels is too large: at most 3071"));
}

TEST(JpegCodec, ProgressiveFileDecodesLikeTheBaselineOne) {
  absl::StatusOr<Image> baseline = DecodeImage(EncodeJpeg(32, 24, 3), "baseline.jpg");
  absl::StatusOr<Image> progressive =
      DecodeImage(EncodeJpeg(32, 24, 3, Scans::kProgressive), "progressive.jpg");
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  ASSERT_TRUE(progressive.ok()) << progressive.status();
  ASSERT_EQ(progressive->pixels.size(), baseline->pixels.size());
  for (size_t i = 0; i < baseline->pixels.size(); ++i) {
    ASSERT_NEAR(progressive->pixels[i], baseline->pixels[i], 2 / 255.0) << i;
  }
}

TEST(JpegCodec, ThousandsOfScansAreRefused) {
  const std::string jpeg = EncodeJpeg(8, 8, 1, Scans::kEveryBitOfEveryCoefficient);
  absl::StatusOr<Image> image = DecodeImage(jpeg, "scans.jpg");
  EXPECT_EQ(image.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(image.status().message(), HasSubstr("scans.jpg: corrupt JPEG: more than 500 scans"));
}

// The loader's 8-bit path (a JPEG decoded to bytes, resized and cropped as bytes) gives the float
// path's pixels exactly: colour and grey, resizing either pass first, through a preprocessor.
TEST(JpegCodec, TheEightBitPathGivesTheFloatPathsPixels) {
  for (int components : {3, 1}) {
    const std::string jpeg = EncodeJpeg(64, 48, components);
    absl::StatusOr<Image> floats = DecodeImage(jpeg, "a.jpg");
    absl::StatusOr<Image8> bytes = DecodeJpeg8(jpeg, "a.jpg");
    ASSERT_TRUE(floats.ok() && bytes.ok());
    EXPECT_EQ(ToFloatImage(*bytes).pixels, floats->pixels) << components << " components";
    EXPECT_EQ(ToImage8(*floats).pixels, bytes->pixels);
    // 48 -> 20 rows and 64 -> 30 columns (horizontal first); 48 -> 4 and 64 -> 60 (vertical
    // first: the height shrinks by more than twice what the width does).
    for (const auto& [height, width] : {std::pair{20, 30}, std::pair{4, 60}}) {
      for (PilFilter filter : {PilFilter::kBicubic, PilFilter::kBilinear}) {
        EXPECT_EQ(ToFloatImage(ResizePil8(*bytes, height, width, filter)).pixels,
                  ResizePil(*floats, height, width, filter).pixels)
            << height << " x " << width;
      }
    }
    ImagePreprocessor clip;
    clip.shortest_edge = 24;
    clip.do_center_crop = true;
    clip.crop_height = clip.crop_width = 24;
    absl::StatusOr<Image> eight = Preprocess8(clip, *bytes);
    absl::StatusOr<Image> reference = Preprocess(clip, *floats);
    ASSERT_TRUE(eight.ok() && reference.ok());
    EXPECT_EQ(eight->height, 24);
    EXPECT_EQ(eight->pixels, reference->pixels);
  }
  EXPECT_EQ(DecodeJpeg8("\x89PNG", "b.png").status().message(), "b.png: not a JPEG file");
}

}  // namespace
}  // namespace tandem::data
