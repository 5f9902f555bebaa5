#include "data/any_res.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace tandem::data {
namespace {

// Python's int(round(x, 7)) for x >= 0.
int64_t RoundSeven(double x) { return static_cast<int64_t>(std::round(x * 1e7) / 1e7); }

// get_patch_output_size: the image resized into `target`, keeping its aspect, a side rounded up.
Resolution FitInto(Resolution image, Resolution target) {
  const double scale_w = static_cast<double>(target.width) / static_cast<double>(image.width);
  const double scale_h = static_cast<double>(target.height) / static_cast<double>(image.height);
  if (scale_w < scale_h) {
    return {std::min(static_cast<int64_t>(std::ceil(static_cast<double>(image.height) * scale_w)),
                     target.height),
            target.width};
  }
  return {target.height,
          std::min(static_cast<int64_t>(std::ceil(static_cast<double>(image.width) * scale_h)),
                   target.width)};
}

Image Resized(const Image& image, Resolution size, PilFilter filter) {
  if (image.height == size.height && image.width == size.width) return image;  // as Pillow
  return ResizePil(image, size.height, size.width, filter);
}

}  // namespace

Resolution SelectBestResolution(Resolution image, const std::vector<Resolution>& pinpoints) {
  Resolution best;
  int64_t max_effective = 0;
  int64_t min_wasted = std::numeric_limits<int64_t>::max();
  const auto w = static_cast<double>(image.width), h = static_cast<double>(image.height);
  for (const Resolution& p : pinpoints) {
    const double scale =
        std::min(static_cast<double>(p.width) / w, static_cast<double>(p.height) / h);
    const auto down_w = static_cast<int64_t>(w * scale), down_h = static_cast<int64_t>(h * scale);
    const int64_t effective = std::min(down_w * down_h, image.width * image.height);
    const int64_t wasted = p.width * p.height - effective;
    if (effective > max_effective || (effective == max_effective && wasted < min_wasted)) {
      max_effective = effective;
      min_wasted = wasted;
      best = p;
    }
  }
  return best;
}

AnyResLayout LayoutAnyRes(Resolution image, const std::vector<Resolution>& pinpoints, int64_t tile,
                          int64_t side) {
  AnyResLayout layout;
  layout.image = image;
  const Resolution best = SelectBestResolution(image, pinpoints);
  layout.rows = best.height / tile;
  layout.cols = best.width / tile;
  layout.side = side;
  // transformers' unpad_image on the [rows * side, cols * side] grid.
  const int64_t grid_h = layout.rows * side, grid_w = layout.cols * side;
  layout.height = grid_h;
  layout.width = grid_w;
  const double h = static_cast<double>(image.height), w = static_cast<double>(image.width);
  if (w / h > static_cast<double>(grid_w) / static_cast<double>(grid_h)) {
    const int64_t kept = RoundSeven(h * (static_cast<double>(grid_w) / w));
    layout.top = (grid_h - kept) / 2;
    layout.height = grid_h - 2 * layout.top;
  } else {
    const int64_t kept = RoundSeven(w * (static_cast<double>(grid_h) / h));
    layout.left = (grid_w - kept) / 2;
    layout.width = grid_w - 2 * layout.left;
  }
  return layout;
}

std::vector<Image> AnyResTiles(const Image& image, const std::vector<Resolution>& pinpoints,
                               int64_t tile, Resolution base, PilFilter filter) {
  const Resolution original{image.height, image.width};
  const Resolution best = SelectBestResolution(original, pinpoints);
  const Resolution fitted = FitInto(original, best);
  const Image resized = Resized(image, fitted, filter);
  // Padded with zeros, centred; the odd pixel goes to the bottom and right.
  const int64_t top = (best.height - fitted.height) / 2, left = (best.width - fitted.width) / 2;
  std::vector<Image> tiles;
  tiles.push_back(Resized(image, base, filter));
  for (int64_t y0 = 0; y0 < best.height; y0 += tile) {
    for (int64_t x0 = 0; x0 < best.width; x0 += tile) {
      Image out;
      out.channels = image.channels;
      out.height = tile;
      out.width = tile;
      out.pixels.assign(static_cast<size_t>(out.channels * tile * tile), 0.0f);
      for (int64_t c = 0; c < out.channels; ++c) {
        for (int64_t y = 0; y < tile; ++y) {
          const int64_t sy = y0 + y - top;
          if (sy < 0 || sy >= resized.height) continue;
          for (int64_t x = 0; x < tile; ++x) {
            const int64_t sx = x0 + x - left;
            if (sx >= 0 && sx < resized.width) out.at(c, y, x) = resized.at(c, sy, sx);
          }
        }
      }
      tiles.push_back(std::move(out));
    }
  }
  return tiles;
}

}  // namespace tandem::data
