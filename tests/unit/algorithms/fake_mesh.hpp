#pragma once
// An in-process Mesh for testing algorithms: one thread per rank, one FIFO channel per
// ordered pair of ranks. It keeps the transport's contract and is deliberately unkind:
//  - a channel buffers less than the message (from all of it down to 1/16, at least 64
//    bytes, chosen at random whenever it drains), so an algorithm that waits for a send
//    before posting the matching receive deadlocks (and fails with Timeout) as it would on a
//    real shared-memory ring;
//  - bytes move in random-sized pieces, and only while the owning rank is inside wait() or
//    test() (no background progress), with random yields between progress passes;
//  - a receive whose tag or size differs from the incoming message fails with Mismatch;
//    recv_reduce goes through core::reduce piece by piece; waits honour their deadline;
//  - a send reads its source bytes lazily, piece by piece, so overwriting a buffer that a
//    pending send still reads corrupts the result, as it would with a real transport.
// An error on one rank poisons the whole world: the others fail with Aborted at once.

#include "transport/mesh.hpp"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace tandem::testing {

struct FakeOptions {
  std::size_t min_capacity = 64;       ///< smallest channel buffer (bytes)
  std::size_t max_capacity = 1 << 20;  ///< largest channel buffer (bytes)
  std::size_t max_piece = 16 << 10;    ///< largest piece moved at once
  std::uint64_t seed = 1;
};

class FakeMesh;

/// what() of an exception_ptr ("" for nullptr).
std::string describe(const std::exception_ptr& e);

class FakeWorld {
 public:
  explicit FakeWorld(int size, FakeOptions options = {});
  ~FakeWorld();
  FakeWorld(const FakeWorld&) = delete;
  FakeWorld& operator=(const FakeWorld&) = delete;

  int size() const noexcept { return size_; }
  transport::Mesh& mesh(int rank);

  /// Runs fn(rank, mesh) on one thread per rank and joins them. Returns each rank's
  /// exception (nullptr where it returned normally). A rank that throws aborts the world.
  std::vector<std::exception_ptr> run(const std::function<void(int, transport::Mesh&)>& fn);

  /// Requests posted by `rank` and not yet complete.
  std::size_t pending(int rank) const;
  /// Sends `rank` has posted since the world was made.
  std::size_t sends_posted(int rank) const;
  /// Bytes or messages still sitting in any channel, or receives still posted.
  bool idle() const;
  /// Clears a poisoned world so that it can be used again.
  void reset();

 private:
  friend class FakeMesh;

  /// what() of an exception_ptr ("" for nullptr).
  std::string describe(const std::exception_ptr& e);

  struct Message {
    std::uint32_t tag = 0;
    std::vector<std::byte> data;
    std::size_t written = 0;
    std::size_t read = 0;
  };
  struct Channel {
    std::deque<transport::Request*> sends;  // posted by the source rank
    std::deque<transport::Request*> recvs;  // posted by the destination rank
    std::deque<Message> msgs;
    std::size_t buffered = 0;
    std::size_t capacity = 0;
  };

  Channel& channel(int src, int dst) {
    return channels_[static_cast<std::size_t>(src * size_ + dst)];
  }
  std::size_t piece(std::size_t limit);         // random in [1, min(limit, max_piece)]
  bool progress(int rank);                      // under mu_; true if anything moved; may throw
  void poison(int rank, std::exception_ptr e);  // under mu_

  int size_;
  FakeOptions options_;
  mutable std::mutex mu_;
  std::vector<std::condition_variable> wake_;  // one per rank
  std::vector<Channel> channels_;
  std::vector<std::size_t> pending_;
  std::vector<std::size_t> sends_posted_;
  std::mt19937_64 rng_;
  std::exception_ptr error_;
  int error_rank_ = -1;
  std::vector<std::unique_ptr<FakeMesh>> meshes_;
};

}  // namespace tandem::testing
