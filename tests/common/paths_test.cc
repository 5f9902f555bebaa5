// common/paths.h: IsInside as the file system resolves paths, symlinks and ".." included.
#include "common/paths.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace tandem {
namespace {

namespace fs = std::filesystem;

TEST(IsInside, FollowsDotDotAndSymlinksComponentByComponent) {
  const fs::path root = fs::path(::testing::TempDir()) / ("paths_" + std::to_string(::getpid()));
  fs::create_directories(root / "data" / "images");
  fs::create_directories(root / "secret");
  fs::create_directories(root / "data-other");
  std::ofstream(root / "secret" / "key") << "k";
  fs::create_symlink(root / "secret", root / "data" / "images" / "escape");
  fs::create_symlink(root / "data" / "images", root / "data" / "alias");
  const std::string data = (root / "data").string();

  EXPECT_TRUE(IsInside(data + "/images/a.png", data));
  EXPECT_TRUE(IsInside(data + "/images/not-yet-written.png", data));
  EXPECT_TRUE(IsInside(data, data));
  EXPECT_TRUE(IsInside(data + "/", data));
  EXPECT_TRUE(IsInside(data + "/alias/a.png", data));                  // a link that stays inside
  EXPECT_FALSE(IsInside(data + "/images/../../secret/key", data));     // ".." out
  EXPECT_FALSE(IsInside(data + "/images/escape/key", data));           // a link out
  EXPECT_FALSE(IsInside((root / "secret" / "key").string(), data));    // absolute elsewhere
  EXPECT_FALSE(IsInside((root / "data-other" / "x").string(), data));  // a sibling sharing a prefix
  fs::remove_all(root);
}

}  // namespace
}  // namespace tandem
