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

uint8_t Clip8(int64_t v) {
  if (v >= (int64_t{1} << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// Planar 8-bit image.
struct Plane8 {
  int channels = 3, height = 0, width = 0;
  std::vector<uint8_t> v;
  uint8_t at(int c, int y, int x) const {
    return v[(static_cast<size_t>(c) * height + y) * width + x];
  }
  uint8_t& at(int c, int y, int x) { return v[(static_cast<size_t>(c) * height + y) * width + x]; }
};

}  // namespace

Image ResizePil(const Image& image, int64_t height, int64_t width, PilFilter filter) {
  Plane8 in{static_cast<int>(image.channels),
            static_cast<int>(image.height),
            static_cast<int>(image.width),
            {}};
  in.v.resize(image.pixels.size());
  for (size_t i = 0; i < image.pixels.size(); ++i) {
    in.v[i] = static_cast<uint8_t>(std::lround(std::clamp(image.pixels[i], 0.0f, 1.0f) * 255.0f));
  }
  const int out_w = static_cast<int>(width), out_h = static_cast<int>(height);
  const Kernel horizontal = Precompute(in.width, out_w, filter);
  Kernel vertical = Precompute(in.height, out_h, filter);
  const bool need_horizontal = out_w != in.width;
  const bool need_vertical = out_h != in.height;
  // Pillow 13: when the height shrinks by more than twice what the width does, the vertical pass
  // runs first (so the horizontal one has fewer rows). The 8-bit rounding between the passes makes
  // the order show in the pixels.
  const bool horizontal_first =
      !(in.height - out_h > 0 && in.height - out_h > (in.width - out_w) * 2);

  // The horizontal pass over rows [first_row, first_row + rows) of `from`.
  const auto horizontal_pass = [&](const Plane8& from, int first_row, int rows) {
    Plane8 to{from.channels, rows, out_w, {}};
    to.v.resize(static_cast<size_t>(to.channels) * to.height * to.width);
    for (int c = 0; c < from.channels; ++c) {
      for (int y = 0; y < rows; ++y) {
        for (int xx = 0; xx < out_w; ++xx) {
          int64_t ss = int64_t{1} << (kPrecisionBits - 1);
          const int32_t* k = &horizontal.coefficients[static_cast<size_t>(xx) * horizontal.size];
          for (int x = 0; x < horizontal.count[xx]; ++x)
            ss += from.at(c, y + first_row, x + horizontal.first[xx]) * int64_t{k[x]};
          to.at(c, y, xx) = Clip8(ss);
        }
      }
    }
    return to;
  };
  const auto vertical_pass = [&](const Plane8& from) {
    Plane8 to{from.channels, out_h, from.width, {}};
    to.v.resize(static_cast<size_t>(to.channels) * to.height * to.width);
    for (int c = 0; c < from.channels; ++c) {
      for (int yy = 0; yy < out_h; ++yy) {
        const int32_t* k = &vertical.coefficients[static_cast<size_t>(yy) * vertical.size];
        for (int x = 0; x < from.width; ++x) {
          int64_t ss = int64_t{1} << (kPrecisionBits - 1);
          for (int y = 0; y < vertical.count[yy]; ++y)
            ss += from.at(c, y + vertical.first[yy], x) * int64_t{k[y]};
          to.at(c, yy, x) = Clip8(ss);
        }
      }
    }
    return to;
  };

  Plane8 current = std::move(in);
  if (horizontal_first) {
    if (need_horizontal) {
      // Only the rows the vertical pass reads (Resample.c: ybox_first .. ybox_last).
      const int first_row = vertical.first[0];
      const int last_row = vertical.first[out_h - 1] + vertical.count[out_h - 1];
      for (int& f : vertical.first) f -= first_row;
      current = horizontal_pass(current, first_row, last_row - first_row);
    }
    if (need_vertical) current = vertical_pass(current);
  } else {
    if (need_vertical) current = vertical_pass(current);
    if (need_horizontal) current = horizontal_pass(current, 0, current.height);
  }
  Image result;
  result.channels = current.channels;
  result.height = current.height;
  result.width = current.width;
  result.pixels.resize(current.v.size());
  for (size_t i = 0; i < current.v.size(); ++i)
    result.pixels[i] = static_cast<float>(current.v[i]) / 255.0f;
  return result;
}

}  // namespace tandem::data
