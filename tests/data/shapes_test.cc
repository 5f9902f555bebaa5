// Tests for data/shapes.cc and data/shape_render.cc: determinism, captions, balance, train/eval
// disjointness, and that the rendered pixels show what the caption says.
#include "data/shapes.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "data/shape_render.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::data {
namespace {

TEST(Caption, ReadsSizeColourShapeAndPlace) {
  EXPECT_EQ(Caption({Shape::kCircle, Colour::kRed, Place::kTopLeft, ShapeSize::kSmall}),
            "a small red circle at the top left");
  EXPECT_EQ(Caption({Shape::kCross, Colour::kBlue, Place::kCenter, ShapeSize::kLarge}),
            "a large blue cross at the center");
  EXPECT_EQ(Caption({Shape::kSquare, Colour::kGreen, Place::kTop, ShapeSize::kSmall}),
            "a small green square at the top");
  EXPECT_EQ(Caption({Shape::kTriangle, Colour::kOrange, Place::kBottomRight, ShapeSize::kLarge}),
            "a large orange triangle at the bottom right");
}

TEST(Caption, CombinationNumbersRoundTrip) {
  std::set<std::string> captions;
  for (int64_t c = 0; c < kNumShapeCombinations; ++c) {
    EXPECT_EQ(CombinationOf(AttributesOfCombination(c)), c);
    captions.insert(Caption(AttributesOfCombination(c)));
  }
  EXPECT_EQ(captions.size(), 432u);
  EXPECT_EQ(Caption(AttributesOfCombination(0)), "a small red circle at the top left");
  EXPECT_EQ(Caption(AttributesOfCombination(431)), "a large orange cross at the bottom right");
}

TEST(ShapesDataset, SameSeedAndIndexGiveTheSameSampleInAnyOrder) {
  const ShapesDataset a(7, 32, Split::kTrain, 100);
  const ShapesDataset b(7, 32, Split::kTrain, 100);
  const Example late_first = b.Render(99);
  for (int64_t i : {0, 1, 50, 99}) {
    const Example x = a.Render(i);
    const Example y = b.Render(i);
    EXPECT_EQ(x.image.pixels, y.image.pixels) << i;
    EXPECT_EQ(x.text, y.text) << i;
    EXPECT_EQ(a.Text(i), x.text) << i;
  }
  EXPECT_EQ(late_first.image.pixels, a.Render(99).image.pixels);
}

TEST(ShapesDataset, CaptionsArePinnedForSeedZero) {
  // Guards the data against accidental change: these follow from SplitMix64 alone.
  const ShapesDataset shapes(0, 32, Split::kTrain, 4096);
  EXPECT_EQ(shapes.Text(0), "a large green cross at the top");
  EXPECT_EQ(shapes.Text(1), "a large blue cross at the bottom");
  EXPECT_EQ(shapes.Text(2), "a large orange cross at the bottom");
  EXPECT_EQ(shapes.Text(3), "a small red square at the center");
}

TEST(ShapesDataset, DifferentSeedsGiveDifferentData) {
  const ShapesDataset a(0, 32, Split::kTrain, 432);
  const ShapesDataset b(1, 32, Split::kTrain, 432);
  int same_captions = 0;
  for (int64_t i = 0; i < 432; ++i) same_captions += a.Text(i) == b.Text(i);
  EXPECT_LT(same_captions, 10);  // two random orders of 432 agree in about 1 place
  EXPECT_NE(a.Render(0).image.pixels, b.Render(0).image.pixels);
}

TEST(ShapesDataset, ImagesAreThreeChannelsInTheUnitRange) {
  const ShapesDataset shapes(3, 48, Split::kEval, 10);
  for (int64_t i = 0; i < 10; ++i) {
    absl::StatusOr<Example> example = shapes.Get(i);
    ASSERT_TRUE(example.ok()) << example.status();
    EXPECT_EQ(example->image.channels, 3);
    EXPECT_EQ(example->image.height, 48);
    EXPECT_EQ(example->image.width, 48);
    ASSERT_EQ(example->image.pixels.size(), 3u * 48 * 48);
    const auto [low, high] =
        std::minmax_element(example->image.pixels.begin(), example->image.pixels.end());
    EXPECT_GE(*low, 0.0f);
    EXPECT_LE(*high, 1.0f);
  }
}

TEST(ShapesDataset, GetOutsideTheSizeIsOutOfRange) {
  const ShapesDataset shapes(0, 32, Split::kTrain, 5);
  EXPECT_EQ(shapes.Get(5).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(shapes.Get(-1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(shapes.Describe(3), "shapes train #3 (seed 0)");
}

TEST(ShapesDataset, CaptionsFollowTheGrammar) {
  const std::regex grammar(
      "a (small|large) (red|green|blue|yellow|purple|orange) (circle|square|triangle|cross) at the "
      "(top left|top|top right|left|center|right|bottom left|bottom|bottom right)");
  const ShapesDataset shapes(11, 32, Split::kTrain, 500);
  for (int64_t i = 0; i < shapes.size(); ++i) {
    EXPECT_TRUE(std::regex_match(shapes.Text(i), grammar)) << shapes.Text(i);
  }
}

TEST(ShapesDataset, EveryBlockOf432HoldsEachCombinationOnce) {
  const ShapesDataset shapes(5, 32, Split::kTrain, 4096);
  std::vector<int> counts(kNumShapeCombinations, 0);
  for (int64_t i = 0; i < 9 * kNumShapeCombinations; ++i)
    ++counts[CombinationOf(shapes.Attributes(i))];
  EXPECT_THAT(counts, ::testing::Each(9));
  // So 4096 training samples contain all 432 combinations.
  std::set<int64_t> seen;
  for (int64_t i = 0; i < 4096; ++i) seen.insert(CombinationOf(shapes.Attributes(i)));
  EXPECT_EQ(seen.size(), 432u);
}

TEST(ShapesDataset, TrainAndEvalShareNoImage) {
  const ShapesDataset train(0, 32, Split::kTrain, 2000);
  const ShapesDataset eval(0, 32, Split::kEval, 500);
  std::set<std::vector<float>> train_images;
  for (int64_t i = 0; i < train.size(); ++i) train_images.insert(train.Render(i).image.pixels);
  EXPECT_EQ(train_images.size(), 2000u);  // and no two training images are equal either
  for (int64_t i = 0; i < eval.size(); ++i) {
    EXPECT_FALSE(train_images.contains(eval.Render(i).image.pixels)) << "eval #" << i;
  }
  EXPECT_NE(train.Text(0), eval.Text(0));  // different attribute streams too (for seed 0)
}

// What the pixels of a 32 x 32 sample show: the pixels clearly brighter than any background
// (max channel > 0.3; backgrounds stay below 0.14), their centroid, the brightest pixel's colour,
// and the shape's area in pixels, from each pixel's brightness above the background's.
struct Observed {
  int bright_pixels = 0;
  double area = 0;
  double centroid_x = 0;
  double centroid_y = 0;
  std::array<float, 3> colour{};
};

Observed Observe(const Image& image) {
  Observed seen;
  float brightest = -1;
  for (int64_t y = 0; y < image.height; ++y) {
    for (int64_t x = 0; x < image.width; ++x) {
      const float value = std::max({image.at(0, y, x), image.at(1, y, x), image.at(2, y, x)});
      seen.area += std::max(0.0f, value - 0.14f);
      if (value <= 0.3f) continue;
      ++seen.bright_pixels;
      seen.centroid_x += (x + 0.5) / image.width;
      seen.centroid_y += (y + 0.5) / image.height;
      if (value > brightest) {
        brightest = value;
        seen.colour = {image.at(0, y, x), image.at(1, y, x), image.at(2, y, x)};
      }
    }
  }
  seen.centroid_x /= std::max(seen.bright_pixels, 1);
  seen.centroid_y /= std::max(seen.bright_pixels, 1);
  seen.area /= std::max(brightest, 0.3f) - 0.14f;
  return seen;
}

TEST(ShapesDataset, PixelsShowTheCaptionedPlaceSizeAndColourAt32) {
  const ShapesDataset shapes(2, 32, Split::kTrain, 432);
  // Per shape: the largest area of a small one and the smallest of a large one.
  std::array<double, kNumShapes> largest_small{}, smallest_large{};
  smallest_large.fill(32 * 32);
  // Reference colours, as in shapes.cc; the rendered one must be nearest its own.
  const std::array<std::array<float, 3>, kNumColours> reference = {{{0.90f, 0.12f, 0.12f},
                                                                    {0.15f, 0.78f, 0.20f},
                                                                    {0.18f, 0.38f, 1.00f},
                                                                    {0.95f, 0.88f, 0.12f},
                                                                    {0.66f, 0.22f, 0.88f},
                                                                    {1.00f, 0.52f, 0.04f}}};
  for (int64_t i = 0; i < shapes.size(); ++i) {
    const ShapeAttributes attributes = shapes.Attributes(i);
    const Observed seen = Observe(shapes.Render(i).image);
    const int place = static_cast<int>(attributes.place);
    // Cell centres are 0.2, 0.5, 0.8; halfway between them is 0.35 and 0.65.
    auto cell = [](double v) { return v < 0.35 ? 0 : v < 0.65 ? 1 : 2; };
    EXPECT_EQ(cell(seen.centroid_x), place % 3) << shapes.Text(i);
    EXPECT_EQ(cell(seen.centroid_y), place / 3) << shapes.Text(i);
    const int shape = static_cast<int>(attributes.shape);
    if (attributes.size == ShapeSize::kSmall) {
      largest_small[shape] = std::max(largest_small[shape], seen.area);
    } else {
      smallest_large[shape] = std::min(smallest_large[shape], seen.area);
    }
    int nearest = 0;
    double best = 1e9;
    for (int c = 0; c < kNumColours; ++c) {
      double distance = 0;
      for (int k = 0; k < 3; ++k) distance += std::pow(seen.colour[k] - reference[c][k], 2);
      if (distance < best) best = distance, nearest = c;
    }
    EXPECT_EQ(nearest, static_cast<int>(attributes.colour)) << shapes.Text(i);
  }
  // Every large shape covers clearly more pixels than any small one of its kind (by design about
  // (0.135 / 0.091)^2 = 2.2 times), and more than any small shape at all.
  for (int shape = 0; shape < kNumShapes; ++shape) {
    EXPECT_LT(largest_small[shape] * 1.6, smallest_large[shape])
        << ShapeName(static_cast<Shape>(shape)) << ": " << largest_small[shape] << " vs "
        << smallest_large[shape];
  }
  EXPECT_LT(*std::max_element(largest_small.begin(), largest_small.end()),
            *std::min_element(smallest_large.begin(), smallest_large.end()));
}

TEST(RenderScene, BlendsBySubsampleCoverage) {
  // A square of half side 0.9 r = 0.2 around the centre of a 10 x 10 image covers [0.3, 0.7]:
  // pixels 3..6 entirely (every subsample) and no subsample of any other pixel.
  ShapeScene scene;
  scene.shape = Shape::kSquare;
  scene.radius = 0.2 / 0.9;
  scene.colour = {1.0f, 0.5f, 0.25f};
  scene.background = {0.0f, 0.1f, 0.2f};
  const Image image = RenderScene(scene, 10);
  for (int64_t y = 0; y < 10; ++y) {
    for (int64_t x = 0; x < 10; ++x) {
      const bool inside = y >= 3 && y <= 6 && x >= 3 && x <= 6;
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(image.at(c, y, x), inside ? scene.colour[c] : scene.background[c])
            << y << "," << x;
      }
    }
  }
  // A square of half side 0.25 spans [0.25, 0.75]: pixel 2's subsample centres are 0.2125, 0.2375,
  // 0.2625 and 0.2875, so the edge pixels get half of theirs (and corner pixels a quarter).
  scene.radius = 0.25 / 0.9;
  const Image wider = RenderScene(scene, 10);
  EXPECT_FLOAT_EQ(wider.at(0, 5, 2), 0.5f);   // 2 of 4 subsample columns, all 4 rows
  EXPECT_FLOAT_EQ(wider.at(0, 2, 2), 0.25f);  // 2 x 2 of 16 subsamples
  EXPECT_FLOAT_EQ(wider.at(0, 5, 5), 1.0f);
}

}  // namespace
}  // namespace tandem::data
