#include "data/pil_resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem::data {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double Bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double Bilinear(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// One pass's kernel: for each output position, the first input index, the count, and the
// fixed-point coefficients (Resample.c: precompute_coeffs, normalize_coeffs_8bpc).
struct Kernel {
  int size = 0;  // coefficients per output position
  std::vector<int> first, count;
  std::vector<int32_t> coefficients;  // [out, size]
};

Kernel Precompute(int in_size, int out_size, PilFilter filter) {
  const double support_base = filter == PilFilter::kBicubic ? 2.0 : 1.0;
  const auto f = filter == PilFilter::kBicubic ? Bicubic : Bilinear;
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = support_base * filter_scale;
  Kernel k;
  k.size = static_cast<int>(std::ceil(support)) * 2 + 1;
  k.first.resize(out_size);
  k.count.resize(out_size);
  k.coefficients.assign(static_cast<size_t>(out_size) * k.size, 0);
  std::vector<double> w(static_cast<size_t>(k.size));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filter_scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double total = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = f((x + xmin - center + 0.5) * ss);
      total += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = total != 0.0 ? w[x] / total : w[x];
      k.coefficients[static_cast<size_t>(xx) * k.size + x] = static_cast<int32_t>(
          v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    k.first[xx] = xmin;
    k.count[xx] = xmax;
  }
  return k;
}

// Pillow's clip8 of a 32-bit sum (its passes sum in int: 255 x the kernel's weight in 22 bits
// stays below 2^31).
uint8_t Clip8(int32_t v) {
  if (v >= (int32_t{1} << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// round(v * 255) clamped to [0, 255], halves away from zero as std::lround, without its call:
// x - trunc(x) is exact in float for |x| < 2^23. Clamped after rounding, in integers, so that the
// loop over an image has no branch and vectorises. REQUIRES: |v| < 2^15 (pixels are in [0, 1]).
inline uint8_t ToByte(float v) {
  const float x = v * 255.0f;
  int32_t whole = static_cast<int32_t>(x);
  whole += static_cast<int32_t>(x - static_cast<float>(whole) >= 0.5f);
  return static_cast<uint8_t>(std::clamp(whole, 0, 255));
}

// The passes' loops run on whole rows, which the compiler vectorises; on x86-64 each is also built
// for AVX2 and the CPU picks the build it can run when the program loads (GCC's target_clones), as
// the portable baseline has 16-byte vectors only.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TANDEM_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TANDEM_VECTOR_CLONES
#endif

// A pass sums whole rows of its input, each tap's row times its coefficient, which the compiler
// vectorises: the vertical pass over the plane, the horizontal one over the plane transposed.
// Integer sums in any order are Pillow's sums, so the pixels are its.
TANDEM_VECTOR_CLONES Image8 VerticalPass(const Image8& from, const Kernel& kernel, int out_h) {
  const int width = static_cast<int>(from.width);
  Image8 to{from.channels, out_h, from.width, {}};
  to.pixels.resize(static_cast<size_t>(to.channels) * to.height * to.width);
  std::vector<int32_t> sums(static_cast<size_t>(width));
  for (int64_t c = 0; c < from.channels; ++c) {
    const uint8_t* plane = &from.pixels[static_cast<size_t>(c * from.height * width)];
    for (int yy = 0; yy < out_h; ++yy) {
      const int32_t* k = &kernel.coefficients[static_cast<size_t>(yy) * kernel.size];
      std::fill(sums.begin(), sums.end(), int32_t{1} << (kPrecisionBits - 1));
      for (int y = 0; y < kernel.count[yy]; ++y) {
        const uint8_t* row = plane + static_cast<size_t>(y + kernel.first[yy]) * width;
        const int32_t weight = k[y];
        for (int x = 0; x < width; ++x) sums[x] += row[x] * weight;
      }
      uint8_t* out = &to.pixels[static_cast<size_t>((c * out_h + yy) * width)];
      for (int x = 0; x < width; ++x) out[x] = Clip8(sums[x]);
    }
  }
  return to;
}

// Rows [first_row, first_row + rows) of `from`, each plane transposed, in tiles of 16 x 16 so
// that reads and writes both stay in cache.
TANDEM_VECTOR_CLONES Image8 Transposed(const Image8& from, int first_row, int rows) {
  constexpr int kTile = 16;
  const int width = static_cast<int>(from.width);
  Image8 to{from.channels, from.width, rows, {}};
  to.pixels.resize(static_cast<size_t>(to.channels) * to.height * to.width);
  for (int64_t c = 0; c < from.channels; ++c) {
    const uint8_t* in = &from.pixels[static_cast<size_t>((c * from.height + first_row) * width)];
    uint8_t* out = &to.pixels[static_cast<size_t>(c * to.height * to.width)];
    for (int y0 = 0; y0 < rows; y0 += kTile) {
      for (int x0 = 0; x0 < width; x0 += kTile) {
        const int y1 = std::min(rows, y0 + kTile), x1 = std::min(width, x0 + kTile);
        for (int x = x0; x < x1; ++x) {
          for (int y = y0; y < y1; ++y)
            out[static_cast<size_t>(x) * rows + y] = in[static_cast<size_t>(y) * width + x];
        }
      }
    }
  }
  return to;
}

}  // namespace

Image8 ToImage8(const Image& image) {
  Image8 out{image.channels, image.height, image.width, {}};
  out.pixels.resize(image.pixels.size());
  // Distinct arrays (a uint8_t store may alias anything, which would keep the loop scalar).
  const float* __restrict from = image.pixels.data();
  uint8_t* __restrict to = out.pixels.data();
  for (size_t i = 0; i < image.pixels.size(); ++i) to[i] = ToByte(from[i]);
  return out;
}

Image ResizePil(const Image& image, int64_t height, int64_t width, PilFilter filter) {
  return ToFloatImage(ResizePil8(ToImage8(image), height, width, filter));
}

Image8 ResizePil8(const Image8& image, int64_t height, int64_t width, PilFilter filter) {
  const Image8& in = image;
  const int in_w = static_cast<int>(in.width), in_h = static_cast<int>(in.height);
  const int out_w = static_cast<int>(width), out_h = static_cast<int>(height);
  const Kernel horizontal = Precompute(in_w, out_w, filter);
  Kernel vertical = Precompute(in_h, out_h, filter);
  const bool need_horizontal = out_w != in_w;
  const bool need_vertical = out_h != in_h;
  // Pillow 13: when the height shrinks by more than twice what the width does, the vertical pass
  // runs first (so the horizontal one has fewer rows). The 8-bit rounding between the passes makes
  // the order show in the pixels.
  const bool horizontal_first = !(in_h - out_h > 0 && in_h - out_h > (in_w - out_w) * 2);

  // The horizontal pass over rows [first_row, first_row + rows) of `from`: the vertical one over
  // them transposed.
  const auto horizontal_pass = [&](const Image8& from, int first_row, int rows) {
    const Image8 columns = VerticalPass(Transposed(from, first_row, rows), horizontal, out_w);
    return Transposed(columns, 0, static_cast<int>(columns.height));
  };

  Image8 current;
  const Image8* last = &in;  // the latest pass's output
  if (horizontal_first) {
    if (need_horizontal) {
      // Only the rows the vertical pass reads (Resample.c: ybox_first .. ybox_last).
      const int first_row = vertical.first[0];
      const int last_row = vertical.first[out_h - 1] + vertical.count[out_h - 1];
      for (int& f : vertical.first) f -= first_row;
      current = horizontal_pass(*last, first_row, last_row - first_row);
      last = &current;
    }
    if (need_vertical) {
      current = VerticalPass(*last, vertical, out_h);
      last = &current;
    }
  } else {
    if (need_vertical) {
      current = VerticalPass(*last, vertical, out_h);
      last = &current;
    }
    if (need_horizontal) {
      current = horizontal_pass(*last, 0, static_cast<int>(last->height));
      last = &current;
    }
  }
  return last == &in ? in : current;
}

}  // namespace tandem::data
