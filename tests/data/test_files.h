// Small file helpers shared by the data tests.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "data/image.h"

namespace tandem::data::testing {

// An RGB image of height x width whose pixels depend on `seed`.
inline Image PatternImage(int64_t height, int64_t width, int seed) {
  Image image;
  image.channels = 3;
  image.height = height;
  image.width = width;
  for (int64_t i = 0; i < 3 * height * width; ++i)
    image.pixels.push_back(static_cast<float>((i * 7 + seed * 31) % 256) / 255.0f);
  return image;
}

// Writes `contents` to `path`, creating its directory. Returns false on failure.
inline bool WriteTestFile(const std::string& path, const std::string& contents) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << contents;
  return static_cast<bool>(out);
}

inline std::string ReadTestFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace tandem::data::testing
