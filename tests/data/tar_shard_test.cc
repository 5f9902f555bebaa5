#include "data/tar_shard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/data/temp_dir.h"

namespace tandem::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Bytes(size_t n, int seed) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>((i * 131 + seed * 7) % 251);
  return out;
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

struct Entry {
  std::string name;
  std::string data;
};

std::vector<Entry> Entries() {
  // A long path takes a pax header before its ustar one; empty data takes no data block.
  return {{"000000.json", R"({"caption": "a red circle"})"},
          {"000000.0.png", Bytes(700, 1)},
          {"000000.1.png", Bytes(1024, 2)},
          {"000001.json", ""},
          {std::string(120, 'd') + "/000002.json", Bytes(513, 3)}};
}

void WriteTar(const std::string& path, const std::vector<Entry>& entries) {
  absl::StatusOr<TarWriter> writer = TarWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (const Entry& e : entries) ASSERT_TRUE(writer->Add(e.name, e.data).ok());
  EXPECT_EQ(writer->bytes(), 512 * 5 + 512 + 1024 + 1024 + 0 + 1024);
  ASSERT_TRUE(writer->Close().ok());
  EXPECT_FALSE(writer->Add("late.json", "{}").ok());
}

absl::StatusOr<std::vector<TarMember>> WriteAndScan(const std::string& path) {
  WriteTar(path, Entries());
  return ScanTar(path);
}

TEST(TarShard, WrittenMembersScanAndReadBackOneByOne) {
  testing::TempDir dir;
  const std::string path = (dir / "shard.tar");
  const absl::StatusOr<std::vector<TarMember>> members = WriteAndScan(path);
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->size(), 5u);
  EXPECT_EQ((*members)[0].header_offset, 0);
  EXPECT_EQ((*members)[1].header_offset, 1024);  // after one header and one data block
  EXPECT_EQ((*members)[2].header_offset, 2560);  // 700 bytes take two
  const std::vector<Entry> entries = Entries();
  for (size_t i = 0; i < members->size(); ++i) {
    const Entry& entry = entries[i];
    EXPECT_EQ((*members)[i].name, entry.name);
    EXPECT_EQ((*members)[i].size, static_cast<int64_t>(entry.data.size()));
    absl::StatusOr<std::string> data = ReadTarMember(path, (*members)[i]);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(*data, entry.data) << entry.name;
  }
  // Reproducible: the same members give the same bytes.
  const std::string again = (dir / "again.tar");
  WriteTar(again, Entries());
  EXPECT_EQ(FileBytes(path), FileBytes(again));
}

TEST(TarShard, GroupsConsecutiveMembersByKey) {
  std::vector<TarMember> members;
  for (const Entry& e : Entries()) members.push_back({e.name, 0, 0});
  absl::StatusOr<std::vector<TarSample>> samples = GroupTarSamples("s.tar", members);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 3u);
  EXPECT_EQ((*samples)[0].key, "000000");
  EXPECT_THAT((*samples)[0].fields, ElementsAre("json", "0.png", "1.png"));
  EXPECT_EQ((*samples)[2].key, std::string(120, 'd') + "/000002");
  members.push_back({"000000.2.png", 4096, 10});
  EXPECT_THAT(std::string(GroupTarSamples("s.tar", members).status().message()),
              HasSubstr("s.tar: member 000000.2.png at byte 4096 comes back to key 000000 after "
                        "other keys"));
  EXPECT_THAT(std::string(GroupTarSamples("s.tar", {{"README", 0, 3}}).status().message()),
              HasSubstr("s.tar: member README at byte 0 has no field after its key"));
}

TEST(TarShard, TruncatedChangedAndForeignFilesAreDataLossNamingTheByte) {
  testing::TempDir dir;
  const std::string path = (dir / "shard.tar");
  const absl::StatusOr<std::vector<TarMember>> members = WriteAndScan(path);
  ASSERT_TRUE(members.ok()) << members.status();
  // Cut in the middle of the second image's data.
  EXPECT_EQ((*members)[2].header_offset, 2560);
  std::filesystem::resize_file(path, 2560 + 512 + 100);
  absl::StatusOr<std::vector<TarMember>> truncated = ScanTar(path);
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(truncated.status().message()), HasSubstr(path + ": "));
  EXPECT_THAT(std::string(truncated.status().message()), HasSubstr(" at byte "));
  absl::StatusOr<std::string> cut = ReadTarMember(path, (*members)[2]);
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(
      std::string(cut.status().message()),
      HasSubstr("member 000000.1.png (header at byte 2560) is cut short: its 1024 bytes run "
                "past the end of the file (3172 bytes)"));
  // A member looked for where another one is: the shard changed since its scan.
  WriteTar(path, Entries());
  TarMember moved = (*members)[1];
  moved.header_offset = 0;
  EXPECT_THAT(std::string(ReadTarMember(path, moved).status().message()),
              HasSubstr("member 000000.0.png is no longer at byte 0 (the shard changed"));
  const std::string text = (dir / "notes.txt");
  std::ofstream(text) << "not a tar at all\n";
  EXPECT_EQ(ScanTar(text).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ScanTar((dir / "missing.tar")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem::data
