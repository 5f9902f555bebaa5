// Writes the mixed conversation data of examples/mixed_vlm.json: shapes images of three sizes and
// LLaVA-format conversation files (<out>/train.json, <out>/eval.json, images in <out>/images/)
// that mix, as LLaVA-OneVision's data does, text-only samples with samples of one and two images.
// Every turn's answer trains; evaluation generates the last, which the first never gives away:
//   10% text only    "What number comes after four?"                               five
//   50% one image    32 x 32: "Describe the shape."                      a small red circle
//                    then "Where is the shape?"                         top left | center | ...
//   25% one image    32 x 64 or 64 x 32, the shape in one half (LLaVA-NeXT tiles it): the same
//                    questions, "Where is the shape?"               left | right | top | bottom
//   15% two images   "Describe the first image." (or second)      a large blue cross at the top
//                    then "What colour is the shape in the second image?" (or first)      green
// The descriptions teach a tower trained from scratch to see: with one-word answers alone its
// gradients fade before it learns anything (docs/running.md). Training and evaluation images
// never coincide (the shapes dataset's splits, data/shapes.h). Deterministic: the same flags write
// the same bytes.
//
//   tandem-make-mixed-example --out runs/mixed-data [--train 6000] [--eval 300] [--seed 1]
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "data/image.h"
#include "data/shapes.h"
#include "nlohmann/json.hpp"

namespace tandem::data {
namespace {

constexpr int64_t kSide = 32;
constexpr std::array<const char*, 11> kNumbers = {"zero", "one",   "two",   "three", "four", "five",
                                                  "six",  "seven", "eight", "nine",  "ten"};

struct Options {
  std::string out;
  int64_t train = 6000;
  int64_t eval = 300;
  uint64_t seed = 1;
};

// A shapes image put into one half of a canvas twice its size one way, the other half its
// background: the pixel at the centre of a grid cell the shape does not occupy (data/shapes.h).
Image InHalf(const Image& square, const ShapeAttributes& attributes, bool wide, bool second) {
  const int cell = attributes.place == Place::kTopLeft ? 8 : 0;  // bottom right, else top left
  const int64_t y = static_cast<int64_t>((0.2 + 0.3 * (cell / 3)) * kSide);
  const int64_t x = static_cast<int64_t>((0.2 + 0.3 * (cell % 3)) * kSide);
  Image out;
  out.height = wide ? kSide : 2 * kSide;
  out.width = wide ? 2 * kSide : kSide;
  out.pixels.resize(static_cast<size_t>(3 * out.height * out.width));
  const int64_t top = !wide && second ? kSide : 0, left = wide && second ? kSide : 0;
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t i = 0; i < out.height; ++i) {
      for (int64_t j = 0; j < out.width; ++j) {
        const bool inside = i >= top && i < top + kSide && j >= left && j < left + kSide;
        out.at(c, i, j) = inside ? square.at(c, i - top, j - left) : square.at(c, y, x);
      }
    }
  }
  return out;
}

// "a small red circle": the shape without its place.
std::string Described(const ShapeAttributes& a) {
  return absl::StrCat("a ", std::string(SizeName(a.size)), " ", std::string(ColourName(a.colour)),
                      " ", std::string(ShapeName(a.shape)));
}

nlohmann::json Turn(std::string_view from, const std::string& value) {
  return {{"from", from}, {"value", value}};
}

class Writer {
 public:
  Writer(const Options& options, Split split, std::string name)
      : options_(options),
        shapes_(options.seed, kSide, split, 0),
        name_(std::move(name)),
        random_(options.seed * 2 + (split == Split::kTrain ? 0 : 1)) {}

  absl::Status Write(int64_t samples) {
    nlohmann::json all = nlohmann::json::array();
    for (int64_t i = 0; i < samples; ++i) {
      ASSIGN_OR_RETURN(nlohmann::json sample, Sample(i));
      all.push_back(std::move(sample));
    }
    return WriteFileAtomically((std::filesystem::path(options_.out) / (name_ + ".json")).string(),
                               all.dump(1) + "\n");
  }

 private:
  uint64_t Draw(uint64_t n) { return random_() % n; }

  // The next shapes image, written as images/<name>_<n>.png, its attributes in `attributes`: the
  // square (kind 0), or put in one half of a wide (1) or tall (-1) one.
  absl::StatusOr<std::string> NextImage(ShapeAttributes* attributes, int kind = 0) {
    const int64_t n = next_++;
    const Example example = shapes_.Render(n);
    *attributes = shapes_.Attributes(n);
    const std::string file = absl::StrCat("images/", name_, "_", n, ".png");
    const data::Image image =
        kind == 0 ? example.image : InHalf(example.image, *attributes, kind > 0, second_half_);
    RETURN_IF_ERROR(WritePng(image, (std::filesystem::path(options_.out) / file).string()));
    return file;
  }

  absl::StatusOr<nlohmann::json> Sample(int64_t index) {
    nlohmann::json sample = {{"id", absl::StrCat(name_, "-", index)}};
    const uint64_t kind = Draw(100);
    std::vector<std::string> turns;  // human, gpt, human, gpt, ...
    ShapeAttributes a, b;
    if (kind < 10) {
      const uint64_t n = 1 + Draw(9);
      turns = {absl::StrCat("What number comes after ", kNumbers[n], "?"), kNumbers[n + 1]};
    } else if (kind < 85) {
      // Square (32 x 32), or wide or tall with the shape in one half (LLaVA-NeXT tiles it).
      const int frame = kind < 60 ? 0 : Draw(2) == 0 ? 1 : -1;
      second_half_ = Draw(2) == 1;
      ASSIGN_OR_RETURN(sample["image"], NextImage(&a, frame));
      turns = {"<image>\nDescribe the shape.", Described(a), "Where is the shape?",
               frame == 0   ? std::string(PlaceName(a.place))
               : frame == 1 ? (second_half_ ? "right" : "left")
                            : (second_half_ ? "bottom" : "top")};
    } else {
      ASSIGN_OR_RETURN(const std::string first, NextImage(&a));
      ASSIGN_OR_RETURN(const std::string second, NextImage(&b));
      sample["image"] = {first, second};
      const bool described_first = Draw(2) == 0;
      turns = {absl::StrCat("<image>\n<image>\nDescribe the ", described_first ? "first" : "second",
                            " image."),
               Caption(described_first ? a : b),
               absl::StrCat("What colour is the shape in the ",
                            described_first ? "second" : "first", " image?"),
               std::string(ColourName(described_first ? b.colour : a.colour))};
    }
    sample["conversations"] = nlohmann::json::array();
    for (size_t t = 0; t < turns.size(); ++t)
      sample["conversations"].push_back(Turn(t % 2 == 0 ? "human" : "gpt", turns[t]));
    return sample;
  }

  const Options& options_;
  ShapesDataset shapes_;
  std::string name_;
  std::mt19937_64 random_;  // the same numbers from the same seed with any standard library
  int64_t next_ = 0;
  bool second_half_ = false;
};

absl::Status MakeMixedExample(const Options& options) {
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(options.out) / "images", error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", options.out, "/images: ", error.message()));
  }
  RETURN_IF_ERROR(Writer(options, Split::kTrain, "train").Write(options.train));
  return Writer(options, Split::kEval, "eval").Write(options.eval);
}

}  // namespace
}  // namespace tandem::data

int main(int argc, char** argv) {
  tandem::data::Options options;
  CLI::App app(
      "Writes mixed conversation data: text-only, one-image (of three sizes) and two-image "
      "questions about shapes images, in LLaVA's format.");
  app.add_option("--out", options.out, "output folder (gets images/, train.json, eval.json)")
      ->required();
  app.add_option("--seed", options.seed, "shapes dataset and question seed");
  app.add_option("--train", options.train, "samples in train.json")->check(CLI::Range(1, 1000000));
  app.add_option("--eval", options.eval, "samples in eval.json")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  const absl::Status status = tandem::data::MakeMixedExample(options);
  if (!status.ok()) {
    std::fprintf(stderr, "tandem-make-mixed-example: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
