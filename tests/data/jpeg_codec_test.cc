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
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/temp_dir.h"
#include "tests/data/test_files.h"

namespace tandem::data {
namespace {

using ::testing::HasSubstr;

// A smooth test pattern (JPEG's home ground): sample c of pixel (y, x), in 0..255.
uint8_t Pattern(int y, int x, int c) { return static_cast<uint8_t>(40 + 8 * y + 4 * x + 30 * c); }

// Encodes a width x height image of `components` channels (1 grey, 3 RGB, 4 CMYK) at quality 95.
std::string EncodeJpeg(int width, int height, int components) {
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

}  // namespace
}  // namespace tandem::data
