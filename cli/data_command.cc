#include "cli/data_command.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_format.h"
#include "data/shard_inspect.h"
#include "data/shard_manifest.h"
#include "data/shard_pack.h"

namespace tandem::cli {
namespace {

struct PackRequest {
  std::string input;
  std::string out_dir;
  std::string shard_size = "512MB";
  data::PackOptions options;
  std::string output = "text";
};

int Pack(const PackRequest& request) {
  data::PackOptions options = request.options;
  const absl::StatusOr<int64_t> bytes = data::ParseByteSize(request.shard_size);
  if (!bytes.ok()) {
    std::fprintf(stderr, "tandem data pack: --shard-size: %s\n",
                 std::string(bytes.status().message()).c_str());
    return 2;
  }
  options.shard_bytes = *bytes;
  const absl::StatusOr<data::PackResult> result =
      data::PackShards(request.input, request.out_dir, options);
  if (!result.ok()) {
    std::fprintf(stderr, "tandem data pack: %s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  if (request.output == "json") {
    nlohmann::ordered_json j;
    j["pattern"] = result->pattern;
    j["samples"] = result->samples;
    j["images"] = result->images;
    j["shards"] = nlohmann::ordered_json::array();
    for (const data::PackedShard& s : result->shards) {
      j["shards"].push_back({{"file", s.file},
                             {"samples", s.samples},
                             {"bytes", s.bytes},
                             {"crc32", data::FormatCrc32(s.crc32)}});
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  for (const data::PackedShard& s : result->shards) {
    std::printf("%s  %lld samples  %lld bytes  crc32 %08x\n", s.file.c_str(),
                static_cast<long long>(s.samples), static_cast<long long>(s.bytes), s.crc32);
  }
  std::printf("%lld samples, %lld images in %zu shard%s; give data.shards \"%s\" (or \"%s/%s\")\n",
              static_cast<long long>(result->samples), static_cast<long long>(result->images),
              result->shards.size(), result->shards.size() == 1 ? "" : "s", request.out_dir.c_str(),
              request.out_dir.c_str(), result->pattern.c_str());
  return 0;
}

struct InspectRequest {
  std::string shards;
  data::InspectOptions options;
  std::string output = "text";
};

int Inspect(const InspectRequest& request) {
  const absl::StatusOr<data::InspectReport> report =
      data::InspectShards(request.shards, request.options);
  if (!report.ok()) {
    std::fprintf(stderr, "tandem data inspect: %s\n",
                 std::string(report.status().message()).c_str());
    return 1;
  }
  const std::string out =
      request.output == "json" ? data::InspectJson(*report) + "\n" : data::InspectText(*report);
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace

void AddDataCommand(CLI::App& app, int* exit_code) {
  CLI::App* data =
      app.add_subcommand("data", "Prepare and inspect training data: tar shards (pack, inspect)");
  data->require_subcommand(1);
  auto request = std::make_shared<PackRequest>();
  CLI::App* pack = data->add_subcommand(
      "pack",
      "Write a conversation file (LLaVA or ShareGPT) or a caption JSON Lines file as WebDataset "
      "tar shards and OUT_DIR/index.json, for data.shards");
  pack->add_option("input", request->input, "The conversation or caption file")->required();
  pack->add_option("out_dir", request->out_dir, "Where the shards go: a new or empty directory")
      ->required();
  pack->add_option("--shard-size", request->shard_size,
                   "Most bytes a shard holds (B, KB, MB, GB, KiB, MiB, GiB)")
      ->capture_default_str();
  pack->add_option("--prefix", request->options.prefix, "Shard files PREFIX-000000.tar, ...")
      ->capture_default_str();
  pack->add_option("--video-frames", request->options.video_frames,
                   "Frames taken from each video sample (data.video_frames)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  pack->add_option("--output", request->output,
                   "text: a line a shard; json: {\"pattern\", \"samples\", \"images\", \"shards\"}")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  pack->callback([=] { *exit_code = Pack(*request); });

  auto look = std::make_shared<InspectRequest>();
  CLI::App* inspect = data->add_subcommand(
      "inspect",
      "What tar shards hold, read as training reads them: samples, images a sample, image sizes, "
      "text token lengths (a histogram) and the first samples");
  inspect
      ->add_option("shards", look->shards,
                   "A shard, a brace range (\"shards/train-{000000..000009}.tar\") or a directory "
                   "`tandem data pack` wrote")
      ->required();
  inspect->add_option("--first", look->options.first, "Samples shown whole")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  inspect->add_option("--limit", look->options.limit, "Samples read (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  inspect
      ->add_option("--tokenizer", look->options.tokenizer,
                   "A Hugging Face model directory whose tokenizer and chat template count the "
                   "tokens (what llm.pretrained names); default: the word tokenizer a job trained "
                   "from scratch builds from this data")
      ->check(CLI::ExistingDirectory);
  inspect->add_option("--chat-template", look->options.chat_template,
                      "With --tokenizer: chatml, llama3 or tandem instead of its own (as "
                      "llm.chat_template)");
  inspect
      ->add_option("--output", look->output,
                   "text: a summary; json: {\"shards\", \"samples\", \"images\", "
                   "\"images_per_sample\", \"image_sizes\", \"tokens\", \"first\"}")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  inspect->callback([=] { *exit_code = Inspect(*look); });
}

}  // namespace tandem::cli
