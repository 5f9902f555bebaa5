// Scores greedy captions (or answers) against their references (docs/design.md §4: exact-match
// accuracy).
//
// For one sample, let g be the generated ids up to and excluding the token that ended them (the
// generator stops there: models::GenerateGreedyBatch) and r the reference ids, without an end
// token; neither is cut here, since an end token's id is the tokenizer's. The target is r followed
// by an end: n = |r| + 1 positions.
//   exact          += (g == r)
//   tokens_total   += |r| + 1
//   tokens_correct += #{ i < |r| : i < |g| and g[i] == r[i] }     (the words, position by position)
//                     + (|g| == |r| ? 1 : 0)                      (the end: stopped right after r)
// So a caption that is right but runs on ("... circle at the top left left") scores every word but
// not the end, and is not exact; an empty generation scores 0 of |r| + 1.
//
// Not thread-safe: one CaptionScore per thread, then operator+=.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::data {

struct CaptionScore {
  int64_t samples = 0;
  int64_t exact = 0;
  int64_t tokens_correct = 0;
  int64_t tokens_total = 0;

  // exact / samples; 0 when there are no samples.
  double exact_match() const;
  // tokens_correct / tokens_total; 0 when there are no samples.
  double token_accuracy() const;

  CaptionScore& operator+=(const CaptionScore& other);
};

// Adds one sample's counts to *score, as defined at the top of this file.
void Accumulate(const std::vector<int64_t>& generated, const std::vector<int64_t>& reference,
                CaptionScore* score);

}  // namespace tandem::data
