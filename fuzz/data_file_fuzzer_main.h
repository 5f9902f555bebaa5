// The body of the jsonl and conversation fuzzers: the input becomes a data file in a directory of
// this process's own (in /dev/shm when there is one), beside "a.png", a valid 4 x 4 image, so that
// inputs naming it open and decode. The reader under test opens the file as a job would.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/image.h"

namespace tandem::fuzz {

// The directory, made once: <tmp>/tandem-fuzz-<pid>, with a.png in it.
inline const std::string& DataDirectory() {
  static const std::string directory = [] {
    const std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    const std::filesystem::path dir = base / ("tandem-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    data::Image image;
    image.height = 4;
    image.width = 4;
    image.pixels.assign(3 * 16, 0.5f);
    if (!data::WritePng(image, (dir / "a.png").string()).ok()) std::abort();
    return dir.string();
  }();
  return directory;
}

// Writes the input as <directory>/<name> and returns its path.
inline std::string WriteInput(const uint8_t* data, size_t size, const std::string& name) {
  const std::string path = DataDirectory() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace tandem::fuzz
