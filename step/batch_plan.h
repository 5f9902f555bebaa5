// Which rank of each group works on which part of one micro-batch (docs/design.md §2).
//
// The LLM group works on samples, the vision group on images (a sample holds 0..N: text only,
// several images, a video's frames), and the two are chosen independently:
//   LLM      With `balance`, samples go to the LLM replicas by cost, longest first, each to the
//            replica with the least so far (LPT scheduling); a sample's cost is its positions T
//            times (12 * hidden + T), a decoder's linear terms per position (24 L hidden^2 FLOPs)
//            against causal attention's (2 L hidden T). Packed, a replica's cost is that of the
//            rows it will run: rows x L x (12 hidden + 2 L), L its longest row, since attention
//            computes each whole row's L x L scores under the block-diagonal mask; from LPT's
//            start, the costliest replica moves or swaps samples with the cheapest while that
//            lowers the greater of the two. Without, replica r takes the contiguous block
//            OwnedSamples(r) (step/ownership.h). Each replica's samples are kept in micro-batch
//            order (row by row when packed).
//   images   Every image of the micro-batch in the exchange order: LLM replica 0's samples' images
//            (each sample's in its order), then replica 1's, and so on. With `balance`, vision
//            replica v takes the contiguous block OwnedSamples(v) of that order by count; without,
//            the images of its sample block OwnedSamples(v) (the same when every sample has one).
//   rows     With `pack_tokens`, each LLM replica packs its samples into rows of at most that many
//            positions, first fit in decreasing order of positions, and its samples are listed row
//            by row (so its images too); without, a sample is a row.
// Either way each LLM replica's images and each vision replica's are contiguous in the exchange
// order, so every transfer between two replicas is one contiguous slice on both sides. A replica
// may get no image (text-only samples); it still runs the step, so collectives stay matched.
//
// Every rank of both groups computes the same plan from the same loads. Plain C++.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "data/any_res.h"
#include "step/ownership.h"

namespace tandem::step {

// What one sample of a micro-batch costs each group.
struct SampleLoad {
  int64_t images = 0;     // tiles the vision group encodes for it: one an image, or each image's
                          // LLaVA-NeXT tiles
  int64_t positions = 0;  // the LLM's positions for it: its tokens, image features included
};

// One unit of the vision group's work: a tile of an image (an image read whole is one tile).
struct PlannedImage {
  int64_t sample = 0;  // position in the micro-batch
  int64_t image = 0;   // which of the sample's images
  int64_t tile = 0;    // which of the image's tiles (data/any_res.h)
  bool operator==(const PlannedImage&) const = default;
};

struct MicroBatchPlan {
  // Per LLM replica: positions in the micro-batch, ascending, or row by row when packed.
  std::vector<std::vector<int64_t>> llm_samples;
  // Per LLM replica: where each row ends in llm_samples (row i holds [ends[i-1], ends[i])).
  std::vector<std::vector<int64_t>> llm_row_ends;
  // Per LLM replica: what its rows cost, rows x L x (12 hidden + 2 L) with L its longest row (the
  // unit balance evens out when packed; a planned-work metric either way).
  std::vector<double> llm_costs;
  std::vector<PlannedImage> images;        // the exchange order
  std::vector<SampleRange> llm_images;     // per LLM replica: its block of `images`
  std::vector<SampleRange> vision_images;  // per vision replica: its block of `images`
  // With LLaVA-NeXT's tiles, per sample: its images' layouts (Stage::Plan fills it); else empty.
  std::vector<std::vector<data::AnyResLayout>> layouts;
  // Packed (training under data.pack_tokens), per sample: its text tokens, which its positions
  // were planned from (Stage::Plan fills it); else empty.
  std::vector<int64_t> text_tokens;
};

struct PlanOptions {
  int llm_replicas = 1;
  int vision_replicas = 1;
  bool balance = false;
  int64_t hidden = 1;       // the LLM's width, for the cost of a position
  int64_t pack_tokens = 0;  // positions a packed row holds at most; 0: one sample a row
};

// REQUIRES: replicas >= 1, every load non-negative, and no sample over pack_tokens positions.
MicroBatchPlan PlanMicroBatch(const std::vector<SampleLoad>& loads, const PlanOptions& options);

// A sample's LLM cost under PlanMicroBatch's balance.
double LlmCost(int64_t positions, int64_t hidden);

// The blocks of the exchange order that `mine` (a replica's block) shares with each replica of
// `peers` that has images, in replica order.
std::vector<std::pair<int, SampleRange>> ImageOverlaps(SampleRange mine,
                                                       const std::vector<SampleRange>& peers);

}  // namespace tandem::step
