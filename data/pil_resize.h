// Image resizing as Pillow's Image.resize does it for 8-bit RGB images (libImaging/Resample.c):
// a separable convolution, horizontal pass first (vertical first, as Pillow 13 does it, when the
// height shrinks by more than twice what the width does), whose kernel widens by the downscaling
// factor (antialiasing), with coefficients in 22-bit fixed point and each pass rounded and clipped
// to 8 bits. transformers' PIL image processors (CLIPImageProcessorPil, SiglipImageProcessorPil,
// and every slow processor before transformers 5) resize this way, so the pixels match theirs
// exactly. Thread-safe: no shared state.
#pragma once

#include <cstdint>

#include "data/image.h"

namespace tandem::data {

enum class PilFilter {
  kBilinear,  // PIL.Image.BILINEAR (2): triangle, support 1
  kBicubic,   // PIL.Image.BICUBIC (3): Keys cubic with a = -0.5, support 2
};

// The image's values are read as 8-bit samples (ToImage8), resized, and returned as v / 255.
// REQUIRES: height > 0, width > 0, image non-empty.
Image ResizePil(const Image& image, int64_t height, int64_t width, PilFilter filter);
// The same on 8-bit samples, as Pillow works: ResizePil(image) is ToFloatImage(ResizePil8(
// ToImage8(image))).
Image8 ResizePil8(const Image8& image, int64_t height, int64_t width, PilFilter filter);

// Each value v in [0, 1] as the 8-bit sample round(v * 255), halves away from zero.
Image8 ToImage8(const Image& image);

}  // namespace tandem::data
