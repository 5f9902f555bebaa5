#include "data/shard_inspect.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "data/shard_dataset.h"
#include "data/text_codec.h"
#include "tokenizer/hf_tokenizer.h"

namespace tandem::data {
namespace {

using nlohmann::ordered_json;

absl::Status Prefixed(const std::string& prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}

// One image token an image, taken back out of the count.
absl::StatusOr<TextCodec> OpenCodec(const ShardDataset& dataset, const InspectOptions& options) {
  if (options.tokenizer.empty())
    return TextCodec::WordsAtMarks(Tokenizer::FromCounts(dataset.VocabularyCounts()), 1);
  absl::StatusOr<tokenizer::HfTokenizer> tokenizer =
      tokenizer::HfTokenizer::Load(options.tokenizer);
  if (!tokenizer.ok()) return Prefixed("--tokenizer", tokenizer.status());
  tokenizer->AddSpecialToken("<image>");
  absl::StatusOr<tokenizer::ChatTemplate> chat =
      tokenizer::ChatTemplate::For(options.chat_template, *tokenizer);
  if (!chat.ok()) return Prefixed("--chat-template", chat.status());
  absl::StatusOr<TextCodec> codec = TextCodec::Hf(*std::move(tokenizer), *std::move(chat), 1);
  if (!codec.ok()) return Prefixed("--tokenizer", codec.status());
  return codec;
}

int64_t Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(rank, sorted.size() - 1)];
}

}  // namespace

absl::StatusOr<InspectReport> InspectShards(const std::string& shards,
                                            const InspectOptions& options) {
  ShardDataset::Options read;
  read.max_images_per_sample = options.max_images;
  read.shuffle_buffer = 1;  // read in order: a table at a time
  ASSIGN_OR_RETURN(std::unique_ptr<ShardDataset> dataset,
                   ShardDataset::Open({shards}, /*image_size=*/1, nullptr, read));
  ASSIGN_OR_RETURN(const TextCodec codec, OpenCodec(*dataset, options));
  InspectReport report;
  report.shards = static_cast<int64_t>(dataset->ShardSizes().size());
  report.samples = dataset->size();
  report.read = options.limit > 0 ? std::min(options.limit, report.samples) : report.samples;
  report.tokenizer = options.tokenizer.empty() ? "words" : options.tokenizer;
  for (int64_t i = 0; i < report.read; ++i) {
    RETURN_IF_ERROR(dataset->Check(i));
    const int64_t count = dataset->ImageCount(i);
    std::vector<Resolution> sizes;
    for (int64_t k = 0; k < count; ++k) {
      ASSIGN_OR_RETURN(const Resolution size, dataset->ImageSize(i, k));
      sizes.push_back(size);
      ++report.image_sizes[{size.height, size.width}];
    }
    report.images += count;
    ++report.images_per_sample[count];
    const std::vector<tokenizer::ChatMessage> messages = dataset->Messages(i);
    ASSIGN_OR_RETURN(const EncodedConversation encoded,
                     codec.Encode(messages, dataset->Describe(i), sizes));
    const int64_t tokens = static_cast<int64_t>(encoded.ids.size()) - count * codec.image_tokens();
    report.tokens.push_back(tokens);
    if (i < options.first) report.first.push_back({dataset->Describe(i), sizes, tokens, messages});
  }
  std::sort(report.tokens.begin(), report.tokens.end());
  if (!report.tokens.empty()) {
    std::vector<int64_t> edges = {0, 8};
    while (edges.back() <= report.tokens.back()) edges.push_back(edges.back() * 2);
    for (size_t b = 0; b + 1 < edges.size(); ++b) {
      const auto from = std::lower_bound(report.tokens.begin(), report.tokens.end(), edges[b]);
      const auto to = std::lower_bound(report.tokens.begin(), report.tokens.end(), edges[b + 1]);
      report.histogram.emplace_back(edges[b], to - from);
    }
  }
  return report;
}

std::string InspectJson(const InspectReport& report) {
  ordered_json j;
  j["shards"] = report.shards;
  j["samples"] = report.samples;
  j["read"] = report.read;
  j["images"] = report.images;
  j["images_per_sample"] = ordered_json::object();
  for (const auto& [images, samples] : report.images_per_sample)
    j["images_per_sample"][std::to_string(images)] = samples;
  j["image_sizes"] = ordered_json::array();
  for (const auto& [size, images] : report.image_sizes)
    j["image_sizes"].push_back(
        {{"height", size.first}, {"width", size.second}, {"images", images}});
  const std::vector<int64_t>& t = report.tokens;
  ordered_json tokens = {{"tokenizer", report.tokenizer},     {"min", t.empty() ? 0 : t.front()},
                         {"p50", Percentile(t, 0.5)},         {"p90", Percentile(t, 0.9)},
                         {"p99", Percentile(t, 0.99)},        {"max", t.empty() ? 0 : t.back()},
                         {"histogram", ordered_json::array()}};
  for (size_t b = 0; b < report.histogram.size(); ++b) {
    const int64_t to = b + 1 < report.histogram.size() ? report.histogram[b + 1].first
                                                       : report.histogram[b].first * 2;
    tokens["histogram"].push_back(
        {{"from", report.histogram[b].first}, {"to", to}, {"samples", report.histogram[b].second}});
  }
  j["tokens"] = tokens;
  j["first"] = ordered_json::array();
  for (const InspectedSample& s : report.first) {
    ordered_json sample = {{"source", s.source}, {"tokens", s.tokens}};
    sample["images"] = ordered_json::array();
    for (const Resolution& r : s.images)
      sample["images"].push_back({{"height", r.height}, {"width", r.width}});
    sample["messages"] = ordered_json::array();
    for (const tokenizer::ChatMessage& m : s.messages)
      sample["messages"].push_back({{"role", m.role}, {"content", m.content}});
    j["first"].push_back(std::move(sample));
  }
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

std::string InspectText(const InspectReport& report) {
  std::string out = absl::StrFormat("%d samples in %d shards", report.samples, report.shards);
  if (report.read < report.samples)
    absl::StrAppend(&out, absl::StrFormat(" (the first %d read)", report.read));
  absl::StrAppend(&out, absl::StrFormat("; %d images\nimages a sample:", report.images));
  for (const auto& [images, samples] : report.images_per_sample)
    absl::StrAppend(&out, absl::StrFormat(" %d: %d", images, samples));
  absl::StrAppend(&out, "\nimage sizes (height x width):");
  std::vector<std::pair<int64_t, std::pair<int64_t, int64_t>>> sizes;
  for (const auto& [size, images] : report.image_sizes) sizes.emplace_back(images, size);
  std::stable_sort(sizes.begin(), sizes.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; k < sizes.size() && k < 8; ++k) {
    absl::StrAppend(&out, absl::StrFormat(" %dx%d: %d", sizes[k].second.first,
                                          sizes[k].second.second, sizes[k].first));
  }
  if (sizes.size() > 8)
    absl::StrAppend(&out, absl::StrFormat(" (%d more sizes)", sizes.size() - 8));
  const std::vector<int64_t>& t = report.tokens;
  absl::StrAppend(
      &out, absl::StrFormat("\ntext tokens (%s): min %d, median %d, p90 %d, p99 %d, max %d\n",
                            report.tokenizer, t.empty() ? 0 : t.front(), Percentile(t, 0.5),
                            Percentile(t, 0.9), Percentile(t, 0.99), t.empty() ? 0 : t.back()));
  int64_t most = 1;
  for (const auto& [from, samples] : report.histogram) most = std::max(most, samples);
  for (size_t b = 0; b < report.histogram.size(); ++b) {
    const auto [from, samples] = report.histogram[b];
    const int64_t to = b + 1 < report.histogram.size() ? report.histogram[b + 1].first : from * 2;
    absl::StrAppend(&out, absl::StrFormat("  [%6d, %6d) %8d %s\n", from, to, samples,
                                          std::string(samples * 40 / most, '#')));
  }
  for (const InspectedSample& s : report.first) {
    absl::StrAppend(&out, "\n", s.source, ": ", s.images.size(),
                    s.images.size() == 1 ? " image" : " images");
    for (const Resolution& r : s.images) absl::StrAppend(&out, " ", r.height, "x", r.width);
    absl::StrAppend(&out, ", ", s.tokens, " text tokens\n");
    for (const tokenizer::ChatMessage& m : s.messages)
      absl::StrAppend(&out, "  ", m.role, ": ", m.content, "\n");
  }
  return out;
}

}  // namespace tandem::data
