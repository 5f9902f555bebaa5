// Test helpers: run one function per rank of a real Gloo group on 127.0.0.1, each rank on its own
// thread, rendezvousing through a FileStore in a fresh temporary directory.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/kv_store.h"
#include "engine/communicator.h"

namespace tandem::testing {

// A fresh empty directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("tandem_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Creates `groups` independent Gloo groups of `world` ranks and calls fn(rank, communicators) on
// one thread per rank; returns when every rank returned.
inline void RunGroup(
    int world,
    const std::function<void(int rank, std::vector<std::shared_ptr<engine::Communicator>>&)>& fn,
    int groups = 1) {
  TempDir dir;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::shared_ptr<engine::Communicator>> comms;
      for (int g = 0; g < groups; ++g) {
        auto store = OpenFileStore(dir / ("group" + std::to_string(g)));
        ASSERT_TRUE(store.ok()) << store.status();
        engine::GlooOptions options;
        options.group_name = "test" + std::to_string(g);
        options.timeout = std::chrono::seconds(60);
        auto comm = engine::CreateGlooCommunicator(*store, r, world, options);
        ASSERT_TRUE(comm.ok()) << comm.status();
        comms.push_back(*comm);
      }
      fn(r, comms);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace tandem::testing
