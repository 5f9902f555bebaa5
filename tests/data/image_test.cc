// Tests for data/image.cc: format detection by content, file errors, and bilinear resampling
// against values worked out by hand (torch's interpolate(bilinear, align_corners=False) agrees).
#include "data/image.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/temp_dir.h"
#include "tests/data/test_files.h"

namespace tandem::data {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// A 3-channel image whose channel c holds f(y, x) + 10 c.
template <typename F>
Image MakeImage(int64_t height, int64_t width, F f) {
  Image image;
  image.height = height;
  image.width = width;
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t y = 0; y < height; ++y) {
      for (int64_t x = 0; x < width; ++x)
        image.pixels.push_back(static_cast<float>(f(y, x) + 10 * c));
    }
  }
  return image;
}

TEST(DecodeImageFile, MissingFileIsNotFoundNamingIt) {
  testing::TempDir dir;
  const std::string path = dir / "nope.png";
  absl::StatusOr<Image> image = DecodeImageFile(path);
  EXPECT_EQ(image.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(image.status().message(), HasSubstr(path));
}

TEST(DecodeImageFile, TextFileIsInvalidArgumentNamingIt) {
  testing::TempDir dir;
  const std::string path = dir / "notes.png";
  ASSERT_TRUE(testing::WriteTestFile(path, "GIF89a is not supported"));
  absl::StatusOr<Image> image = DecodeImageFile(path);
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
  // Nothing of the file's contents is shown: a data path may name any readable file.
  EXPECT_EQ(image.status().message(), path + ": not a PNG or JPEG file");
}

TEST(DecodeImageFile, EmptyFileIsInvalidArgument) {
  testing::TempDir dir;
  const std::string path = dir / "empty.jpg";
  ASSERT_TRUE(testing::WriteTestFile(path, ""));
  absl::StatusOr<Image> image = DecodeImageFile(path);
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(image.status().message(), path + ": file is empty");
}

TEST(DecodeImageFile, FormatComesFromTheBytesNotTheExtension) {
  const Image image = MakeImage(2, 3, [](int64_t y, int64_t x) { return 0.0f; });
  testing::TempDir dir;
  const std::string path = dir / "really_a_png.jpg";
  ASSERT_TRUE(WritePng(image, path).ok());
  absl::StatusOr<Image> decoded = DecodeImageFile(path);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->height, 2);
  EXPECT_EQ(decoded->width, 3);
}

TEST(ResizeBilinear, UpsamplesTwoByTwoToFourByFour) {
  // f(y, x) = 2y + x: [[0, 1], [2, 3]]. Each axis samples source coordinates 0 (clamped from
  // -0.25), 0.25, 0.75 and 1 (1.25 clamped to the last pixel).
  const Image image = MakeImage(2, 2, [](int64_t y, int64_t x) { return 2 * y + x; });
  const Image resized = ResizeBilinear(image, 4, 4);
  ASSERT_EQ(resized.channels, 3);
  ASSERT_EQ(resized.height, 4);
  ASSERT_EQ(resized.width, 4);
  const std::vector<float> expected = {0.0f, 0.25f, 0.75f, 1.0f,  //
                                       0.5f, 0.75f, 1.25f, 1.5f,  //
                                       1.5f, 1.75f, 2.25f, 2.5f,  //
                                       2.0f, 2.25f, 2.75f, 3.0f};
  for (int c = 0; c < 3; ++c) {
    std::vector<float> plane(resized.pixels.begin() + 16 * c,
                             resized.pixels.begin() + 16 * (c + 1));
    std::vector<float> shifted = expected;
    for (float& v : shifted) v += 10.0f * c;
    EXPECT_THAT(plane, ElementsAreArray(shifted)) << "channel " << c;
  }
}

TEST(ResizeBilinear, DownsamplesByAveragingTheTwoNearest) {
  // f(y, x) = 4y + x on 4 x 4; output pixel k samples source coordinate 2k + 0.5.
  const Image image = MakeImage(4, 4, [](int64_t y, int64_t x) { return 4 * y + x; });
  const Image resized = ResizeBilinear(image, 2, 2);
  EXPECT_THAT(std::vector<float>(resized.pixels.begin(), resized.pixels.begin() + 4),
              ElementsAreArray({2.5f, 4.5f, 10.5f, 12.5f}));
}

TEST(ResizeBilinear, ResizesEachAxisOnItsOwn) {
  // 1 x 2 -> 3 x 4: rows all sample row 0; columns sample 0, 0.25, 0.75, 1.
  const Image image = MakeImage(1, 2, [](int64_t y, int64_t x) { return 4 * x; });
  const Image resized = ResizeBilinear(image, 3, 4);
  EXPECT_THAT(
      std::vector<float>(resized.pixels.begin(), resized.pixels.begin() + 12),
      ElementsAreArray({0.0f, 1.0f, 3.0f, 4.0f, 0.0f, 1.0f, 3.0f, 4.0f, 0.0f, 1.0f, 3.0f, 4.0f}));
}

TEST(ResizeBilinear, SameSizeIsACopy) {
  const Image image = MakeImage(3, 5, [](int64_t y, int64_t x) { return 0.1f * y + 0.01f * x; });
  EXPECT_EQ(ResizeBilinear(image, 3, 5).pixels, image.pixels);
}

}  // namespace
}  // namespace tandem::data
