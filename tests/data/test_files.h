// Small file helpers shared by the data tests.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

namespace tandem::data::testing {

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
