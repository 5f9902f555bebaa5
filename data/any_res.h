// LLaVA-NeXT's any-resolution images ("anyres"), as transformers' LlavaNextImageProcessor and
// LlavaNextForConditionalGeneration compute them.
//
// An image of any size is read at the grid pinpoint (a resolution, a multiple of the tower's tile
// side both ways) that keeps most of its pixels, wasting least: it is resized into the pinpoint
// keeping its aspect, padded to it with black, centred, and cut into rows x cols tiles; the whole
// image squashed to one tile (the "base") comes first. The tower encodes every tile alike. The LLM
// reads the base tile's features, then the grid's features (rows*side x cols*side, the tiles put
// back together) with the padding rows or columns cut away ("unpadding") and a learned newline
// embedding after each row of features:
//
//   positions = side^2 + height * (width + 1)   (height x width: the unpadded grid of features)
//
// Every function here is plain arithmetic on sizes or images: torch-free, stateless, thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "data/image.h"
#include "data/pil_resize.h"

namespace tandem::data {

// The largest pinpoint side: a tile grid of 8192 x 8192 pixels is 24 tiles of 336 a side.
inline constexpr int64_t kMaxAnyResSide = 8192;

// transformers' select_best_resolution: the pinpoint whose aspect-preserving fit of `image` keeps
// the most pixels (at most the image's own), ties to the one with the least area left over.
// REQUIRES: pinpoints non-empty, sizes positive.
Resolution SelectBestResolution(Resolution image, const std::vector<Resolution>& pinpoints);

// Where one image's features go: its tile grid and the unpadded window of its grid of features.
struct AnyResLayout {
  Resolution image;  // the original size
  int64_t rows = 0;  // tiles down and across the chosen pinpoint
  int64_t cols = 0;
  int64_t side = 0;  // features along a tile's side (the tower's patches per side)
  // The window of the [rows * side, cols * side] grid of features that is kept.
  int64_t top = 0, height = 0, left = 0, width = 0;

  int64_t tiles() const { return 1 + rows * cols; }  // the base tile and the grid's
  // The LLM positions of the image: the base tile's side^2 features, then the window's rows, each
  // followed by the newline.
  int64_t positions() const { return side * side + height * (width + 1); }
};

// REQUIRES: pinpoints non-empty, each a positive multiple of tile both ways; tile and side
// positive; the image's sides positive.
AnyResLayout LayoutAnyRes(Resolution image, const std::vector<Resolution>& pinpoints, int64_t tile,
                          int64_t side);

// The most positions any image can take under these pinpoints (an upper bound that needs no image:
// the largest pinpoint's grid, unpadded by nothing). Inline: the torch-free job spec sizes rows
// with it without linking data/.
inline int64_t MaxAnyResPositions(const std::vector<Resolution>& pinpoints, int64_t tile,
                                  int64_t side) {
  int64_t most = 0;
  for (const Resolution& p : pinpoints) {
    const int64_t grid_h = p.height / tile * side, grid_w = p.width / tile * side;
    most = std::max(most, side * side + grid_h * (grid_w + 1));
  }
  return most;
}

// How a model reads images: LLaVA-NeXT's tiles (pinpoints, the tile side in pixels and in
// features), or, with no pinpoints, one tile an image.
struct AnyResGeometry {
  std::vector<Resolution> pinpoints;
  int64_t tile = 0;
  int64_t side = 0;

  bool enabled() const { return !pinpoints.empty(); }
  AnyResLayout Layout(Resolution image) const { return LayoutAnyRes(image, pinpoints, tile, side); }
  int64_t max_positions() const { return MaxAnyResPositions(pinpoints, tile, side); }
};

// The tiles of `image` (values in [0, 1], 8-bit steps), as LlavaNextImageProcessorPil's
// get_image_patches makes them before each tile's own resize, crop and normalisation: the image
// resized to `base` (the processor's size), then the image resized into the chosen pinpoint
// (keeping its aspect, sides rounded up), padded to it with zeros, centred (the odd pixel on the
// bottom and right), and cut row by row into tile x tile tiles. Resizing is Pillow's.
std::vector<Image> AnyResTiles(const Image& image, const std::vector<Resolution>& pinpoints,
                               int64_t tile, Resolution base, PilFilter filter);

}  // namespace tandem::data
