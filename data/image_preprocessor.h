// A Hugging Face checkpoint's preprocessor_config.json, or transformers 5's processor_config.json
// (its "image_processor"), for CLIPImageProcessor, SiglipImageProcessor, LlavaNextImageProcessor
// and their PIL variants, and the geometry it describes: resize (the shortest edge to a length, or
// to a height and width), center crop, then rescale and normalise; with LLaVA-NeXT's
// image_grid_pinpoints, the image is first cut into tiles (data/any_res.h), each then processed so.
// Resizing is Pillow's (data/pil_resize.h), as transformers' PIL processors do it; transformers 5's
// torchvision processors resize in floating point and may differ by a step of 1/255 in places.
//
// Preprocess does the geometry and returns values in [0, 1]; rescale_factor must be 1/255 and the
// normalisation (image_mean, image_std) is the vision model's (models::VisionConfig), so that the
// job's images stay in one form everywhere.
//
// Errors: NotFound for a missing file, InvalidArgument naming the file and key for a value it
// cannot use (a resample filter other than bilinear or bicubic, a rescale factor other than
// 1/255, a crop larger than the resized image). Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/any_res.h"
#include "data/image.h"
#include "data/pil_resize.h"
#include "nlohmann/json_fwd.hpp"

namespace tandem::data {

struct ImagePreprocessor {
  bool do_resize = true;
  int64_t shortest_edge = 0;  // > 0: the shorter side becomes this, the aspect kept
  int64_t resize_height = 0, resize_width = 0;  // otherwise: exactly this size
  PilFilter filter = PilFilter::kBicubic;
  bool do_center_crop = false;
  int64_t crop_height = 0, crop_width = 0;
  std::vector<double> image_mean{0.5, 0.5, 0.5};  // as (x - mean) / std after rescaling to [0, 1]
  std::vector<double> image_std{0.5, 0.5, 0.5};
  // LLaVA-NeXT's image_grid_pinpoints, each a multiple of output_size() both ways; empty: an image
  // is one tile.
  std::vector<Resolution> grid_pinpoints;

  // The square side the model receives: the crop, or the resized size.
  int64_t output_size() const;
  bool any_res() const { return !grid_pinpoints.empty(); }
  // The size an any-res image's base tile is squashed to first: size's height and width, or its
  // shortest_edge both ways.
  Resolution base_size() const;
};

absl::StatusOr<ImagePreprocessor> ReadImagePreprocessor(const std::string& path);
// A model directory's image settings: its preprocessor_config.json, or where it has none and a
// processor_config.json (as transformers 5 saves a processor), that file's "image_processor"
// object; errors name the file (and "image_processor") and the key.
absl::StatusOr<ImagePreprocessor> ReadModelImagePreprocessor(const std::string& directory);
// Those settings as a preprocessor_config.json would hold them (what `tandem export` writes),
// after checking that they read.
absl::StatusOr<std::string> ModelImagePreprocessorJson(const std::string& directory);

// The image processor of Tandem's own tower, as `tandem export` writes it to
// preprocessor_config.json: each image squashed to image_size square (bicubic) and normalised by
// mean and std (empty: 0.5 each channel), a SiglipImageProcessor; with `grid_pinpoints`, a
// LlavaNextImageProcessor that first cuts LLaVA-NeXT's tiles of that side. Jobs training the tower
// with tiles read their images through OwnTowerPreprocessor, the same settings parsed
// (InvalidArgument naming "vision.model" for a size or pinpoint ValidateJobConfig refuses).
std::string OwnTowerPreprocessorJson(int64_t image_size, const std::vector<double>& mean,
                                     const std::vector<double>& std,
                                     const std::vector<Resolution>& grid_pinpoints);
absl::StatusOr<ImagePreprocessor> OwnTowerPreprocessor(
    int64_t image_size, const std::vector<double>& mean, const std::vector<double>& std,
    const std::vector<Resolution>& grid_pinpoints);

// LLaVA-NeXT's image_grid_pinpoints as preprocessor_config.json and config.json hold them: a
// non-empty list of [height, width], each side 1 to kMaxAnyResSide and a multiple of `tile`
// (named `tile_is` in errors: "the tile side"). InvalidArgument naming the entry, for the caller to
// put its file before.
absl::StatusOr<std::vector<Resolution>> ParseGridPinpoints(const nlohmann::json& value,
                                                           int64_t tile, std::string_view tile_is);

// Resize then crop. InvalidArgument when the result is not square or the crop does not fit.
absl::StatusOr<Image> Preprocess(const ImagePreprocessor& preprocessor, const Image& image);
// Preprocess of an image as decoded to 8-bit samples (a JPEG: DecodeJpeg8), resized and cropped as
// bytes and made floats at the end: Preprocess(ToFloatImage(image)) without the float round trip
// of the full-size image.
absl::StatusOr<Image> Preprocess8(const ImagePreprocessor& preprocessor, const Image8& image);
// The image's tiles as the model receives them: with grid_pinpoints, AnyResTiles each preprocessed
// (LlavaNextImageProcessorPil), else the one image Preprocess makes.
absl::StatusOr<std::vector<Image>> PreprocessTiles(const ImagePreprocessor& preprocessor,
                                                   const Image& image);

}  // namespace tandem::data
