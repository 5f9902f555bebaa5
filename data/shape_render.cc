#include "data/shape_render.h"

#include <algorithm>
#include <cmath>

namespace tandem::data {
namespace {

constexpr int kSubsamples = 4;  // per axis: 16 coverage levels per pixel

// Whether point (x, y), relative to the shape's centre, is inside the shape of radius r.
bool Inside(Shape shape, double x, double y, double r) {
  switch (shape) {
    case Shape::kCircle:
      return x * x + y * y <= r * r;
    case Shape::kSquare:
      return std::abs(x) <= 0.9 * r && std::abs(y) <= 0.9 * r;
    case Shape::kTriangle: {
      // Vertices of an equilateral triangle with circumradius R, shifted down by R / 4 so that its
      // bounding box (height 1.5 R) is centred: apex (0, -0.75 R), base corners (+-0.866 R, 0.75
      // R).
      const double big = 1.3 * r;
      const double half_height = 0.75 * big;
      const double half_base = 0.8660254037844386 * big;
      if (y > half_height || y < -half_height) return false;
      // Half width at height y grows linearly from 0 at the apex to half_base at the base.
      const double half_width = half_base * (y + half_height) / (2 * half_height);
      return std::abs(x) <= half_width;
    }
    case Shape::kCross: {
      const double arm = r;
      const double thickness = 0.33 * r;
      const bool horizontal = std::abs(x) <= arm && std::abs(y) <= thickness;
      const bool vertical = std::abs(y) <= arm && std::abs(x) <= thickness;
      return horizontal || vertical;
    }
  }
  return false;
}

}  // namespace

Image RenderScene(const ShapeScene& scene, int64_t image_size) {
  Image image;
  image.height = image_size;
  image.width = image_size;
  const int64_t plane = image_size * image_size;
  image.pixels.resize(3 * plane);
  for (int c = 0; c < 3; ++c) {
    std::fill(image.pixels.begin() + c * plane, image.pixels.begin() + (c + 1) * plane,
              scene.background[c]);
  }

  // Only pixels within the shape's bounding box can be covered.
  const double size = static_cast<double>(image_size);
  const double extent = kMaxExtentPerRadius * scene.radius;
  auto first = [&](double low) {
    return std::clamp<int64_t>(std::floor(low * size), 0, image_size);
  };
  auto last = [&](double high) {
    return std::clamp<int64_t>(std::ceil(high * size), 0, image_size);
  };
  const int64_t x0 = first(scene.center_x - extent), x1 = last(scene.center_x + extent);
  const int64_t y0 = first(scene.center_y - extent), y1 = last(scene.center_y + extent);

  for (int64_t py = y0; py < y1; ++py) {
    for (int64_t px = x0; px < x1; ++px) {
      int covered = 0;
      for (int sy = 0; sy < kSubsamples; ++sy) {
        for (int sx = 0; sx < kSubsamples; ++sx) {
          const double x = (px + (sx + 0.5) / kSubsamples) / size - scene.center_x;
          const double y = (py + (sy + 0.5) / kSubsamples) / size - scene.center_y;
          covered += Inside(scene.shape, x, y, scene.radius);
        }
      }
      if (covered == 0) continue;
      const float coverage = static_cast<float>(covered) / (kSubsamples * kSubsamples);
      for (int c = 0; c < 3; ++c) {
        // Exactly the colour at full coverage.
        image.at(c, py, px) = (1 - coverage) * scene.background[c] + coverage * scene.colour[c];
      }
    }
  }
  return image;
}

}  // namespace tandem::data
