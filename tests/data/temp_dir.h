// A fresh directory for one test, removed with everything in it when the object goes away.
// (tests/testing/group.h has one too, but it pulls in LibTorch; data tests stay torch-free.)
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

namespace tandem::data::testing {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("tandem_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path() const { return path_.string(); }
  // path()/name; creates no file.
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace tandem::data::testing
