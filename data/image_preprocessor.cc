#include "data/image_preprocessor.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "common/strict_json.h"

namespace tandem::data {
namespace {

using nlohmann::json;

absl::Status KeyError(const std::string& path, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " ", what));
}

absl::StatusOr<int64_t> SizeValue(const std::string& path, const json& object,
                                  const std::string& key, const std::string& name) {
  const auto it = object.find(name);
  if (it == object.end()) return KeyError(path, absl::StrCat(key, ".", name), "is required");
  const auto value = ReadJsonInteger(*it).ToInt64();
  if (!value || *value <= 0) {
    return KeyError(path, absl::StrCat(key, ".", name),
                    absl::StrCat("must be a positive integer, got ", DescribeJsonValue(*it)));
  }
  return *value;
}

absl::StatusOr<std::vector<double>> Triple(const std::string& path, const json& root,
                                           const char* key) {
  const json& v = root[key];
  if (v.is_number()) return std::vector<double>(3, v.get<double>());
  if (!v.is_array() || v.size() != 3)
    return KeyError(path, key, "must be a number or a list of three");
  std::vector<double> out;
  for (const auto& x : v) {
    if (!x.is_number()) return KeyError(path, key, "must hold numbers");
    out.push_back(x.get<double>());
  }
  return out;
}

// Rows [top, top + height) and columns [left, left + width) of each plane (Image or Image8).
template <typename ImageType>
ImageType Crop(const ImageType& image, int64_t top, int64_t left, int64_t height, int64_t width) {
  ImageType out;
  out.channels = image.channels;
  out.height = height;
  out.width = width;
  out.pixels.resize(static_cast<size_t>(out.channels * height * width));
  for (int64_t c = 0; c < out.channels; ++c) {
    for (int64_t y = 0; y < height; ++y) {
      const auto row = image.pixels.begin() + ((c * image.height + y + top) * image.width + left);
      std::copy(row, row + width, out.pixels.begin() + (c * height + y) * width);
    }
  }
  return out;
}

Image Resized(const Image& image, int64_t height, int64_t width, PilFilter filter) {
  return ResizePil(image, height, width, filter);
}
Image8 Resized(const Image8& image, int64_t height, int64_t width, PilFilter filter) {
  return ResizePil8(image, height, width, filter);
}

absl::StatusOr<ImagePreprocessor> ParsePreprocessorOrThrow(const std::string& path,
                                                           const json& root);

absl::StatusOr<json> ReadJsonObject(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadUserFile(path));
  auto parsed = ParseJsonStrict(text);
  if (!parsed.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
  if (!parsed->is_object())
    return absl::InvalidArgumentError(absl::StrCat(path, ": must hold a JSON object"));
  return *std::move(parsed);
}

// The settings and the name errors give them: preprocessor_config.json, else
// processor_config.json's "image_processor" object (transformers 5 saves no
// preprocessor_config.json).
absl::StatusOr<std::pair<json, std::string>> ModelSettings(const std::string& directory) {
  const std::string preprocessor = absl::StrCat(directory, "/preprocessor_config.json");
  const std::string processor = absl::StrCat(directory, "/processor_config.json");
  std::error_code ec;
  if (std::filesystem::exists(preprocessor, ec) || !std::filesystem::exists(processor, ec)) {
    ASSIGN_OR_RETURN(json root, ReadJsonObject(preprocessor));
    return std::make_pair(std::move(root), preprocessor);
  }
  ASSIGN_OR_RETURN(const json root, ReadJsonObject(processor));
  const auto it = root.find("image_processor");
  if (it == root.end() || !it->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(processor,
                     ": image_processor must be an object (the directory has no "
                     "preprocessor_config.json either)"));
  }
  return std::make_pair(*it, absl::StrCat(processor, ": image_processor"));
}

absl::StatusOr<ImagePreprocessor> ParsePreprocessor(const std::string& path, const json& root) {
  try {  // a value of the wrong JSON type (a null flag, say) is an error naming the file
    return ParsePreprocessorOrThrow(path, root);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a value of the wrong type: ", e.what()));
  }
}

}  // namespace

namespace {

json OwnTowerSettings(int64_t image_size, const std::vector<double>& mean,
                      const std::vector<double>& std,
                      const std::vector<Resolution>& grid_pinpoints) {
  const json side = {{"height", image_size}, {"width", image_size}};
  json settings = {{"image_processor_type",
                    grid_pinpoints.empty() ? "SiglipImageProcessor" : "LlavaNextImageProcessor"},
                   {"do_resize", true},
                   {"size", side},
                   {"resample", 3},
                   {"do_rescale", true},
                   {"rescale_factor", 1.0 / 255.0},
                   {"do_normalize", true},
                   {"image_mean", mean.empty() ? std::vector<double>(3, 0.5) : mean},
                   {"image_std", std.empty() ? std::vector<double>(3, 0.5) : std},
                   {"do_convert_rgb", true}};
  if (!grid_pinpoints.empty()) {
    settings["do_center_crop"] = true;
    settings["crop_size"] = side;
    settings["image_grid_pinpoints"] = json::array();
    for (const Resolution& p : grid_pinpoints)
      settings["image_grid_pinpoints"].push_back({p.height, p.width});
  }
  return settings;
}

}  // namespace

std::string OwnTowerPreprocessorJson(int64_t image_size, const std::vector<double>& mean,
                                     const std::vector<double>& std,
                                     const std::vector<Resolution>& grid_pinpoints) {
  return OwnTowerSettings(image_size, mean, std, grid_pinpoints).dump(2);
}

absl::StatusOr<ImagePreprocessor> OwnTowerPreprocessor(
    int64_t image_size, const std::vector<double>& mean, const std::vector<double>& std,
    const std::vector<Resolution>& grid_pinpoints) {
  return ParsePreprocessor("vision.model", OwnTowerSettings(image_size, mean, std, grid_pinpoints));
}

absl::StatusOr<std::vector<Resolution>> ParseGridPinpoints(const json& value, int64_t tile,
                                                           std::string_view tile_is) {
  const std::string key = "image_grid_pinpoints";
  if (!value.is_array() || value.empty())
    return absl::InvalidArgumentError(key + " must be a non-empty list of [height, width]");
  std::vector<Resolution> out;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string item = absl::StrCat(key, "[", i, "] ");
    const json& pair = value[i];
    std::optional<int64_t> h, w;
    if (pair.is_array() && pair.size() == 2) {
      h = ReadJsonInteger(pair[0]).ToInt64();
      w = ReadJsonInteger(pair[1]).ToInt64();
    }
    if (!h || !w || *h <= 0 || *w <= 0 || *h > kMaxAnyResSide || *w > kMaxAnyResSide) {
      return absl::InvalidArgumentError(
          absl::StrCat(item, "must be [height, width] in pixels, 1 to ", kMaxAnyResSide, ", got ",
                       DescribeJsonValue(pair)));
    }
    if (*h % tile != 0 || *w % tile != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(item, *h, " x ", *w, " is not a multiple of ",
                       absl::string_view(tile_is.data(), tile_is.size()), " ", tile));
    }
    out.push_back({*h, *w});
  }
  return out;
}

int64_t ImagePreprocessor::output_size() const {
  if (do_center_crop) return crop_height;
  return shortest_edge > 0 ? shortest_edge : resize_height;
}

Resolution ImagePreprocessor::base_size() const {
  if (shortest_edge > 0) return {shortest_edge, shortest_edge};
  if (resize_height > 0) return {resize_height, resize_width};
  return {output_size(), output_size()};
}

absl::StatusOr<ImagePreprocessor> ReadImagePreprocessor(const std::string& path) {
  ASSIGN_OR_RETURN(const json root, ReadJsonObject(path));
  return ParsePreprocessor(path, root);
}

absl::StatusOr<ImagePreprocessor> ReadModelImagePreprocessor(const std::string& directory) {
  ASSIGN_OR_RETURN(const auto settings, ModelSettings(directory));
  return ParsePreprocessor(settings.second, settings.first);
}

absl::StatusOr<std::string> ModelImagePreprocessorJson(const std::string& directory) {
  ASSIGN_OR_RETURN(const auto settings, ModelSettings(directory));
  RETURN_IF_ERROR(ParsePreprocessor(settings.second, settings.first).status());
  return settings.first.dump(2);
}

namespace {

absl::StatusOr<ImagePreprocessor> ParsePreprocessorOrThrow(const std::string& path,
                                                           const json& root) {
  ImagePreprocessor p;
  p.do_resize = root.value("do_resize", true);
  if (p.do_resize) {
    if (!root.contains("size") || !root["size"].is_object())
      return KeyError(path, "size", "must be an object");
    const json& size = root["size"];
    if (size.contains("shortest_edge")) {
      ASSIGN_OR_RETURN(p.shortest_edge, SizeValue(path, size, "size", "shortest_edge"));
    } else if (size.contains("height") && size.contains("width")) {
      ASSIGN_OR_RETURN(p.resize_height, SizeValue(path, size, "size", "height"));
      ASSIGN_OR_RETURN(p.resize_width, SizeValue(path, size, "size", "width"));
    } else {
      return KeyError(path, "size", "must hold shortest_edge, or height and width");
    }
    const int64_t resample =
        root.contains("resample") ? ReadJsonInteger(root["resample"]).ToInt64().value_or(-1) : 3;
    if (resample == 2) {
      p.filter = PilFilter::kBilinear;
    } else if (resample == 3) {
      p.filter = PilFilter::kBicubic;
    } else {
      return KeyError(path, "resample",
                      absl::StrCat(DescribeJsonValue(root["resample"]),
                                   " is not supported (2 bilinear, 3 bicubic)"));
    }
  }
  p.do_center_crop = root.value("do_center_crop", false);
  if (p.do_center_crop) {
    if (!root.contains("crop_size") || !root["crop_size"].is_object()) {
      return KeyError(path, "crop_size", "must be an object with height and width");
    }
    ASSIGN_OR_RETURN(p.crop_height, SizeValue(path, root["crop_size"], "crop_size", "height"));
    ASSIGN_OR_RETURN(p.crop_width, SizeValue(path, root["crop_size"], "crop_size", "width"));
  }
  if (root.value("do_rescale", true)) {
    const double factor = root.contains("rescale_factor") && root["rescale_factor"].is_number()
                              ? root["rescale_factor"].get<double>()
                              : 1.0 / 255.0;
    if (std::abs(factor * 255.0 - 1.0) > 1e-9) {
      return KeyError(path, "rescale_factor", absl::StrCat(factor, " is not supported (1/255)"));
    }
  } else {
    return KeyError(path, "do_rescale", "false is not supported: images are read as 8-bit values");
  }
  if (root.value("do_normalize", true)) {
    if (root.contains("image_mean")) {
      ASSIGN_OR_RETURN(p.image_mean, Triple(path, root, "image_mean"));
    }
    if (root.contains("image_std")) {
      ASSIGN_OR_RETURN(p.image_std, Triple(path, root, "image_std"));
    }
    for (double s : p.image_std) {
      if (s <= 0) return KeyError(path, "image_std", "values must be positive");
    }
  } else {
    p.image_mean = {0, 0, 0};
    p.image_std = {1, 1, 1};
  }
  const int64_t side = p.output_size();
  if (p.do_center_crop ? p.crop_height != p.crop_width
                       : (p.shortest_edge == 0 && p.resize_height != p.resize_width)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the processed image must be square (", side, ")"));
  }
  if (!p.do_resize && !p.do_center_crop) {
    return KeyError(path, "do_resize", "false without a center crop leaves the image size open");
  }
  if (root.contains("image_grid_pinpoints")) {
    auto pinpoints = ParseGridPinpoints(root["image_grid_pinpoints"], side, "the tile side");
    if (!pinpoints.ok())
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", pinpoints.status().message()));
    p.grid_pinpoints = *std::move(pinpoints);
    // LlavaNextImageProcessor cuts tiles of crop_size's height whether or not it crops.
    if (!p.do_center_crop && root.contains("crop_size") && root["crop_size"].is_object()) {
      ASSIGN_OR_RETURN(const int64_t tile,
                       SizeValue(path, root["crop_size"], "crop_size", "height"));
      if (tile != side) {
        return KeyError(
            path, "crop_size.height",
            absl::StrCat(tile, " cuts image_grid_pinpoints into tiles that are not the ", side,
                         " pixels the images are resized to"));
      }
    }
  }
  return p;
}

}  // namespace

namespace {

// Preprocess's geometry on floats or on 8-bit samples: the same steps, the same pixels.
template <typename ImageType>
absl::StatusOr<ImageType> Geometry(const ImagePreprocessor& p, const ImageType& image) {
  // `current` is `image` until a step makes a new one, so the input is copied only when nothing
  // changes it.
  ImageType made;
  const ImageType* current = &image;
  if (p.do_resize) {
    int64_t height = p.resize_height, width = p.resize_width;
    if (p.shortest_edge >
        0) {  // transformers' get_resize_output_image_size(default_to_square=False)
      const bool wide = image.width > image.height;
      const int64_t short_side = wide ? image.height : image.width,
                    long_side = wide ? image.width : image.height;
      const auto long_new =
          static_cast<int64_t>(static_cast<double>(p.shortest_edge) * long_side / short_side);
      height = wide ? p.shortest_edge : long_new;
      width = wide ? long_new : p.shortest_edge;
    }
    if (height != image.height || width != image.width) {
      made = Resized(image, height, width, p.filter);
      current = &made;
    }
  }
  if (p.do_center_crop) {
    if (p.crop_height > current->height || p.crop_width > current->width) {
      return absl::InvalidArgumentError(
          absl::StrCat("preprocessing: a crop of ", p.crop_height, "x", p.crop_width,
                       " does not fit the resized ", current->height, "x", current->width));
    }
    if (p.crop_height != current->height || p.crop_width != current->width) {
      made = Crop(*current, (current->height - p.crop_height) / 2,
                  (current->width - p.crop_width) / 2, p.crop_height, p.crop_width);
      current = &made;
    }
  }
  if (current->height != current->width) {
    return absl::InvalidArgumentError(absl::StrCat("preprocessing: the image is ", current->height,
                                                   "x", current->width, ", not square"));
  }
  return current == &image ? image : std::move(made);
}

}  // namespace

absl::StatusOr<Image> Preprocess(const ImagePreprocessor& p, const Image& image) {
  return Geometry(p, image);
}

absl::StatusOr<Image> Preprocess8(const ImagePreprocessor& p, const Image8& image) {
  ASSIGN_OR_RETURN(const Image8 processed, Geometry(p, image));
  return ToFloatImage(processed);
}

absl::StatusOr<std::vector<Image>> PreprocessTiles(const ImagePreprocessor& p, const Image& image) {
  std::vector<Image> tiles;
  if (!p.any_res()) {
    ASSIGN_OR_RETURN(tiles.emplace_back(), Preprocess(p, image));
    return tiles;
  }
  tiles = AnyResTiles(image, p.grid_pinpoints, p.output_size(), p.base_size(), p.filter);
  for (Image& tile : tiles) {
    ASSIGN_OR_RETURN(tile, Preprocess(p, tile));
  }
  return tiles;
}

}  // namespace tandem::data
