// Rasterises one shape of the shapes dataset (data/shapes.h), antialiased by 4 x 4 supersampling.
//
// Geometry is in image units: (0, 0) is the top-left corner of the image, (1, 1) the bottom-right,
// y pointing down. Each shape is scaled by `radius` so that all four read as the same size:
//   circle   radius r
//   square   half side 0.9 r
//   triangle pointing up, equilateral with circumradius 1.3 r, its bounding box centred
//            (half width 1.126 r, half height 0.975 r)
//   cross    a plus sign, arms of half length r and half thickness 0.33 r
// So no shape reaches further than 1.126 r from its centre (kMaxExtentPerRadius).
#pragma once

#include <array>
#include <cstdint>

#include "data/image.h"
#include "data/shapes.h"

namespace tandem::data {

inline constexpr double kMaxExtentPerRadius = 1.126;

struct ShapeScene {
  Shape shape = Shape::kCircle;
  double center_x = 0.5;  // image units
  double center_y = 0.5;
  double radius = 0.1;
  std::array<float, 3> colour{};      // RGB in [0, 1]
  std::array<float, 3> background{};  // RGB in [0, 1]
};

// A 3 x image_size x image_size image: the background, with the shape blended in by the fraction
// of the pixel's 16 subsamples it covers. REQUIRES: image_size > 0.
Image RenderScene(const ShapeScene& scene, int64_t image_size);

}  // namespace tandem::data
