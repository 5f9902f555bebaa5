// LLaVA-NeXT's arrangement of an any-resolution image's tile features for the LLM (data/any_res.h),
// as transformers' LlavaNextModel.pack_image_features does it: for each image, its base tile's
// features, then its grid tiles' features put back together into one [rows * side, cols * side]
// grid, cut to the unpadded window, each row followed by the newline embedding, row by row.
//
//   at::Tensor features = models::ArrangeAnyRes(tiles, layouts, llm->image_newline());
//   llm->forward(features, tokens);  // LLaVA's layout: one image token per position of features
//
// Differentiable in `tiles` and `newline`. Errors: c10::Error naming the sizes when tiles do not
// match the layouts. LibTorch header.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "data/any_res.h"

namespace tandem::models {

// tiles [sum of layouts' tiles(), side^2, hidden], the images' tiles in order (each image's base
// tile first, then its grid row by row); newline [hidden]. Returns [1, sum of positions(), hidden]
// in the tiles' dtype, the form Llm::forward takes for LLaVA's layout.
at::Tensor ArrangeAnyRes(const at::Tensor& tiles, const std::vector<data::AnyResLayout>& layouts,
                         const at::Tensor& newline);

}  // namespace tandem::models
