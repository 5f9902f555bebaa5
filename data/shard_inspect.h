// `tandem data inspect`: what a sharded data set holds, read the way training reads it
// (data/shard_dataset.h), so that a user can choose data.max_text_tokens, data.pack_tokens and
// data.max_images_per_sample before a run: sample and image counts, images per sample, image sizes
// on file, text token lengths (a histogram) and the first samples.
//
// Token lengths count a sample's text tokens with their special tokens and without its images'
// positions, as data.max_text_tokens does: through a Hugging Face tokenizer and chat template
// (InspectOptions::tokenizer, what llm.pretrained names), or else the word tokenizer a job trained
// from scratch builds from the same data (its index's word counts).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "data/image.h"
#include "tokenizer/chat_template.h"

namespace tandem::data {

struct InspectOptions {
  int64_t first = 3;          // samples shown whole
  int64_t limit = 0;          // samples read; 0: all
  int64_t max_images = 1024;  // data.max_images_per_sample for the read (a bound, not a check)
  std::string tokenizer;      // a Hugging Face model directory; "": the data's word tokenizer
  std::string chat_template;  // with `tokenizer`: "chatml", "llama3", "tandem"; "": its own
};

struct InspectedSample {
  std::string source;  // "shards/train-000000.tar: 000000012 (byte 5120)"
  std::vector<Resolution> images;
  int64_t tokens = 0;
  std::vector<tokenizer::ChatMessage> messages;
};

struct InspectReport {
  int64_t shards = 0;
  int64_t samples = 0;                           // in the data set
  int64_t read = 0;                              // of them read (all, or InspectOptions::limit)
  int64_t images = 0;                            // in the samples read
  std::map<int64_t, int64_t> images_per_sample;  // images -> samples
  std::map<std::pair<int64_t, int64_t>, int64_t> image_sizes;  // (height, width) -> images
  std::string tokenizer;        // "words" or the tokenizer's directory
  std::vector<int64_t> tokens;  // each sample read's text tokens, sorted
  // Samples by text tokens: [0, 8), [8, 16), [16, 32), ... up to the longest: (from, count).
  std::vector<std::pair<int64_t, int64_t>> histogram;
  std::vector<InspectedSample> first;
};

// Reads `shards` (a pattern or a directory `tandem data pack` wrote). The errors of opening and
// reading them (naming the shard, the key and the byte offset), and of loading the tokenizer.
absl::StatusOr<InspectReport> InspectShards(const std::string& shards,
                                            const InspectOptions& options);

// The report as JSON text (one line), and as text for a terminal.
std::string InspectJson(const InspectReport& report);
std::string InspectText(const InspectReport& report);

}  // namespace tandem::data
