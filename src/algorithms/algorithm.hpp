#pragma once
// Algorithms: one per file, written only against transport::Mesh. The registry's default
// choice asks each algorithm of a collective, in order of preference for the call's size,
// whether it supports() the call; comm::AlgoPolicy puts a forced, per-call or tuned choice
// before it.

#include "transport/mesh.hpp"

#include <tandem/types.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace tandem::algorithms {

/// Which host each rank of a communicator runs on (from transport::PeerInfo::host_id). Fixed
/// for the life of a communicator, so choices made from it may be cached with the others.
struct HostLayout {
  std::vector<int> host_of;  ///< host index of each rank; hosts numbered by their lowest rank
  int hosts = 1;
  int ranks_per_host = 0;  ///< ranks on every host when all hosts have as many, else 0

  static HostLayout of(const transport::Mesh& mesh);
  bool spans_hosts() const noexcept { return hosts > 1; }
};

/// Everything an algorithm needs to know about one collective call.
struct Call {
  CollectiveKind kind = CollectiveKind::allreduce;
  /// Input (ignored where the collective has none on this rank); send: the data.
  BufferView in;
  /// Output; recv: where the data lands.
  BufferView out;
  ReduceOp op = ReduceOp::sum;
  int root = 0;                         ///< broadcast/reduce/gather/scatter; the peer for send/recv
  std::span<const std::size_t> counts;  ///< allgatherv: elements per rank
  std::uint64_t seq = 0;                ///< collective sequence number on this communicator
  /// Fingerprint of (kind, dtype, count, root, seq): every message carries it.
  std::uint32_t tag = 0;
  Deadline deadline = Deadline::max();
  /// The communicator's host layout (null: unknown, treated as one host).
  const HostLayout* hosts = nullptr;
  /// A device call: the caller's stream (CallOptions::stream; null: the legacy default
  /// stream). Host algorithms ignore it.
  void* stream = nullptr;

  bool in_place() const noexcept { return in.data == out.data; }
};

/// Scratch memory owned by the communicator and reused across calls (never shrinks). Its
/// pages are faulted in when it grows (MAP_POPULATE: one call, not a fault per page in the
/// first collective of a new size), and it grows at least twofold.
class Scratch {
 public:
  Scratch() noexcept = default;
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  /// At least `bytes` bytes, page aligned; valid until the next call to get().
  std::byte* get(std::size_t bytes) {
    if (bytes > size_ || data_ == nullptr) grow(bytes);
    return data_;
  }
  /// Makes the next get() of up to `bytes` free of allocation and page faults.
  void reserve(std::size_t bytes) {
    if (bytes > size_) grow(bytes);
  }

 private:
  void grow(std::size_t bytes);
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

class Algorithm;

/// What an algorithm runs against.
struct Context {
  transport::Mesh& mesh;
  Scratch& scratch;
  /// Target chunk size for pipelining (bytes, multiple of 64).
  std::size_t chunk_bytes = 1u << 20;
  /// Ring allreduce between ranks on shared memory runs the message in segments of this many
  /// bytes per rank (0: one segment), both phases of a segment before the next, so that the
  /// data stays in the cache between them.
  std::size_t segment_bytes = 256u << 10;
  /// Set by an algorithm that hands the call to another (a direct algorithm over buffers
  /// that are not registered runs the ring): the one that actually ran, for the reports.
  const Algorithm* ran = nullptr;
  /// The one request of a two-rank broadcast of one chunk, kept from call to call: the
  /// smallest calls wait for their stores, and building a request is eleven of them.
  transport::Request single{};
};

/// One way to run one collective. An algorithm is a class in its own file deriving from this
/// one (its collective and name given here, supports() where it does not run every call,
/// run()) with a factory listed in builtin.hpp.
class Algorithm {
 public:
  Algorithm(CollectiveKind kind, std::string_view name) noexcept : kind_(kind), name_(name) {}
  virtual ~Algorithm() = default;
  Algorithm(const Algorithm&) = delete;
  Algorithm& operator=(const Algorithm&) = delete;

  /// Short name, as TANDEM_ALGO spells it ("ring", "recursive_doubling", "tree", ...).
  std::string_view name() const noexcept { return name_; }
  CollectiveKind kind() const noexcept { return kind_; }
  /// False when this algorithm cannot run `call` on a group of `world` ranks (by default it
  /// runs every call). The answer may depend only on the collective, the dtype,
  /// size_class(call), the world size, the host layout and (for allgatherv) counts.size():
  /// communicators cache the choice per (collective, dtype, size class).
  virtual bool supports(const Call& call, int world) const noexcept;
  /// Runs the call to completion (or throws). Must work for count 0 and for any world size
  /// it claims to support.
  virtual void run(const Call& call, Context& ctx) const = 0;

 private:
  CollectiveKind kind_;
  std::string_view name_;  ///< a string literal
};

/// Registry of every algorithm, and the default choice by size.
class Registry {
 public:
  /// The process-wide registry with every built-in algorithm.
  static const Registry& builtin();

  /// Every algorithm of `kind`, in registration order.
  std::vector<const Algorithm*> of(CollectiveKind kind) const;
  /// The algorithm named `name` (case-insensitive) for `kind`, or nullptr.
  const Algorithm* find(CollectiveKind kind, std::string_view name) const;
  /// The default choice for `call` on a group of `world` ranks: the first algorithm of the
  /// preference list for its collective and size that supports it, else the first registered
  /// one that does. Forced, per-call and tuned choices are comm::AlgoPolicy's, which falls
  /// back to this. Throws InvalidArgument when no algorithm supports the call.
  const Algorithm& default_choice(const Call& call, int world) const;

  void add(std::unique_ptr<Algorithm> a);

  /// Every algorithm by a stable index (registration order), for compact caches.
  std::size_t size() const noexcept { return all_.size(); }
  const Algorithm& at(std::size_t index) const noexcept { return *all_[index]; }
  /// The index of `a`, or size() when it is not registered here.
  std::size_t index_of(const Algorithm& a) const noexcept;

 private:
  std::vector<std::unique_ptr<Algorithm>> all_;
};

/// The size class by which the selector chooses: std::bit_width of the call's message bytes
/// (what one rank contributes or, for the gathering collectives, the whole result). Default
/// crossovers lie on powers of two, so every call of a class gets the same choice.
std::size_t size_class(const Call& call) noexcept;

/// 32-bit fingerprint carried by every message of a call. For send/recv pass the user tag
/// as `seq`: send and recv hash alike and `root` (the peer, which differs between the two
/// sides) is ignored, so a matching pair carries equal tags.
std::uint32_t fingerprint(CollectiveKind kind, DataType dtype, std::size_t count, int root,
                          std::uint64_t seq) noexcept;
/// fingerprint() in two steps, for a call repeated with new sequence numbers: the part of
/// the shape, computed once, then each call's tag from it (equal to fingerprint()).
std::uint64_t fingerprint_shape(CollectiveKind kind, DataType dtype, std::size_t count,
                                int root) noexcept;
std::uint32_t fingerprint_with(std::uint64_t shape, std::uint64_t seq) noexcept;

}  // namespace tandem::algorithms
