// Tests for common/atomic_file.cc: round trips, replacement, and failures that name the path,
// leave no temp file behind and leave the existing file untouched.
#include "common/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A fresh directory under the test's temp dir, removed at the end of the test.
class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat("atomic_file_test_", ::getpid(), "_", info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The temp file name WriteFileAtomically uses for `path` in this process.
  static std::string TempFor(const fs::path& path) {
    return absl::StrCat(path.string(), ".tmp.", ::getpid());
  }

  // The names in `dir_`, sorted.
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

TEST_F(AtomicFileTest, WritesAndReadsBack) {
  const std::string path = dir_ / "data.bin";
  const std::string contents("binary\0data\n\xff", 13);
  ASSERT_TRUE(WriteFileAtomically(path, contents).ok());
  absl::StatusOr<std::string> read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, contents);
  EXPECT_EQ(Entries(), std::vector<std::string>{"data.bin"});  // no temp file left
}

TEST_F(AtomicFileTest, EmptyAndLargeContentsRoundTrip) {
  const std::string empty_path = dir_ / "empty";
  ASSERT_TRUE(WriteFileAtomically(empty_path, "").ok());
  absl::StatusOr<std::string> empty = ReadFile(empty_path);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "");

  std::string large(3 * (1 << 20) + 17, '\0');
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 31 + 7);
  const std::string large_path = dir_ / "large";
  ASSERT_TRUE(WriteFileAtomically(large_path, large).ok());
  absl::StatusOr<std::string> read = ReadFile(large_path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, large);
}

TEST_F(AtomicFileTest, OverwriteReplacesTheWholeFile) {
  const std::string path = dir_ / "config.json";
  ASSERT_TRUE(WriteFileAtomically(path, "a much longer first version").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "short").ok());
  absl::StatusOr<std::string> read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "short");
  EXPECT_EQ(Entries(), std::vector<std::string>{"config.json"});
}

TEST_F(AtomicFileTest, RelativePathWritesInTheWorkingDirectory) {
  const fs::path previous = fs::current_path();
  fs::current_path(dir_);
  absl::Status status = WriteFileAtomically("relative.txt", "here");
  fs::current_path(previous);
  ASSERT_TRUE(status.ok()) << status;
  absl::StatusOr<std::string> read = ReadFile(dir_ / "relative.txt");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "here");
}

TEST_F(AtomicFileTest, MissingDirectoryIsNotFoundNamingThePathAndLeavesNoTempFile) {
  const fs::path missing = dir_ / "missing";
  const std::string path = missing / "file.txt";
  absl::Status status = WriteFileAtomically(path, "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
  EXPECT_THAT(std::string(status.message()), HasSubstr("open"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("No such file or directory"));
  EXPECT_FALSE(fs::exists(missing));
  EXPECT_TRUE(Entries().empty());
}

TEST_F(AtomicFileTest, TargetThatIsADirectoryFailsAndLeavesItUnchanged) {
  const fs::path target = dir_ / "target";
  fs::create_directories(target);
  std::ofstream(target / "inside.txt") << "keep";
  absl::Status status = WriteFileAtomically(target, "new contents");
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(target.string()));
  EXPECT_THAT(std::string(status.message()), HasSubstr("rename"));
  EXPECT_TRUE(fs::is_directory(target));
  absl::StatusOr<std::string> inside = ReadFile(target / "inside.txt");
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(*inside, "keep");
  EXPECT_EQ(Entries(), std::vector<std::string>{"target"});  // the temp file was removed
}

TEST_F(AtomicFileTest, ExistingFileIsUnchangedWhenTheTempFileCannotBeCreated) {
  const fs::path path = dir_ / "state.json";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  // A directory squatting on the temp name makes open() fail before anything is written.
  fs::create_directories(TempFor(path));
  absl::Status status = WriteFileAtomically(path, "new");
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(path.string()));
  absl::StatusOr<std::string> read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "old");
  EXPECT_TRUE(fs::is_directory(TempFor(path)));  // not ours: left alone
}

TEST_F(AtomicFileTest, ReadMissingFileIsNotFoundNamingThePath) {
  const std::string path = dir_ / "absent";
  absl::StatusOr<std::string> read = ReadFile(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound) << read.status();
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
}

TEST_F(AtomicFileTest, ReadDirectoryFailsNamingThePath) {
  absl::StatusOr<std::string> read = ReadFile(dir_);
  ASSERT_FALSE(read.ok());
  // read() fails with EISDIR.
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition) << read.status();
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(dir_.string()));
}

TEST_F(AtomicFileTest, SyncDirectory) {
  EXPECT_TRUE(SyncDirectory(dir_).ok());
  absl::Status missing = SyncDirectory(dir_ / "missing");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_THAT(std::string(missing.message()), HasSubstr((dir_ / "missing").string()));
}

// A path a user names is read only when it is a regular file within the bound: a device would block
// (/dev/ptmx) or grow without end (/dev/zero), a FIFO would wait for a writer at open. None of
// them is read, and no error shows file contents.
TEST_F(AtomicFileTest, ReadUserFileReadsOnlyBoundedRegularFiles) {
  const std::string file = (dir_ / "data.jsonl").string();
  ASSERT_TRUE(WriteFileAtomically(file, "0123456789").ok());
  EXPECT_EQ(ReadUserFile(file).value(), "0123456789");
  EXPECT_EQ(ReadUserFile(file, 10).value(), "0123456789");
  absl::Status status = ReadUserFile(file, 9).status();
  EXPECT_EQ(status.message(), file + ": 10 bytes, more than the 9 this reader takes");
  EXPECT_TRUE(CheckUserFile(file).ok());

  status = ReadUserFile("/dev/zero").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "/dev/zero: a character device, not a regular file");
  EXPECT_EQ(ReadUserFile("/dev/ptmx").status().message(),
            "/dev/ptmx: a character device, not a regular file");
  EXPECT_EQ(ReadUserFile(dir_.string()).status().message(),
            dir_.string() + ": a directory, not a regular file");
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(ReadUserFile(fifo).status().message(), fifo + ": a FIFO, not a regular file");
  EXPECT_EQ(ReadUserFile((dir_ / "missing").string()).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem
