#include "models/any_res.h"

#include <c10/util/Exception.h>

namespace tandem::models {

at::Tensor ArrangeAnyRes(const at::Tensor& tiles, const std::vector<data::AnyResLayout>& layouts,
                         const at::Tensor& newline) {
  TORCH_CHECK(tiles.dim() == 3, "ArrangeAnyRes: tiles must be [tiles, features, hidden], got ",
              tiles.sizes());
  const int64_t hidden = tiles.size(2);
  TORCH_CHECK(newline.defined() && newline.dim() == 1 && newline.size(0) == hidden,
              "ArrangeAnyRes: the newline embedding must be [", hidden, "]");
  int64_t expected = 0;
  for (const data::AnyResLayout& layout : layouts) expected += layout.tiles();
  TORCH_CHECK(tiles.size(0) == expected, "ArrangeAnyRes: ", tiles.size(0), " tiles for images of ",
              expected);
  const at::Tensor row_end = newline.to(tiles.scalar_type()).view({hidden, 1, 1});
  std::vector<at::Tensor> pieces;
  int64_t first = 0;
  for (const data::AnyResLayout& l : layouts) {
    TORCH_CHECK(tiles.size(1) == l.side * l.side, "ArrangeAnyRes: tiles of ", tiles.size(1),
                " features, not ", l.side, " x ", l.side);
    pieces.push_back(tiles[first]);  // the base tile
    at::Tensor grid = tiles.narrow(0, first + 1, l.rows * l.cols)
                          .view({l.rows, l.cols, l.side, l.side, hidden})
                          .permute({4, 0, 2, 1, 3})
                          .reshape({hidden, l.rows * l.side, l.cols * l.side})
                          .narrow(1, l.top, l.height)
                          .narrow(2, l.left, l.width);
    grid = at::cat({grid, row_end.expand({hidden, l.height, 1})}, 2);
    pieces.push_back(grid.flatten(1, 2).transpose(0, 1));
    first += l.tiles();
  }
  if (pieces.empty()) return tiles.new_empty({1, 0, hidden});
  return at::cat(pieces, 0).unsqueeze(0);
}

}  // namespace tandem::models
