// Fashion-MNIST loading: the real dataset when installed (skipped visibly otherwise), clear
// errors for a missing directory or file and for files that do not belong together, and the
// batch-filling helper.

#include "files.hpp"

#include <tandem/data.hpp>
#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cmath>

namespace tandem::data {
namespace {

using test::idx_bytes;
using test::TempDir;

// A miniature split: n images of 2x3 and n labels.
void write_split(const TempDir& dir, const std::string& prefix, std::uint32_t n_images,
                 std::uint32_t n_labels, std::uint8_t label = 1) {
  std::vector<std::uint8_t> pixels(n_images * 6);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i % 256);
  test::write_gzip(dir / (prefix + "-images-idx3-ubyte.gz"),
                   idx_bytes(0x08, {n_images, 2, 3}, pixels));
  test::write_gzip(dir / (prefix + "-labels-idx1-ubyte.gz"),
                   idx_bytes(0x08, {n_labels}, std::vector<std::uint8_t>(n_labels, label)));
}

TEST(FashionMnist, RealDatasetIfInstalled) {
  const std::filesystem::path dir(kFashionMnistDir);
  if (!std::filesystem::exists(dir / "train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed at " << dir
                 << " (apt-get install dataset-fashion-mnist): real-data checks skipped";
  const ImageDataset train = load_fashion_mnist(Split::train);
  EXPECT_EQ(train.size, 60000u);
  EXPECT_EQ(train.rows, 28u);
  EXPECT_EQ(train.cols, 28u);
  EXPECT_EQ(train.images.size(), 60000u * 28 * 28);
  EXPECT_EQ(train.labels.size(), 60000u);
  EXPECT_EQ(train.num_classes, 10u);
  // The training set is balanced: 6000 images per class.
  std::array<int, 10> per_class{};
  for (auto l : train.labels) ++per_class.at(l);
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], 6000) << "class " << c;
  // The pixel mean and stddev match the normalisation defaults.
  double sum = 0, sq = 0;
  for (auto p : train.images) {
    sum += p / 255.0;
    sq += (p / 255.0) * (p / 255.0);
  }
  const double n = static_cast<double>(train.images.size());
  const double mean = sum / n;
  EXPECT_NEAR(mean, Normalize{}.mean, 1e-3);
  EXPECT_NEAR(std::sqrt(sq / n - mean * mean), Normalize{}.stddev, 1e-3);

  const ImageDataset test_split = load_fashion_mnist(dir, Split::test);
  EXPECT_EQ(test_split.size, 10000u);
  EXPECT_EQ(test_split.rows, 28u);
  EXPECT_EQ(test_split.cols, 28u);
}

TEST(FashionMnist, MissingDirectorySaysHowToGetTheData) {
  try {
    load_fashion_mnist("/nonexistent/fashion", Split::train);
    FAIL() << "no error for a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
    const std::string m = e.message();
    EXPECT_NE(m.find("/nonexistent/fashion"), std::string::npos) << m;
    EXPECT_NE(m.find("apt-get install dataset-fashion-mnist"), std::string::npos) << m;
    EXPECT_NE(m.find("--data DIR"), std::string::npos) << m;
  }
}

TEST(FashionMnist, MissingFileIsNamed) {
  TempDir dir;
  write_split(dir, "train", 4, 4);
  std::filesystem::remove(dir / "train-labels-idx1-ubyte.gz");
  try {
    load_fashion_mnist(dir.path(), Split::train);
    FAIL() << "no error for a missing labels file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
    EXPECT_NE(e.message().find("train-labels-idx1-ubyte.gz"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find("--data DIR"), std::string::npos) << e.what();
  }
  // The test split is missing altogether.
  EXPECT_THROW(load_fashion_mnist(dir.path(), Split::test), Error);
}

TEST(FashionMnist, SmallSplitLoadsAndPlainFilesWork) {
  TempDir dir;
  write_split(dir, "t10k", 5, 5, 7);
  const ImageDataset ds = load_fashion_mnist(dir.path(), Split::test);
  EXPECT_EQ(ds.size, 5u);
  EXPECT_EQ(ds.rows, 2u);
  EXPECT_EQ(ds.cols, 3u);
  EXPECT_EQ(ds.image(1)[0], 6);
  EXPECT_EQ(ds.labels, std::vector<std::uint8_t>(5, 7));

  // Uncompressed files of the same names (without .gz) are used when the .gz are absent.
  TempDir plain;
  test::write_plain(plain / "train-images-idx3-ubyte",
                    idx_bytes(0x08, {1, 2, 3}, {1, 2, 3, 4, 5, 6}));
  test::write_plain(plain / "train-labels-idx1-ubyte", idx_bytes(0x08, {1}, {9}));
  const ImageDataset p = load_fashion_mnist(plain.path(), Split::train);
  EXPECT_EQ(p.size, 1u);
  EXPECT_EQ(p.labels[0], 9);
}

TEST(FashionMnist, CountsMustAgree) {
  TempDir dir;
  write_split(dir, "train", 5, 4);
  try {
    load_fashion_mnist(dir.path(), Split::train);
    FAIL() << "no error for 5 images and 4 labels";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
    EXPECT_NE(e.message().find("5 images"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find("4 labels"), std::string::npos) << e.what();
  }
}

TEST(FashionMnist, LabelsOutOfRangeAndWrongShapesAreRejected) {
  TempDir dir;
  write_split(dir, "train", 3, 3, 10);
  EXPECT_THROW(load_fashion_mnist(dir.path(), Split::train), Error);

  TempDir shape;
  test::write_gzip(shape / "train-images-idx3-ubyte.gz", idx_bytes(0x08, {6}, {1, 2, 3, 4, 5, 6}));
  test::write_gzip(shape / "train-labels-idx1-ubyte.gz", idx_bytes(0x08, {6}, {1, 2, 3, 4, 5, 6}));
  EXPECT_THROW(load_fashion_mnist(shape.path(), Split::train), Error);

  TempDir type;
  test::write_gzip(type / "train-images-idx3-ubyte.gz", idx_bytes(0x0D, {1, 1, 1}, {0, 0, 0, 0}));
  test::write_gzip(type / "train-labels-idx1-ubyte.gz", idx_bytes(0x08, {1}, {1}));
  try {
    load_fashion_mnist(type.path(), Split::train);
    FAIL() << "no error for f32 images";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("expected u8"), std::string::npos) << e.what();
  }
}

TEST(FashionMnist, FillBatchNormalisesAndChecksSizes) {
  ImageDataset ds;
  ds.size = 3;
  ds.rows = 1;
  ds.cols = 2;
  ds.images = {0, 255, 51, 102, 10, 20};
  ds.labels = {4, 5, 6};
  ds.num_classes = 10;
  const std::vector<std::size_t> idx{2, 0};
  std::vector<float> images(4);
  std::vector<std::int64_t> labels(2);
  const Normalize norm{0.5f, 0.25f};
  fill_batch(ds, idx, images, labels, norm);
  EXPECT_NEAR(images[0], (10 / 255.0 - 0.5) / 0.25, 1e-5);
  EXPECT_NEAR(images[1], (20 / 255.0 - 0.5) / 0.25, 1e-5);
  EXPECT_NEAR(images[2], -2.0, 1e-5);
  EXPECT_NEAR(images[3], 2.0, 1e-5);
  EXPECT_EQ(labels, (std::vector<std::int64_t>{6, 4}));

  std::vector<float> small(3);
  EXPECT_THROW(fill_batch(ds, idx, small, labels), Error);
  const std::vector<std::size_t> bad{3};
  std::vector<float> one(2);
  std::vector<std::int64_t> one_label(1);
  EXPECT_THROW(fill_batch(ds, bad, one, one_label), Error);
}

}  // namespace
}  // namespace tandem::data
