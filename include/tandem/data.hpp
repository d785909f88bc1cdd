#pragma once
/// @file data.hpp
/// Data side of data-parallel training, independent of any tensor library:
///  - read_idx(): the IDX format of MNIST and Fashion-MNIST, gzip-compressed or plain;
///  - load_fashion_mnist(): one split of Debian's dataset-fashion-mnist;
///  - DistributedSampler: each rank's share of the sample indices, with the semantics of
///    torch.utils.data.DistributedSampler, plus a resumable position;
///  - BatchLoader (include <tandem/loader.hpp>, also included here): a background thread
///    that prepares the next batches while the caller trains.

#include <tandem/loader.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::data {

// ---- IDX ----------------------------------------------------------------------------------

/// Element type codes of the IDX format (third byte of the magic number).
enum class IdxType : std::uint8_t {
  u8 = 0x08,
  i8 = 0x09,
  i16 = 0x0B,
  i32 = 0x0C,
  f32 = 0x0D,
  f64 = 0x0E,
};

/// Size of one element in bytes.
std::size_t idx_type_size(IdxType t) noexcept;
/// "u8", "i16", ...
std::string_view to_string(IdxType t) noexcept;

/// The contents of one IDX file.
struct IdxArray {
  IdxType type = IdxType::u8;
  /// Dimensions, outermost first (60000, 28, 28 for Fashion-MNIST's training images).
  std::vector<std::size_t> dims;
  /// Every element, row-major, in host byte order (the file stores multi-byte elements
  /// big-endian; read_idx converts them).
  std::vector<std::uint8_t> bytes;

  /// Number of elements (the product of dims).
  std::size_t count() const noexcept;
};

/// Limits that a header must respect before anything is allocated from it.
struct IdxLimits {
  /// Most dimensions accepted (the format allows 255; real files have 1 to 4).
  std::size_t max_ndim = 8;
  /// Largest payload accepted, in bytes.
  std::uint64_t max_bytes = std::uint64_t{16} << 30;
};

/// Reads an IDX file, gzip-compressed or plain (detected from its content). Every dimension
/// and the total size are checked against the limits and against what the file can hold
/// before any allocation; a file whose payload is shorter or longer than its header says, a
/// bad magic number, an unknown type code, 0 dimensions or a corrupt gzip stream throws
/// Error(Io) naming the file and what is wrong. A missing or unreadable file throws Error(Io).
IdxArray read_idx(const std::filesystem::path& path, const IdxLimits& limits = {});

/// Parses the bytes of a whole IDX file held in memory, gzip-compressed or plain, with every
/// check of read_idx() (which reads the file and calls this); `name` names the data in
/// error messages. Throws Error(Io) for anything malformed.
IdxArray parse_idx(std::span<const std::byte> file, const IdxLimits& limits = {},
                   std::string_view name = "<memory>");

// ---- Fashion-MNIST ------------------------------------------------------------------------

/// Where Debian's dataset-fashion-mnist installs the data.
inline constexpr std::string_view kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// The 10 class names, by label.
inline constexpr std::string_view kFashionMnistClasses[10] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

enum class Split : std::uint8_t { train, test };
std::string_view to_string(Split s) noexcept;

/// A labelled image set: `size` images of rows x cols u8 pixels, one u8 label each.
struct ImageDataset {
  std::size_t size = 0;
  std::size_t rows = 0;
  std::size_t cols = 0;
  /// size * rows * cols pixels, image after image, row-major.
  std::vector<std::uint8_t> images;
  /// size labels.
  std::vector<std::uint8_t> labels;
  /// Number of classes; every label is below it.
  std::size_t num_classes = 0;

  std::size_t image_pixels() const noexcept { return rows * cols; }
  /// The pixels of image i.
  std::span<const std::uint8_t> image(std::size_t i) const noexcept {
    return {images.data() + i * image_pixels(), image_pixels()};
  }
};

/// Loads one split of Fashion-MNIST from `dir`: train-{images-idx3,labels-idx1}-ubyte.gz or
/// t10k-... (a plain, uncompressed file of the same name without ".gz" is used when the .gz
/// is absent). A missing directory or file throws Error(Io) naming it and saying to install
/// Debian's dataset-fashion-mnist or pass --data DIR; mismatched image and label counts,
/// non-u8 data or a label >= 10 throw Error(Io) naming the file.
ImageDataset load_fashion_mnist(const std::filesystem::path& dir, Split split);
/// Same, from kFashionMnistDir.
inline ImageDataset load_fashion_mnist(Split split) {
  return load_fashion_mnist(std::filesystem::path(kFashionMnistDir), split);
}

/// Normalisation applied by fill_batch: pixel / 255, then (x - mean) / stddev.
/// The defaults are Fashion-MNIST's training-set statistics.
struct Normalize {
  float mean = 0.2860f;
  float stddev = 0.3530f;
};

/// Copies the samples `indices` of `dataset` into a batch: `images` receives
/// indices.size() * rows * cols normalised floats (N x rows x cols, i.e. N x 1 x H x W),
/// `labels` indices.size() labels. Throws Error(InvalidArgument) when an index is out of
/// range or a span has the wrong size.
void fill_batch(const ImageDataset& dataset, std::span<const std::size_t> indices,
                std::span<float> images, std::span<std::int64_t> labels,
                const Normalize& normalize = {});

// ---- DistributedSampler -------------------------------------------------------------------

/// Where a sampler stands: saved in checkpoints so that a resumed run continues with the
/// next unseen sample of the same epoch, at the same or at another world size.
struct SamplerState {
  std::uint64_t epoch = 0;
  /// Samples of this rank already consumed in `epoch` (0 <= position <= num_samples()).
  std::uint64_t position = 0;
  std::uint64_t seed = 0;
  /// The sampler's num_replicas (0: not recorded, taken as the loading sampler's).
  std::uint64_t replicas = 0;
  /// Samples of the epoch's order consumed before this sharding of it began (non-zero in an
  /// epoch resumed at another world size).
  std::uint64_t offset = 0;
};

/// Options of DistributedSampler, with PyTorch's defaults.
struct SamplerOptions {
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;
};

/// The indices of one rank's share of a dataset of `dataset_size` samples, with the semantics
/// of torch.utils.data.DistributedSampler:
///  - the epoch's order is a permutation of 0..N-1 seeded with seed + epoch (shuffle) or
///    0..N-1 in order (no shuffle), identical on every rank;
///  - without drop_last the order is padded by repeating its first indices (cyclically if N is
///    smaller than the padding) to total_size() = R * ceil(N / R), so that every rank gets
///    ceil(N / R) indices; with drop_last the tail is dropped so that every rank gets
///    floor(N / R);
///  - rank r takes indices[r], indices[r + R], indices[r + 2R], ...
/// The permutation comes from tandem's own generator (a Fisher-Yates shuffle driven by
/// SplitMix64/xoshiro256**, deterministic across platforms and compilers): it is NOT the same
/// permutation as torch.randperm, which cannot be reproduced without LibTorch.
///
/// Beyond PyTorch, the sampler keeps a position (samples of this epoch already consumed) that
/// advance() moves, state()/load_state() save and restore, and remaining() starts from. A state
/// saved with another number of replicas (an elastic run resumed at a new world size) is
/// re-sharded: the epoch goes on with the samples of its order that no rank consumed, shared
/// (and padded or truncated) as above among the new replicas; the next epoch is whole again.
class DistributedSampler {
 public:
  /// Throws Error(InvalidArgument) unless 0 <= rank < num_replicas.
  DistributedSampler(std::size_t dataset_size, int num_replicas, int rank,
                     SamplerOptions options = {});

  /// Sets the epoch, which (with the seed) chooses the permutation. Call it at the start of
  /// every epoch, as in PyTorch, or every epoch yields the same order. Changing the epoch
  /// resets the position to 0; setting the current epoch again keeps it (so a loop that calls
  /// set_epoch(e) after load_state() resumes where the checkpoint left off).
  void set_epoch(std::uint64_t epoch);
  std::uint64_t epoch() const noexcept { return epoch_; }

  /// Indices of this rank in the current epoch: ceil(N / R), or floor(N / R) with drop_last
  /// (N less the samples consumed before a re-sharding, in an epoch resumed at another world
  /// size).
  std::size_t num_samples() const noexcept { return num_samples_; }
  /// num_samples() * num_replicas: the padded (or truncated) length of the epoch's order.
  std::size_t total_size() const noexcept {
    return num_samples_ * static_cast<std::size_t>(replicas_);
  }
  std::size_t dataset_size() const noexcept { return dataset_size_; }
  int num_replicas() const noexcept { return replicas_; }
  int rank() const noexcept { return rank_; }
  const SamplerOptions& options() const noexcept { return options_; }

  /// This rank's indices for the current epoch (num_samples() of them), from the start.
  std::vector<std::size_t> indices() const;
  /// The indices not consumed yet: indices() from position().
  std::vector<std::size_t> remaining() const;
  /// The epoch's whole order before sharding (total_size() indices, padded or truncated).
  std::vector<std::size_t> epoch_order() const;

  /// Samples of this epoch already consumed by this rank.
  std::uint64_t position() const noexcept { return position_; }
  /// Samples of the epoch's order consumed by all ranks together (at most N).
  std::uint64_t consumed() const noexcept;
  /// Samples of the epoch's order consumed before this sharding of it began.
  std::uint64_t offset() const noexcept { return offset_; }
  /// Moves the position forward by `n` samples (clamped to num_samples()).
  void advance(std::uint64_t n) noexcept;

  SamplerState state() const noexcept {
    return {epoch_, position_, options_.seed, static_cast<std::uint64_t>(replicas_), offset_};
  }
  /// Restores a state saved by state(), re-sharding it when it was saved with another number
  /// of replicas. Throws Error(InvalidArgument) when its seed differs from this sampler's or
  /// its position or offset exceeds the epoch.
  void load_state(const SamplerState& state);

 private:
  std::size_t dataset_size_;
  int replicas_;
  int rank_;
  SamplerOptions options_;
  std::size_t num_samples_ = 0;
  std::uint64_t epoch_ = 0;
  std::uint64_t position_ = 0;
  std::uint64_t offset_ = 0;

  void size_epoch();
};

/// The permutation of 0..n-1 that DistributedSampler uses for `seed` (seed + epoch there).
std::vector<std::size_t> permutation(std::size_t n, std::uint64_t seed);

}  // namespace tandem::data
