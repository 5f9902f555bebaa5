// Tests for engine/safetensors.cc: round trips, the exact bytes of a small file, and rejection of
// malformed files with InvalidArgument naming the file and the tensor.
#include "engine/safetensors.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "zlib.h"

namespace tandem::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat("safetensors_test_", ::getpid(), "_", info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string Slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  static void Spit(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }

  // A file with `header` as its JSON (unpadded, length as given) followed by `data`.
  static std::string FileBytes(std::string_view header, std::string_view data) {
    const uint64_t size = header.size();
    std::string bytes(sizeof(size), '\0');
    std::memcpy(bytes.data(), &size, sizeof(size));
    bytes.append(header);
    bytes.append(data);
    return bytes;
  }

  // Writes FileBytes(header, data) to `name` and expects ReadSafetensors to reject it with
  // InvalidArgument whose message names the file and contains each of `needles`.
  void ExpectInvalid(const std::string& name, const std::string& bytes,
                     const std::vector<std::string>& needles) {
    const std::string path = Path(name);
    Spit(path, bytes);
    absl::StatusOr<NamedTensors> read = ReadSafetensors(path);
    ASSERT_FALSE(read.ok()) << name;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << read.status();
    EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
    for (const std::string& needle : needles) {
      EXPECT_THAT(std::string(read.status().message()), HasSubstr(needle));
    }
  }

  fs::path dir_;
};

// An 8-byte-aligned F32 [2] at [0, 8) for the malformed-file tests.
constexpr std::string_view kEightBytes("\0\0\x80\x3f\0\0\0\xc0", 8);  // 1.0f, -2.0f

TEST_F(SafetensorsTest, RoundTripKeepsNamesOrderDtypesShapesAndValues) {
  at::manual_seed(0);
  const at::Tensor fp32 = at::randn({2, 3});
  const at::Tensor bf16 = at::randn({4}).to(at::kBFloat16);
  const at::Tensor int64 = at::tensor(std::vector<int64_t>{-5, 0, int64_t{1} << 40});
  const at::Tensor fp16 = at::randn({3, 1}).to(at::kHalf);
  const at::Tensor int32 = at::tensor({7, -8}, at::kInt);
  const at::Tensor uint8 = at::tensor({0, 255, 3}, at::kByte);
  const at::Tensor scalar = at::scalar_tensor(2.5, at::kFloat);
  const at::Tensor empty = at::empty({0, 5}, at::kFloat);
  const at::Tensor transposed = at::arange(6, at::kFloat).view({2, 3}).t();  // not contiguous
  const NamedTensors written = {
      {"layer.weight", fp32}, {"z.bf16", bf16}, {"a.int64", int64},
      {"fp16", fp16},         {"int32", int32}, {"uint8", uint8},
      {"scalar", scalar},     {"empty", empty}, {"transposed", transposed}};
  const std::string path = Path("model.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, written, {{"format", "pt"}, {"global_steps", "12"}}).ok());

  absl::StatusOr<NamedTensors> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    const auto& [name, tensor] = (*read)[i];
    EXPECT_EQ(name, written[i].first);
    EXPECT_EQ(tensor.scalar_type(), written[i].second.scalar_type()) << name;
    EXPECT_EQ(tensor.sizes(), written[i].second.sizes()) << name;
    EXPECT_TRUE(tensor.device().is_cpu()) << name;
    EXPECT_TRUE(at::equal(tensor, written[i].second)) << name;
  }

  // The header: length a multiple of 8, metadata as written, offsets back to back.
  const std::string bytes = Slurp(path);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), sizeof(header_size));
  EXPECT_EQ(header_size % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.substr(8, header_size));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["__metadata__"]["global_steps"], "12");
  // One CRC-32 per tensor, by name: zlib's of its bytes.
  const auto checksums =
      nlohmann::json::parse(header["__metadata__"]["tandem.crc32"].get<std::string>());
  ASSERT_EQ(checksums.size(), written.size());
  const at::Tensor first = written[0].second.contiguous();
  const uint32_t first_crc = static_cast<uint32_t>(
      crc32_z(0, static_cast<const Bytef*>(first.data_ptr()), first.nbytes()));
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", first_crc);
  EXPECT_EQ(checksums[written[0].first], hex);
  EXPECT_EQ(header["z.bf16"]["dtype"], "BF16");
  EXPECT_EQ(header["z.bf16"]["data_offsets"], nlohmann::json({24, 32}));  // after 6 floats
  EXPECT_EQ(header["scalar"]["shape"], nlohmann::json::array());
  EXPECT_EQ(bytes.size(), 8 + header_size + header["transposed"]["data_offsets"][1].get<size_t>());

  // The header alone, and one tensor at a time from it.
  absl::StatusOr<SafetensorsHeader> parsed = ReadSafetensorsHeader(path);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->metadata.at("global_steps"), "12");
  ASSERT_EQ(parsed->tensors.size(), written.size());
  for (const auto& [name, tensor] : written) {
    const SafetensorsEntry* entry = parsed->Find(name);
    ASSERT_NE(entry, nullptr) << name;
    EXPECT_EQ(entry->numel(), tensor.numel()) << name;
    absl::StatusOr<at::Tensor> one = ReadSafetensor(*parsed, name);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_TRUE(at::equal(*one, tensor)) << name;
  }
  EXPECT_EQ(ReadSafetensor(*parsed, "absent").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, WritesTheExactBytesOfTheFormat) {
  const NamedTensors tensors = {{"a", at::tensor({1.0f, -2.0f})},
                                {"b", at::scalar_tensor(7, at::kLong)}};
  const std::string path = Path("tiny.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"k", "v"}}).ok());

  // The JSON is 189 bytes; padded with 3 spaces to 192 = 0xc0 so the data starts at 200 = 8 * 25.
  // The checksums are Python's zlib.crc32 of struct.pack('<ff', 1, -2) and of struct.pack('<q', 7).
  const std::string json =
      R"({"__metadata__":{"k":"v","tandem.crc32":"{\"a\":\"c3872656\",\"b\":\"6fe7d670\"}"},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})";
  ASSERT_EQ(json.size(), 189u);
  const std::string expected =
      std::string("\xc0\0\0\0\0\0\0\0", 8) +  // header length 192, u64 little-endian
      json + "   " +                          // 3 spaces of padding
      std::string("\0\0\x80\x3f", 4) +        // 1.0f  = 0x3f800000
      std::string("\0\0\0\xc0", 4) +          // -2.0f = 0xc0000000
      std::string("\x07\0\0\0\0\0\0\0", 8);   // 7 as int64
  EXPECT_EQ(Slurp(path), expected);
}

TEST_F(SafetensorsTest, ReadsAHandBuiltFileInDataOrder) {
  // "second" is listed first in the JSON but its data comes second; an empty tensor sits at 8.
  const std::string header = R"({"second":{"dtype":"U8","shape":[2],"data_offsets":[8,10]},)"
                             R"("first":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("none":{"dtype":"BF16","shape":[0],"data_offsets":[10,10]}}   )";
  const std::string path = Path("hand.safetensors");
  Spit(path, FileBytes(header, std::string(kEightBytes) + "\x05\x06"));
  absl::StatusOr<NamedTensors> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 3u);
  EXPECT_EQ((*read)[0].first, "first");
  EXPECT_TRUE(at::equal((*read)[0].second, at::tensor({1.0f, -2.0f})));
  EXPECT_EQ((*read)[1].first, "second");
  EXPECT_TRUE(at::equal((*read)[1].second, at::tensor({5, 6}, at::kByte)));
  EXPECT_EQ((*read)[2].first, "none");
  EXPECT_EQ((*read)[2].second.scalar_type(), at::kBFloat16);
  EXPECT_EQ((*read)[2].second.numel(), 0);
}

TEST_F(SafetensorsTest, TruncatedHeaderLengthIsInvalid) {
  ExpectInvalid("short.safetensors", std::string("\x10\0\0", 3), {"8-byte header length"});
  ExpectInvalid("empty.safetensors", "", {"8-byte header length"});
}

TEST_F(SafetensorsTest, HeaderLengthBeyondTheFileIsInvalid) {
  std::string bytes = FileBytes("{}      ", "");
  bytes[0] = 9;  // claims 9 header bytes, 8 follow
  ExpectInvalid("long.safetensors", bytes, {"header length 9"});
}

TEST_F(SafetensorsTest, HeaderOver100MBIsRefusedBeforeItIsRead) {
  std::string bytes = FileBytes("{}      ", "");
  const uint64_t claimed = 100'000'001;
  std::memcpy(bytes.data(), &claimed, sizeof claimed);
  bytes.resize(8 + claimed, ' ');  // the whole claimed header is really there
  ExpectInvalid("huge_header.safetensors", bytes,
                {"header length 100000001 is over the limit of 100000000 bytes"});
}

TEST_F(SafetensorsTest, DeepNestingIsRefusedAndNothingIsEchoedAtLength) {
  std::string deep = R"({"a": )" + std::string(1000, '[') + std::string(1000, ']') + "}";
  deep.append((8 - deep.size() % 8) % 8, ' ');
  ExpectInvalid("deep.safetensors", FileBytes(deep, ""), {"header nests more than 4 levels deep"});

  std::string wide = R"({"a": {"dtype": "U8", "shape": [)";
  for (int i = 0; i < 65; ++i) wide += "1,";
  wide += R"(1], "data_offsets": [0, 1]}})";
  wide.append((8 - wide.size() % 8) % 8, ' ');
  ExpectInvalid("wide.safetensors", FileBytes(wide, "x"),
                {"header has an array of more than 64 values"});

  const std::string long_name(5000, 'n');
  std::string sevens;
  for (int i = 0; i < 1000; ++i) sevens += "7,";
  const std::string header = "{\"" + long_name + "\": [" + sevens + "7]}";
  const std::string path = Path("echo.safetensors");
  Spit(path, FileBytes(header + std::string((8 - header.size() % 8) % 8, ' '), ""));
  absl::StatusOr<NamedTensors> read = ReadSafetensors(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("entry is not a JSON object but an array"));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("... (5000 characters)"));
  EXPECT_LT(read.status().message().size(), 400u) << read.status();
}

TEST_F(SafetensorsTest, AFlippedBitIsDataLossNamingTheTensor) {
  const std::string path = Path("rot.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(path, {{"a", at::arange(64, at::kFloat)}, {"b", at::ones({16}, at::kFloat)}})
          .ok());
  std::string bytes = Slurp(path);
  bytes[bytes.size() - 64 - 3] ^= 0x10;  // inside "a", the first 256 of the 320 data bytes
  Spit(path, bytes);
  absl::StatusOr<NamedTensors> whole = ReadSafetensors(path);
  EXPECT_EQ(whole.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(whole.status().message()),
              HasSubstr("tensor 'a': checksum mismatch (stored crc32 "));
  EXPECT_THAT(std::string(whole.status().message()), HasSubstr("the file is damaged"));
  absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(path);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_TRUE(ReadSafetensor(*header, "b").ok());
  EXPECT_EQ(ReadSafetensor(*header, "a").status().code(), absl::StatusCode::kDataLoss);
}

// A header with `checksums` as its "tandem.crc32" and one tensor "a" of the byte "x".
std::string OneByteFile(const std::string& checksums) {
  const std::string header = R"({"__metadata__":{"tandem.crc32":)" +
                             nlohmann::json(checksums).dump() +
                             R"(},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  const uint64_t size = header.size() + (8 - header.size() % 8) % 8;
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &size, 8);
  return bytes + header + std::string(size - header.size(), ' ') + "x";
}

TEST_F(SafetensorsTest, ChecksumsAreByNameAndAMapOfAnotherLayoutIsIgnored) {
  // zlib.crc32(b"x") = 8cdc1683.
  Spit(Path("right.safetensors"), OneByteFile(R"({"a":"8cdc1683"})"));
  EXPECT_TRUE(ReadSafetensors(Path("right.safetensors")).ok());
  Spit(Path("wrong.safetensors"), OneByteFile(R"({"a":"00000000"})"));
  EXPECT_EQ(ReadSafetensors(Path("wrong.safetensors")).status().code(),
            absl::StatusCode::kDataLoss);
  // A map naming a tensor the file does not hold: the file was re-saved by another tool, which
  // kept the metadata; the checksums are not trusted, and the tensors read.
  Spit(Path("other.safetensors"), OneByteFile(R"({"a":"00000000","gone":"00000000"})"));
  EXPECT_TRUE(ReadSafetensors(Path("other.safetensors")).ok());
  ExpectInvalid("hex.safetensors", OneByteFile(R"({"a":"xyz"})"),
                {"\"tandem.crc32\" for 'a' is not 8 hex digits"});
  ExpectInvalid("list.safetensors", OneByteFile("8cdc1683"),
                {"\"tandem.crc32\" is not a JSON object of tensor names to checksums"});
}

TEST_F(SafetensorsTest, BadJsonIsInvalid) {
  ExpectInvalid("json.safetensors", FileBytes(R"({"a": {"dtype": )", ""), {"not valid JSON"});
  ExpectInvalid("array.safetensors", FileBytes("[1, 2]  ", ""), {"not a JSON object"});
  ExpectInvalid("entry.safetensors", FileBytes(R"({"a": 3})", ""), {"tensor 'a'"});
  ExpectInvalid("metadata.safetensors", FileBytes(R"({"__metadata__": {"k": 1}})", ""),
                {"__metadata__"});
}

TEST_F(SafetensorsTest, OffsetsOutOfRangeAreInvalid) {
  ExpectInvalid(
      "range.safetensors",
      FileBytes(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", kEightBytes),
      {"tensor 'w'", "out of range"});
  ExpectInvalid("reversed.safetensors",
                FileBytes(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", kEightBytes),
                {"tensor 'w'", "out of range"});
  ExpectInvalid(
      "negative.safetensors",
      FileBytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", kEightBytes),
      {"tensor 'w'", "data_offsets"});
}

TEST_F(SafetensorsTest, ShapeThatDoesNotMatchTheOffsetsIsInvalid) {
  ExpectInvalid("shape.safetensors",
                FileBytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", kEightBytes),
                {"tensor 'w'", "needs 12 bytes"});
  ExpectInvalid("huge.safetensors",
                FileBytes(R"({"w":{"dtype":"I64","shape":[4294967296,4294967296,16],)"
                          R"("data_offsets":[0,8]}})",
                          kEightBytes),
                {"tensor 'w'", "needs more than 2^64 bytes"});
}

TEST_F(SafetensorsTest, OverlappingTensorsAreInvalid) {
  ExpectInvalid("overlap.safetensors",
                FileBytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                          kEightBytes),
                {"tensor 'b'", "overlap", "'a'"});
}

TEST_F(SafetensorsTest, UnknownDtypeIsInvalid) {
  ExpectInvalid("dtype.safetensors",
                FileBytes(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", kEightBytes),
                {"tensor 'w'", "\"F64\""});
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  const std::string path = Path("absent.safetensors");
  absl::StatusOr<NamedTensors> read = ReadSafetensors(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound) << read.status();
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
}

TEST_F(SafetensorsTest, WriteRejectsBadNamesAndDtypesAndLeavesNoFile) {
  const std::string path = Path("bad.safetensors");
  const at::Tensor t = at::zeros({2});
  struct Case {
    NamedTensors tensors;
    std::string needle;
  };
  const Case cases[] = {
      {{{"", t}}, "empty name"},
      {{{"x", t}, {"x", t}}, "tensor 'x': duplicate name"},
      {{{"__metadata__", t}}, "reserved"},
      {{{"d", at::zeros({2}, at::kDouble)}}, "tensor 'd': dtype Double is not supported"},
      {{{"u", at::Tensor()}}, "tensor 'u': undefined"},
  };
  for (const Case& c : cases) {
    absl::Status status = WriteSafetensors(path, c.tensors);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(path));
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.needle));
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(SafetensorsTest, EmptyListWritesAnEmptyObjectHeader) {
  const std::string path = Path("none.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {}).ok());
  EXPECT_EQ(Slurp(path), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  absl::StatusOr<NamedTensors> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->empty());
}

}  // namespace
}  // namespace tandem::engine
