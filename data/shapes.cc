// Attributes, captions and jitter of the shapes dataset; rasterisation is in shape_render.cc.
#include "data/shapes.h"

#include <algorithm>
#include <array>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "data/random.h"
#include "data/shape_render.h"
#include "data/text_codec.h"

namespace tandem::data {
namespace {

// Stream tags, hashed with the seed and split so that no two purposes share random numbers.
constexpr uint64_t kBlockStream = 1;         // the order of combinations inside a block of 432
constexpr uint64_t kJitterStream = 2;        // one sample's jitter
constexpr uint64_t kConversationStream = 3;  // one sample's questions

// Grid cell centres in image units. 0.2 rather than 1/6 from the edge keeps the largest shape
// (extent 1.126 * 0.155 = 0.175, plus 0.02 position jitter) inside the image.
constexpr std::array<double, 3> kCellCentres = {0.2, 0.5, 0.8};
constexpr double kPositionJitter = 0.02;
// Radii in image units, each jittered by a factor in [0.93, 1.07]: at worst 0.091 against 0.135,
// so small and large never come close (about 2.9 and 4.3 pixels at image size 32).
constexpr double kSmallRadius = 0.085;
constexpr double kLargeRadius = 0.145;
constexpr double kRadiusJitter = 0.07;
// Base colours, chosen far apart in hue; each channel is jittered by up to +-kColourJitter.
constexpr std::array<std::array<float, 3>, kNumColours> kColours = {{
    {0.90f, 0.12f, 0.12f},  // red
    {0.15f, 0.78f, 0.20f},  // green
    {0.18f, 0.38f, 1.00f},  // blue
    {0.95f, 0.88f, 0.12f},  // yellow
    {0.66f, 0.22f, 0.88f},  // purple
    {1.00f, 0.52f, 0.04f},  // orange
}};
constexpr float kColourJitter = 0.05f;
// Background: dark, each channel in [0.04, 0.14). The red channel takes one of 32 lattice levels,
// even in training and odd in evaluation (see the disjointness note in shapes.h).
constexpr float kBackgroundLow = 0.04f;
constexpr float kBackgroundRange = 0.10f;
constexpr int kBackgroundRedLevels = 32;

constexpr std::array<std::string_view, kNumShapes> kShapeNames = {"circle", "square", "triangle",
                                                                  "cross"};
constexpr std::array<std::string_view, kNumColours> kColourNames = {"red",    "green",  "blue",
                                                                    "yellow", "purple", "orange"};
constexpr std::array<std::string_view, kNumPlaces> kPlaceNames = {
    "top left", "top",         "top right", "left",        "center",
    "right",    "bottom left", "bottom",    "bottom right"};
constexpr std::array<std::string_view, kNumShapeSizes> kSizeNames = {"small", "large"};

uint64_t SplitTag(Split split) { return split == Split::kTrain ? 0 : 1; }

float Clamp01(double value) { return static_cast<float>(std::clamp(value, 0.0, 1.0)); }

}  // namespace

ShapeAttributes AttributesOfCombination(int64_t combination) {
  ShapeAttributes attributes;
  attributes.shape = static_cast<Shape>(combination % kNumShapes);
  attributes.colour = static_cast<Colour>(combination / kNumShapes % kNumColours);
  attributes.place = static_cast<Place>(combination / (kNumShapes * kNumColours) % kNumPlaces);
  attributes.size = static_cast<ShapeSize>(combination / (kNumShapes * kNumColours * kNumPlaces));
  return attributes;
}

int64_t CombinationOf(const ShapeAttributes& attributes) {
  return static_cast<int64_t>(attributes.shape) +
         kNumShapes * (static_cast<int64_t>(attributes.colour) +
                       kNumColours * (static_cast<int64_t>(attributes.place) +
                                      kNumPlaces * static_cast<int64_t>(attributes.size)));
}

std::string_view ShapeName(Shape shape) { return kShapeNames[static_cast<size_t>(shape)]; }
std::string_view ColourName(Colour colour) { return kColourNames[static_cast<size_t>(colour)]; }
std::string_view PlaceName(Place place) { return kPlaceNames[static_cast<size_t>(place)]; }
std::string_view SizeName(ShapeSize size) { return kSizeNames[static_cast<size_t>(size)]; }

std::string Caption(const ShapeAttributes& attributes) {
  // std::string_view does not convert to this Abseil's AlphaNum, hence no StrCat.
  std::string caption = "a ";
  caption.append(SizeName(attributes.size)).append(" ").append(ColourName(attributes.colour));
  caption.append(" ").append(ShapeName(attributes.shape)).append(" at the ");
  caption.append(PlaceName(attributes.place));
  return caption;
}

ShapesDataset::ShapesDataset(uint64_t seed, int64_t image_size, Split split, int64_t size,
                             ShapesText text)
    : seed_(seed), image_size_(image_size), split_(split), size_(size), text_(text) {}

namespace {

// The questions of ShapesConversation, one per attribute and one for the whole caption.
constexpr std::array<std::string_view, 5> kQuestions = {
    "What colour is the shape?", "What shape is it?", "Where is the shape?",
    "Is the shape small or large?", "Describe the image."};

std::string Answer(const ShapeAttributes& a, size_t question) {
  std::string answer;
  switch (question) {
    case 0:
      answer.append("It is ").append(ColourName(a.colour));
      break;
    case 1:
      answer.append("It is a ").append(ShapeName(a.shape));
      break;
    case 2:
      answer.append("At the ").append(PlaceName(a.place));
      break;
    case 3:
      answer.append("It is ").append(SizeName(a.size));
      break;
    default:
      answer = Caption(a);
      answer[0] = 'A';
      break;
  }
  return answer + ".";
}

}  // namespace

std::vector<tokenizer::ChatMessage> ShapesConversation(const ShapeAttributes& attributes,
                                                       uint64_t draw) {
  const size_t first = draw % kQuestions.size();
  const size_t second =
      (first + 1 + draw / kQuestions.size() % (kQuestions.size() - 1)) % kQuestions.size();
  return {{"user", "<image>\n" + std::string(kQuestions[first])},
          {"assistant", Answer(attributes, first)},
          {"user", std::string(kQuestions[second])},
          {"assistant", Answer(attributes, second)}};
}

ShapeAttributes ShapesDataset::Attributes(int64_t index) const {
  // Fisher-Yates over the block's 432 combinations, stopping once position `offset` is final:
  // about 432 hash evaluations, far cheaper than rendering.
  const int64_t block = index / kNumShapeCombinations;
  const int64_t offset = index % kNumShapeCombinations;
  std::array<int16_t, kNumShapeCombinations> order;
  std::iota(order.begin(), order.end(), 0);
  Rng rng(HashKey({seed_, SplitTag(split_), kBlockStream, static_cast<uint64_t>(block)}));
  for (int64_t i = 0; i <= offset; ++i) {
    const int64_t j = i + static_cast<int64_t>(rng.Below(kNumShapeCombinations - i));
    std::swap(order[i], order[j]);
  }
  return AttributesOfCombination(order[offset]);
}

Example ShapesDataset::Render(int64_t index) const {
  const ShapeAttributes attributes = Attributes(index);
  Rng rng(HashKey({seed_, SplitTag(split_), kJitterStream, static_cast<uint64_t>(index)}));
  ShapeScene scene;
  scene.shape = attributes.shape;
  const int64_t place = static_cast<int64_t>(attributes.place);
  scene.center_x = kCellCentres[place % 3] + rng.Uniform(-kPositionJitter, kPositionJitter);
  scene.center_y = kCellCentres[place / 3] + rng.Uniform(-kPositionJitter, kPositionJitter);
  const double radius = attributes.size == ShapeSize::kSmall ? kSmallRadius : kLargeRadius;
  scene.radius = radius * rng.Uniform(1 - kRadiusJitter, 1 + kRadiusJitter);
  const auto& base = kColours[static_cast<size_t>(attributes.colour)];
  for (int c = 0; c < 3; ++c)
    scene.colour[c] = Clamp01(base[c] + rng.Uniform(-kColourJitter, kColourJitter));
  const int64_t red_level = 2 * static_cast<int64_t>(rng.Below(kBackgroundRedLevels / 2)) +
                            (split_ == Split::kTrain ? 0 : 1);
  scene.background[0] = kBackgroundLow + kBackgroundRange * red_level / kBackgroundRedLevels;
  for (int c = 1; c < 3; ++c)
    scene.background[c] = kBackgroundLow + kBackgroundRange * rng.Uniform();

  return Example{RenderScene(scene, image_size_), TextOf(attributes, index)};
}

absl::StatusOr<Example> ShapesDataset::Get(int64_t index) const {
  if (index < 0 || index >= size_) {
    return absl::OutOfRangeError(
        absl::StrCat("shapes dataset: index ", index, " outside [0, ", size_, ")"));
  }
  return Render(index);
}

std::string ShapesDataset::Text(int64_t index) const { return TextOf(Attributes(index), index); }

std::string ShapesDataset::TextOf(const ShapeAttributes& attributes, int64_t index) const {
  if (text_ == ShapesText::kCaptions) return Caption(attributes);
  return ConversationWords(ConversationOf(attributes, index));
}

std::vector<tokenizer::ChatMessage> ShapesDataset::ConversationOf(const ShapeAttributes& attributes,
                                                                  int64_t index) const {
  return ShapesConversation(attributes, HashKey({seed_, SplitTag(split_), kConversationStream,
                                                 static_cast<uint64_t>(index)}));
}

std::vector<tokenizer::ChatMessage> ShapesDataset::Messages(int64_t index) const {
  if (text_ == ShapesText::kCaptions) return Dataset::Messages(index);
  return ConversationOf(Attributes(index), index);
}

std::vector<std::string> ShapesDataset::VocabularyTexts() const {
  std::vector<std::string> texts;
  const int64_t count = std::min(size_, kVocabularySamples);
  texts.reserve(count + kQuestions.size());
  for (int64_t i = 0; i < count; ++i) texts.push_back(Text(i));
  for (size_t q = 0; q < kQuestions.size(); ++q)
    texts.push_back(std::string(kQuestions[q]) + " It is a.");
  return texts;
}

std::string ShapesDataset::Describe(int64_t index) const {
  return absl::StrCat("shapes ", split_ == Split::kTrain ? "train" : "eval", " #", index, " (seed ",
                      seed_, ")");
}

}  // namespace tandem::data
