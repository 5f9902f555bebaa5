// Writes the small jsonl example dataset of examples/jsonl/: 12 shapes images as PNG in
// <out>/images/, the first 8 listed in <out>/train.jsonl and the last 4 in <out>/eval.jsonl, with
// paths relative to the jsonl files. Deterministic: the same flags write the same bytes.
//
//   tandem-make-example-images --out examples/jsonl
#include <cstdio>
#include <filesystem>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "data/image.h"
#include "data/shapes.h"
#include "nlohmann/json.hpp"

namespace tandem::data {
namespace {

struct Options {
  std::string out;
  int64_t image_size = 32;
  uint64_t seed = 7;
  int64_t train = 8;
  int64_t eval = 4;
};

absl::Status MakeExampleImages(const Options& options) {
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(options.out) / "images", error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", options.out, "/images: ", error.message()));
  }
  const ShapesDataset shapes(options.seed, options.image_size, Split::kTrain,
                             options.train + options.eval);
  std::string train_lines, eval_lines;
  for (int64_t i = 0; i < shapes.size(); ++i) {
    const Example example = shapes.Render(i);
    const std::string image = absl::StrFormat("images/shape_%02d.png", i);
    RETURN_IF_ERROR(WritePng(example.image, (std::filesystem::path(options.out) / image).string()));
    const nlohmann::json line = {{"image", image}, {"text", example.text}};
    absl::StrAppend(i < options.train ? &train_lines : &eval_lines, line.dump(), "\n");
  }
  RETURN_IF_ERROR(WriteFileAtomically(options.out + "/train.jsonl", train_lines));
  return WriteFileAtomically(options.out + "/eval.jsonl", eval_lines);
}

}  // namespace
}  // namespace tandem::data

int main(int argc, char** argv) {
  tandem::data::Options options;
  CLI::App app("Writes a small jsonl image-caption dataset of shapes images.");
  app.add_option("--out", options.out, "output folder (gets images/, train.jsonl, eval.jsonl)")
      ->required();
  app.add_option("--image-size", options.image_size, "image side in pixels")
      ->check(CLI::Range(8, 1024));
  app.add_option("--seed", options.seed, "shapes dataset seed");
  app.add_option("--train", options.train, "samples in train.jsonl")->check(CLI::Range(1, 1000));
  app.add_option("--eval", options.eval, "samples in eval.jsonl")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  const absl::Status status = tandem::data::MakeExampleImages(options);
  if (!status.ok()) {
    std::fprintf(stderr, "tandem-make-example-images: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
