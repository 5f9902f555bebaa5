// Tests for data/png_codec.cc through data/image.h: every PNG colour type we promise to read
// (written here with libpng directly), the 8-bit RGB writer, and corrupt or oversized files.
#include <png.h>

#include <csetjmp>
#include <cstdint>
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

using ::testing::FloatEq;
using ::testing::HasSubstr;
using ::testing::Pointwise;

// The raw content of a PNG to write: rows of packed samples in the file's own layout.
struct RawPng {
  uint32_t width = 0;
  uint32_t height = 0;
  int colour_type = PNG_COLOR_TYPE_RGB;
  int bit_depth = 8;
  int interlace = PNG_INTERLACE_NONE;
  std::vector<std::vector<uint8_t>> rows;  // omitted: header only (IHDR, no image data)
  std::vector<png_color> palette;
  std::vector<uint8_t> palette_alpha;  // tRNS for palette images
};

void AppendToString(png_structp png, png_bytep data, png_size_t length) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<char*>(data), length);
}

// Encodes `raw` with libpng; "" if libpng rejects it.
std::string EncodeRaw(const RawPng& raw) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  std::vector<png_bytep> rows;
  for (const auto& row : raw.rows) rows.push_back(const_cast<png_bytep>(row.data()));
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return "";
  }
  png_set_write_fn(png, &out, AppendToString, nullptr);
  png_set_IHDR(png, info, raw.width, raw.height, raw.bit_depth, raw.colour_type, raw.interlace,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!raw.palette.empty()) png_set_PLTE(png, info, raw.palette.data(), raw.palette.size());
  if (!raw.palette_alpha.empty()) {
    png_set_tRNS(png, info, raw.palette_alpha.data(), raw.palette_alpha.size(), nullptr);
  }
  png_write_info(png, info);
  if (!rows.empty()) {
    png_write_image(png, rows.data());
    png_write_end(png, nullptr);
  }
  png_destroy_write_struct(&png, &info);
  return out;
}

// Decodes `bytes` after writing them to a file, as the datasets do.
absl::StatusOr<Image> DecodeViaFile(const std::string& bytes, const testing::TempDir& dir) {
  const std::string path = dir / "image.png";
  EXPECT_TRUE(testing::WriteTestFile(path, bytes));
  return DecodeImageFile(path);
}

// The channel planes of `image` as R, G, B vectors.
std::vector<float> Plane(const Image& image, int c) {
  const auto begin = image.pixels.begin() + c * image.height * image.width;
  return {begin, begin + image.height * image.width};
}

TEST(PngCodec, WriteThenDecodeIsExactOnTheByteLattice) {
  Image image;
  image.height = 5;
  image.width = 7;
  for (int64_t i = 0; i < 3 * 5 * 7; ++i)
    image.pixels.push_back(static_cast<float>(i * 7 % 256) / 255.0f);
  testing::TempDir dir;
  const std::string path = dir / "out.png";
  ASSERT_TRUE(WritePng(image, path).ok());
  absl::StatusOr<Image> decoded = DecodeImageFile(path);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->channels, 3);
  EXPECT_EQ(decoded->height, 5);
  EXPECT_EQ(decoded->width, 7);
  EXPECT_EQ(decoded->pixels, image.pixels);
}

TEST(PngCodec, WriteThenDecodeRoundsToTheNearestByte) {
  Image image;
  image.height = 4;
  image.width = 4;
  for (int i = 0; i < 48; ++i) image.pixels.push_back(static_cast<float>(i) / 47.0f);
  image.pixels[5] = -0.5f;  // clamped
  image.pixels[6] = 1.5f;
  absl::StatusOr<std::string> encoded = EncodePng(image);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  absl::StatusOr<Image> decoded = DecodeImage(*encoded, "memory");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->pixels[5], 0.0f);
  EXPECT_EQ(decoded->pixels[6], 1.0f);
  for (int i = 0; i < 48; ++i) {
    if (i == 5 || i == 6) continue;
    EXPECT_NEAR(decoded->pixels[i], image.pixels[i], 0.5f / 255.0f + 1e-6f) << i;
  }
}

TEST(PngCodec, EncodeRejectsAnImageThatIsNotRgb) {
  Image image;
  image.channels = 1;
  image.height = 2;
  image.width = 2;
  image.pixels.assign(4, 0.5f);
  EXPECT_EQ(EncodePng(image).status().code(), absl::StatusCode::kInvalidArgument);
  image.channels = 3;  // now the pixel count is wrong
  EXPECT_EQ(EncodePng(image).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PngCodec, GreyIsReplicatedIntoThreeChannels) {
  RawPng raw;
  raw.width = 2;
  raw.height = 2;
  raw.colour_type = PNG_COLOR_TYPE_GRAY;
  raw.rows = {{0, 64}, {128, 255}};
  testing::TempDir dir;
  absl::StatusOr<Image> image = DecodeViaFile(EncodeRaw(raw), dir);
  ASSERT_TRUE(image.ok()) << image.status();
  const std::vector<float> expected = {0.0f, 64 / 255.0f, 128 / 255.0f, 1.0f};
  for (int c = 0; c < 3; ++c) EXPECT_THAT(Plane(*image, c), Pointwise(FloatEq(), expected)) << c;
}

TEST(PngCodec, OneBitGreyIsExpanded) {
  RawPng raw;
  raw.width = 3;
  raw.height = 1;
  raw.colour_type = PNG_COLOR_TYPE_GRAY;
  raw.bit_depth = 1;
  raw.rows = {{0b10100000}};  // 1, 0, 1
  testing::TempDir dir;
  absl::StatusOr<Image> image = DecodeViaFile(EncodeRaw(raw), dir);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_THAT(Plane(*image, 1), Pointwise(FloatEq(), std::vector<float>{1.0f, 0.0f, 1.0f}));
}

TEST(PngCodec, GreyAlphaIsCompositedOverBlack) {
  RawPng raw;
  raw.width = 2;
  raw.height = 1;
  raw.colour_type = PNG_COLOR_TYPE_GRAY_ALPHA;
  raw.rows = {{200, 128, 255, 0}};
  testing::TempDir dir;
  absl::StatusOr<Image> image = DecodeViaFile(EncodeRaw(raw), dir);
  ASSERT_TRUE(image.ok()) << image.status();
  const std::vector<float> expected = {200 / 255.0f * (128 / 255.0f), 0.0f};
  for (int c = 0; c < 3; ++c) EXPECT_THAT(Plane(*image, c), Pointwise(FloatEq(), expected)) << c;
}

TEST(PngCodec, RgbaIsCompositedOverBlack) {
  RawPng raw;
  raw.width = 2;
  raw.height = 1;
  raw.colour_type = PNG_COLOR_TYPE_RGB_ALPHA;
  raw.rows = {{255, 0, 100, 51, 10, 20, 30, 255}};
  testing::TempDir dir;
  absl::StatusOr<Image> image = DecodeViaFile(EncodeRaw(raw), dir);
  ASSERT_TRUE(image.ok()) << image.status();
  const float a = 51 / 255.0f;
  EXPECT_THAT(Plane(*image, 0), Pointwise(FloatEq(), std::vector<float>{a, 10 / 255.0f}));
  EXPECT_THAT(Plane(*image, 1), Pointwise(FloatEq(), std::vector<float>{0.0f, 20 / 255.0f}));
  EXPECT_THAT(Plane(*image, 2),
              Pointwise(FloatEq(), std::vector<float>{100 / 255.0f * a, 30 / 255.0f}));
}

TEST(PngCodec, PaletteWithTransparencyIsExpanded) {
  RawPng raw;
  raw.width = 3;
  raw.height = 1;
  raw.colour_type = PNG_COLOR_TYPE_PALETTE;
  raw.palette = {{10, 20, 30}, {255, 255, 255}, {0, 255, 0}};
  raw.palette_alpha = {255, 0};  // entry 1 fully transparent, entry 2 (not listed) opaque
  raw.rows = {{0, 1, 2}};
  testing::TempDir dir;
  absl::StatusOr<Image> image = DecodeViaFile(EncodeRaw(raw), dir);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_THAT(Plane(*image, 0), Pointwise(FloatEq(), std::vector<float>{10 / 255.0f, 0.0f, 0.0f}));
  EXPECT_THAT(Plane(*image, 1), Pointwise(FloatEq(), std::vector<float>{20 / 255.0f, 0.0f, 1.0f}));
  EXPECT_THAT(Plane(*image, 2), Pointwise(FloatEq(), std::vector<float>{30 / 255.0f, 0.0f, 0.0f}));
}

TEST(PngCodec, SixteenBitSamplesAreScaledToEightBits) {
  RawPng raw;
  raw.width = 1;
  raw.height = 1;
  raw.bit_depth = 16;
  // Big-endian 16-bit samples 65535, 32896 (= 128 * 257) and 0.
  raw.rows = {{0xff, 0xff, 0x80, 0x80, 0x00, 0x00}};
  testing::TempDir dir;
  absl::StatusOr<Image> image = DecodeViaFile(EncodeRaw(raw), dir);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_THAT(image->pixels, Pointwise(FloatEq(), std::vector<float>{1.0f, 128 / 255.0f, 0.0f}));
}

TEST(PngCodec, InterlacedImagesDecodeLikeProgressiveOnes) {
  RawPng raw;
  raw.width = 9;
  raw.height = 9;
  raw.interlace = PNG_INTERLACE_ADAM7;
  for (uint32_t y = 0; y < 9; ++y) {
    raw.rows.emplace_back();
    for (uint32_t x = 0; x < 9; ++x) {
      for (uint32_t c = 0; c < 3; ++c)
        raw.rows.back().push_back(static_cast<uint8_t>(y * 27 + x * 3 + c));
    }
  }
  testing::TempDir dir;
  absl::StatusOr<Image> image = DecodeViaFile(EncodeRaw(raw), dir);
  ASSERT_TRUE(image.ok()) << image.status();
  for (int64_t y = 0; y < 9; ++y) {
    for (int64_t x = 0; x < 9; ++x) {
      for (int64_t c = 0; c < 3; ++c)
        EXPECT_EQ(image->at(c, y, x), raw.rows[y][3 * x + c] / 255.0f);
    }
  }
}

// A valid 16 x 16 RGB PNG.
std::string ValidPng() {
  Image image;
  image.height = 16;
  image.width = 16;
  for (int i = 0; i < 3 * 256; ++i) image.pixels.push_back(static_cast<float>(i % 97) / 96.0f);
  return *EncodePng(image);
}

TEST(PngCodec, TruncatedFileIsDataLossNamingTheFile) {
  const std::string png = ValidPng();
  testing::TempDir dir;
  const std::string path = dir / "truncated.png";
  ASSERT_TRUE(testing::WriteTestFile(path, png.substr(0, png.size() / 2)));
  absl::StatusOr<Image> image = DecodeImageFile(path);
  EXPECT_EQ(image.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(image.status().message(), HasSubstr(path));
  EXPECT_THAT(image.status().message(), HasSubstr("corrupt PNG"));
}

TEST(PngCodec, DamagedImageDataIsDataLoss) {
  std::string png = ValidPng();
  const size_t idat = png.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  png[idat + 10] = static_cast<char>(png[idat + 10] ^ 0x5a);  // the chunk's CRC no longer matches
  absl::StatusOr<Image> image = DecodeImage(png, "damaged.png");
  EXPECT_EQ(image.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(image.status().message(), HasSubstr("damaged.png: corrupt PNG"));
}

TEST(PngCodec, HugeDimensionsAreRefusedBeforeAllocating) {
  RawPng raw;
  raw.width = 65536;
  raw.height = 65536;  // 2^32 pixels; only the header is written
  std::string header = EncodeRaw(raw);
  ASSERT_FALSE(header.empty());
  header.append(std::string("\0\0\0\x10IDAT", 8));  // where libpng stops reading the header
  absl::StatusOr<Image> image = DecodeImage(header, "huge.png");
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(image.status().message(),
              HasSubstr("huge.png: PNG of 65536 x 65536 pixels is too large: at most 268435456"));
}

TEST(PngCodec, TheCallersPixelCapHolds) {
  Image image;
  image.height = 30;
  image.width = 40;
  image.pixels.assign(3 * 30 * 40, 0.5f);
  absl::StatusOr<std::string> png = EncodePng(image);
  ASSERT_TRUE(png.ok()) << png.status();
  EXPECT_TRUE(DecodeImage(*png, "exact.png", 1200).ok());
  absl::StatusOr<Image> refused = DecodeImage(*png, "capped.png", 1199);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("capped.png: PNG of 40 x 30 pixels is too large: at most 1199"));
}

TEST(MaxPixelsFor, IsTheModelsResolutionTimes256WithinBounds) {
  EXPECT_EQ(MaxPixelsFor(32), uint64_t{1} << 26);  // the floor: a 67-megapixel photo
  EXPECT_EQ(MaxPixelsFor(336),
            uint64_t{1} << 26);  // 28.9 megapixels would refuse a 48-megapixel photo
  EXPECT_EQ(MaxPixelsFor(600), 600u * 600u * 256u);  // 92 megapixels
  EXPECT_EQ(MaxPixelsFor(4096), kMaxImagePixels);
  EXPECT_EQ(MaxPixelsFor(int64_t{1} << 40), kMaxImagePixels);
}

}  // namespace
}  // namespace tandem::data
