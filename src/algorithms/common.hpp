#pragma once
// Small helpers shared by the algorithm files: block partitions, chunking, request batches.

#include "algorithms/algorithm.hpp"
#include "core/copy.hpp"
#include "transport/mesh.hpp"

#include <tandem/error.hpp>
#include <tandem/types.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

namespace tandem::algorithms::detail {

using transport::Request;

inline int mod(int a, int n) noexcept {
  return ((a % n) + n) % n;
}

inline bool is_pow2(int n) noexcept {
  return n > 0 && (n & (n - 1)) == 0;
}

/// Largest power of two <= n (n >= 1).
inline int pow2_floor(int n) noexcept {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

/// A non-power-of-two world folded into its largest power of two p, as the log-step
/// allreduces run it: the first 2(n - p) ranks pair up (2i, 2i+1); the even one sends its whole
/// input to the odd one, which reduces it into `out` and stands for both among the p as virtual
/// rank i; the others are virtual rank r - (n - p).
struct Pow2Fold {
  int p = 1;
  int extra = 0;
  int vr = 0;                      // this rank's virtual rank
  const std::byte* cur = nullptr;  // where this rank's partial result is now (in, or out)
  /// The real rank of virtual rank v.
  int real(int v) const noexcept { return v < extra ? 2 * v + 1 : v + extra; }
};

/// Folds this rank into the power of two. A rank that sits out (an even one of the first
/// pairs) sends its input and receives the final result into `out`, and gets nullopt: its call
/// is done. `count` elements of `dt` at `in`, reduced with `op` (already the wire op).
std::optional<Pow2Fold> fold_to_pow2(const Call& call, transport::Mesh& mesh, const std::byte* in,
                                     std::byte* out, std::size_t count, DataType dt, ReduceOp op);

/// The end of a fold: a rank that stood for its even neighbour sends it the result in `out`.
void unfold_from_pow2(const Call& call, transport::Mesh& mesh, const Pow2Fold& fold,
                      const std::byte* out, std::size_t bytes);

/// The transport reduces avg as sum; the algorithm divides once at the end.
inline ReduceOp wire_op(ReduceOp op) noexcept {
  return op == ReduceOp::avg ? ReduceOp::sum : op;
}

inline std::byte* ptr(void* p) noexcept {
  return static_cast<std::byte*>(p);
}
inline const std::byte* ptr(const void* p) noexcept {
  return static_cast<const std::byte*>(p);
}

/// memmove that skips dst == src and empty ranges; distinct ranges of core::streams() size
/// are written with streaming stores (core/copy.hpp).
inline void copy_bytes(void* dst, const void* src, std::size_t bytes) noexcept {
  if (bytes == 0 || dst == src) return;
  const auto d = reinterpret_cast<std::uintptr_t>(dst);
  const auto s = reinterpret_cast<std::uintptr_t>(src);
  if (core::streams(bytes) && (d + bytes <= s || s + bytes <= d))
    return core::copy(dst, src, bytes, true);
  std::memmove(dst, src, bytes);
}

/// Elements per pipelining chunk (at least one).
inline std::size_t chunk_elems(const Context& ctx, DataType dt) noexcept {
  return std::max<std::size_t>(1, ctx.chunk_bytes / dtype_size(dt));
}

/// Number of chunks of `count` elements (0 for an empty range).
inline std::size_t chunks_of(std::size_t count, std::size_t per_chunk) noexcept {
  return (count + per_chunk - 1) / per_chunk;
}

/// Element offsets of `count` elements split into `n` near-equal blocks (the first
/// count % n blocks get one more element): offsets[i]..offsets[i+1] is block i.
std::vector<std::size_t> even_offsets(std::size_t count, int n);

/// Prefix sums of per-rank counts: offsets[i]..offsets[i+1] is rank i's block.
std::vector<std::size_t> prefix_offsets(std::span<const std::size_t> counts);

/// A rank's place in the binomial tree over relative ranks 0..n-1 (0 is the root): the
/// parent clears the lowest set bit; children are vr + mask for every mask below it.
struct BinomialNode {
  int parent = -1;  ///< relative rank, -1 at the root
  int nchildren = 0;
  // Only the first nchildren entries are set (not zeroed: that was a fifth of an 8 B
  // broadcast's time on its root).
  std::array<int, 32> children;  ///< relative ranks, smallest subtree first
  std::array<int, 32> subtree;   ///< number of ranks under each child (itself included)
  int size = 1;                  ///< ranks in this node's subtree, itself included
};

inline BinomialNode binomial_node(int vr, int n) noexcept {
  BinomialNode node;
  for (int mask = 1; mask < n; mask <<= 1) {
    if ((vr & mask) != 0) {
      node.parent = vr - mask;
      break;
    }
    if (vr + mask < n) {
      node.children[static_cast<std::size_t>(node.nchildren)] = vr + mask;
      node.subtree[static_cast<std::size_t>(node.nchildren)] = std::min(mask, n - vr - mask);
      node.size += node.subtree[static_cast<std::size_t>(node.nchildren)];
      ++node.nchildren;
    }
  }
  return node;
}

/// A fixed-capacity batch of requests whose addresses stay valid while they are posted.
/// Leaving the scope by an exception with requests still in flight aborts the mesh, so the
/// transport drops them before their memory goes away.
/// After a wait that threw: requests of the caller's frame still posted would be left to the
/// mesh, so it is aborted (unless it already failed).
void abort_if_in_flight(transport::Mesh& mesh, std::span<const Request> requests) noexcept;

class Batch {
 public:
  Batch(transport::Mesh& mesh, std::size_t capacity)
      : mesh_(mesh),
        capacity_(capacity),
        heap_(capacity > kInline ? std::make_unique<Request[]>(capacity) : nullptr),
        reqs_(heap_ ? heap_.get() : reinterpret_cast<Request*>(inline_)) {
    // The few requests of a small collective live here, not on the heap: no allocation on
    // the small-message path.
    if (!heap_) std::uninitialized_default_construct_n(reqs_, capacity_);
  }
  ~Batch();
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  /// Posts `r` in the next free slot.
  Request& post(const Request& r) { return post_at(next_, r); }
  /// Posts `r` in slot `i` (for batches filled out of order).
  Request& post_at(std::size_t i, const Request& r) {
    TANDEM_CHECK(i < capacity_ && reqs_[i].peer < 0, "request slot {} of {} unusable", i,
                 capacity_);
    reqs_[i] = r;
    mesh_.post(reqs_[i]);
    next_ = std::max(next_, i + 1);
    return reqs_[i];
  }
  /// Slots used so far (the next post() goes to slot size()).
  std::size_t size() const noexcept { return next_; }
  Request& operator[](std::size_t i) noexcept { return reqs_[i]; }
  /// Waits for request `i`.
  void wait(std::size_t i, Deadline deadline) { mesh_.wait(reqs_[i], deadline); }

 private:
  friend void wait_all(transport::Mesh&, std::initializer_list<Batch*>, Deadline);
  static constexpr std::size_t kInline = 4;
  static_assert(std::is_trivially_destructible_v<Request>);
  transport::Mesh& mesh_;
  std::size_t capacity_;
  std::unique_ptr<Request[]> heap_;  // never resized: posted requests must not move
  alignas(Request) std::byte inline_[kInline * sizeof(Request)];
  Request* reqs_;
  std::size_t next_ = 0;
};

/// Moves every posted request of the mesh on without waiting (mesh.post() only queues).
inline void progress(transport::Mesh& mesh) {
  (void)mesh.test(std::span<Request* const>());
}

/// Waits for every request of the batches (all must have been posted).
void wait_all(transport::Mesh& mesh, std::initializer_list<Batch*> batches, Deadline deadline);

/// Moves `send` and `recv` (Mesh::transfer(), the send first) and waits for both: one
/// exchange step.
void sendrecv(transport::Mesh& mesh, Request& send, Request& recv, Deadline deadline);

/// Message size in bytes by which the selector chooses (what one rank contributes or, for
/// the gathering collectives, the whole result).
std::size_t call_bytes(const Call& call) noexcept;

/// Throws Error(Mismatch): rank `peer` called the same collective as this rank (their
/// messages' tags agree) with `theirs` bytes (an allgather's input, a broadcast's buffer)
/// where this rank has `mine`.
[[noreturn]] void throw_size_mismatch(const Call& call, int peer, std::uint64_t mine,
                                      std::uint64_t theirs);

/// The block arithmetic of a chunk-pipelined ring over blocks `off` (element offsets): in step
/// s (0..n-2) this rank sends block r-s-shift to its right neighbour and receives block
/// r-s-1-shift, the one it sends in step s+1, from its left; every block is cut into chunks of
/// chunk_elems() elements, the same way on every rank.
class RingSteps {
 public:
  RingSteps(const Context& ctx, DataType dt, std::span<const std::size_t> off, int shift)
      : n(ctx.mesh.size()),
        r(ctx.mesh.rank()),
        left(mod(r - 1, n)),
        right(mod(r + 1, n)),
        ce(chunk_elems(ctx, dt)),
        off_(off),
        shift_(shift),
        first_recv_(static_cast<std::size_t>(n)) {}

  const int n, r, left, right;
  const std::size_t ce;  // elements per chunk

  int send_block(int s) const noexcept { return mod(r - s - shift_, n); }
  int recv_block(int s) const noexcept { return send_block(s + 1); }
  std::size_t size_of(int b) const noexcept { return off_[b + 1] - off_[b]; }
  /// Chunks received, resp. sent, over all steps: the sizes of the request batches.
  std::size_t recv_chunks() const noexcept { return chunks(1); }
  std::size_t send_chunks() const noexcept { return chunks(0); }

  /// Posts every receive up front: make(s, b, e, m) is the request for elements [e, e + m) of
  /// block b, received in step s.
  template <class Make>
  void post_receives(Batch& recvs, Make&& make) {
    for (int s = 0; s < n - 1; ++s) {
      const int b = recv_block(s);
      first_recv_[static_cast<std::size_t>(s)] = recvs.size();
      for (std::size_t e = 0; e < size_of(b); e += ce)
        recvs.post(make(s, b, e, std::min(ce, size_of(b) - e)));
    }
  }
  /// Waits for chunk k of the block received in step s (the block sent in step s + 1).
  void wait_received(Batch& recvs, int s, std::size_t k, Deadline deadline) {
    recvs.wait(first_recv_[static_cast<std::size_t>(s)] + k, deadline);
  }

 private:
  std::size_t chunks(int ahead) const noexcept {
    std::size_t total = 0;
    for (int s = 0; s < n - 1; ++s) total += chunks_of(size_of(send_block(s + ahead)), ce);
    return total;
  }
  std::span<const std::size_t> off_;
  int shift_;
  std::vector<std::size_t> first_recv_;
};

}  // namespace tandem::algorithms::detail
