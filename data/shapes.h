// The procedural "shapes" dataset (docs/design.md §4): one coloured shape on a dark background,
// captioned "a small red circle at the top left". It needs no download and is the same from the
// same seed on every machine.
//
// Attributes: 4 shapes x 6 colours x 9 positions (a 3x3 grid) x 2 sizes = 432 combinations.
// Sample i of a split is a pure function of (seed, split, i), computed with the counter-based
// hashes of data/random.h:
//   * Its attributes come from a shuffled block: indices [432k, 432k + 432) hold every combination
//     exactly once, in an order drawn from (seed, split, k). So any 432 consecutive samples are
//     balanced and 4096 training samples contain all combinations.
//   * Its jitter (position within the cell, size, shape colour, background colour) comes from
//     (seed, split, i), so every image is unique while the attributes stay unambiguous at 32 x 32.
//   * Train and eval never share an image: the background's red level is an even step of a fine
//     lattice in training and an odd one in evaluation, and (for image_size >= 10) the pixels at
//     the centres of the 8 grid cells a shape does not occupy are pure background (a shape never
//     reaches a neighbouring cell's centre pixel). Any two images leave at least 7 such cells free
//     in both, so they differ there.
//
// Thread-safety: immutable; Get may be called concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace tandem::data {

enum class Split { kTrain, kEval };

enum class Shape { kCircle, kSquare, kTriangle, kCross };
enum class Colour { kRed, kGreen, kBlue, kYellow, kPurple, kOrange };
enum class Place {
  kTopLeft,
  kTop,
  kTopRight,
  kLeft,
  kCenter,
  kRight,
  kBottomLeft,
  kBottom,
  kBottomRight,
};
enum class ShapeSize { kSmall, kLarge };

inline constexpr int64_t kNumShapes = 4;
inline constexpr int64_t kNumColours = 6;
inline constexpr int64_t kNumPlaces = 9;
inline constexpr int64_t kNumShapeSizes = 2;
inline constexpr int64_t kNumShapeCombinations =
    kNumShapes * kNumColours * kNumPlaces * kNumShapeSizes;

struct ShapeAttributes {
  Shape shape = Shape::kCircle;
  Colour colour = Colour::kRed;
  Place place = Place::kCenter;
  ShapeSize size = ShapeSize::kSmall;

  friend bool operator==(const ShapeAttributes&, const ShapeAttributes&) = default;
};

// Combination number c in [0, 432) <-> attributes: shape = c % 4, colour = c / 4 % 6,
// place = c / 24 % 9, size = c / 216.
ShapeAttributes AttributesOfCombination(int64_t combination);
int64_t CombinationOf(const ShapeAttributes& attributes);

std::string_view ShapeName(Shape shape);     // "circle", "square", "triangle", "cross"
std::string_view ColourName(Colour colour);  // "red", "green", "blue", "yellow", "purple", "orange"
std::string_view PlaceName(Place place);    // "top left", "top", ..., "center", ..., "bottom right"
std::string_view SizeName(ShapeSize size);  // "small", "large"

// "a small red circle at the top left", "a large blue cross at the center".
std::string Caption(const ShapeAttributes& attributes);

// A conversation of two questions about the shape, each with its answer: two of "What colour is the
// shape?" ("It is red."), "What shape is it?" ("It is a circle."), "Where is the shape?" ("At the
// top left."), "Is the shape small or large?" ("It is small.") and "Describe the image." (the
// caption as a sentence), picked by `draw`. The first question carries the image mark.
std::vector<tokenizer::ChatMessage> ShapesConversation(const ShapeAttributes& attributes,
                                                       uint64_t draw);

// What a sample's text is: its caption, or a conversation about it (ShapesConversation, questions
// drawn from (seed, split, index)).
enum class ShapesText { kCaptions, kConversations };

class ShapesDataset final : public Dataset {
 public:
  // REQUIRES: image_size > 0 (the shapes are designed for 32 to 224), size >= 0.
  ShapesDataset(uint64_t seed, int64_t image_size, Split split, int64_t size,
                ShapesText text = ShapesText::kCaptions);

  int64_t size() const override { return size_; }
  // Never fails inside [0, size()); OutOfRange outside.
  absl::StatusOr<Example> Get(int64_t index) const override;
  std::string Text(int64_t index) const override;
  std::vector<tokenizer::ChatMessage> Messages(int64_t index) const override;
  // The captions or conversations of the first kVocabularySamples samples (every sample of a
  // smaller set), and every question's words. The first 65,536 hold each of the 432 combinations
  // 151 times, so every word of the dataset; a set of 3e8 samples then builds its word tokenizer
  // in as little time and memory as one of 65,536 (it held every caption at once: 22 GB).
  std::vector<std::string> VocabularyTexts() const override;
  static constexpr int64_t kVocabularySamples = 1 << 16;
  std::string Describe(int64_t index) const override;  // "shapes train #12 (seed 0)"

  // The sample itself, for any index >= 0 (size() only bounds Get): Get without the Status.
  Example Render(int64_t index) const;
  ShapeAttributes Attributes(int64_t index) const;

 private:
  // Text and Messages of a sample whose attributes are known (Render has them).
  std::string TextOf(const ShapeAttributes& attributes, int64_t index) const;
  std::vector<tokenizer::ChatMessage> ConversationOf(const ShapeAttributes& attributes,
                                                     int64_t index) const;

  uint64_t seed_;
  int64_t image_size_;
  Split split_;
  int64_t size_;
  ShapesText text_;
};

}  // namespace tandem::data
