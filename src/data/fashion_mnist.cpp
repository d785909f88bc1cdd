// Fashion-MNIST: the four IDX files of Debian's dataset-fashion-mnist, checked against each
// other, and the batch-filling helper the training loops share.

#include <tandem/data.hpp>
#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/ranges.h>

#include <system_error>

namespace tandem::data {

std::string_view to_string(Split s) noexcept {
  return s == Split::train ? "train" : "test";
}

namespace {

constexpr std::size_t kClasses = 10;

std::filesystem::path locate(const std::filesystem::path& dir, std::string_view stem) {
  std::error_code ec;
  auto gz = dir / (std::string(stem) + ".gz");
  if (std::filesystem::exists(gz, ec)) return gz;
  auto plain = dir / std::string(stem);
  if (std::filesystem::exists(plain, ec)) return plain;
  TANDEM_THROW(ErrorCode::Io,
               "Fashion-MNIST file {} not found (nor {}): install Debian's "
               "dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or pass --data DIR",
               gz.string(), plain.string());
}

IdxArray read_u8(const std::filesystem::path& file, std::size_t ndim, std::string_view what) {
  IdxArray a = read_idx(file);
  if (a.type != IdxType::u8)
    TANDEM_THROW(ErrorCode::Io, "Fashion-MNIST {} file {}: element type {}, expected u8", what,
                 file.string(), to_string(a.type));
  if (a.dims.size() != ndim)
    TANDEM_THROW(ErrorCode::Io, "Fashion-MNIST {} file {}: {} dimensions ({}), expected {}", what,
                 file.string(), a.dims.size(), fmt::join(a.dims, " x "), ndim);
  return a;
}

}  // namespace

ImageDataset load_fashion_mnist(const std::filesystem::path& dir, Split split) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    TANDEM_THROW(ErrorCode::Io,
                 "Fashion-MNIST directory {} not found: install Debian's dataset-fashion-mnist "
                 "(apt-get install dataset-fashion-mnist) or pass --data DIR",
                 dir.string());
  const std::string_view prefix = split == Split::train ? "train" : "t10k";
  const auto images_file = locate(dir, fmt::format("{}-images-idx3-ubyte", prefix));
  const auto labels_file = locate(dir, fmt::format("{}-labels-idx1-ubyte", prefix));

  IdxArray images = read_u8(images_file, 3, "images");
  IdxArray labels = read_u8(labels_file, 1, "labels");
  if (images.dims[0] != labels.dims[0])
    TANDEM_THROW(ErrorCode::Io,
                 "Fashion-MNIST {} split: {} holds {} images but {} holds {} labels: the files "
                 "do not belong together",
                 to_string(split), images_file.string(), images.dims[0], labels_file.string(),
                 labels.dims[0]);
  for (std::size_t i = 0; i < labels.bytes.size(); ++i) {
    if (labels.bytes[i] >= kClasses)
      TANDEM_THROW(ErrorCode::Io,
                   "Fashion-MNIST labels file {}: label {} of sample {} is not below {}",
                   labels_file.string(), labels.bytes[i], i, kClasses);
  }

  ImageDataset ds;
  ds.size = images.dims[0];
  ds.rows = images.dims[1];
  ds.cols = images.dims[2];
  ds.images = std::move(images.bytes);
  ds.labels = std::move(labels.bytes);
  ds.num_classes = kClasses;
  TANDEM_INFO(data, "Fashion-MNIST {}: {} images of {}x{} from {}", to_string(split), ds.size,
              ds.rows, ds.cols, dir.string());
  return ds;
}

void fill_batch(const ImageDataset& dataset, std::span<const std::size_t> indices,
                std::span<float> images, std::span<std::int64_t> labels,
                const Normalize& normalize) {
  const std::size_t pixels = dataset.image_pixels();
  TANDEM_CHECK_ARG(images.size() == indices.size() * pixels,
                   "fill_batch: {} indices of {} pixels need {} floats for the images, got {}",
                   indices.size(), pixels, indices.size() * pixels, images.size());
  TANDEM_CHECK_ARG(labels.size() == indices.size(), "fill_batch: {} indices need {} labels, got {}",
                   indices.size(), indices.size(), labels.size());
  TANDEM_CHECK_ARG(normalize.stddev != 0.0f, "fill_batch: Normalize::stddev must not be 0");
  // x = (p / 255 - mean) / stddev, as one multiply-add per pixel.
  const float scale = 1.0f / (255.0f * normalize.stddev);
  const float shift = -normalize.mean / normalize.stddev;
  for (std::size_t b = 0; b < indices.size(); ++b) {
    const std::size_t i = indices[b];
    TANDEM_CHECK_ARG(i < dataset.size, "fill_batch: sample index {} out of range (dataset of {})",
                     i, dataset.size);
    const std::uint8_t* src = dataset.images.data() + i * pixels;
    float* dst = images.data() + b * pixels;
    for (std::size_t p = 0; p < pixels; ++p) dst[p] = static_cast<float>(src[p]) * scale + shift;
    labels[b] = dataset.labels[i];
  }
}

}  // namespace tandem::data
