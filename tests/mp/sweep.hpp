#pragma once
// The correctness sweep that runs inside each forked rank: every collective x dtype x op x
// count x in-place/out-of-place x root x forced algorithm, each result compared bitwise
// with an independent reference.

#include "mp_util.hpp"

#include <tandem/communicator.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace tandem::mptest {

/// TANDEM_TEST_SWEEP=lean (the sanitizer stages set it; unset or "full": the whole sweep):
/// what ASan and TSan look for depends on how many bytes an algorithm moves and in how many
/// pieces, not on the values, which the main stage checks in full. So a lean sweep takes
/// one dtype of each element width (sweep_types()) and messages an eighth of the size, cut
/// into pieces an eighth of the size (sweep_env()): as many chunks per message and as full a
/// shared-memory ring as the full sweep. Any other value is an error.
bool lean_sweep();
/// Every DataType, or in a lean sweep f64, f32, bf16 and u8.
std::span<const DataType> sweep_types();
/// The environment a sweep's ranks need on top of run_options()'s: in a lean sweep, the
/// pipelining chunk and shared-memory buffer an eighth of their defaults.
std::vector<std::string> sweep_env();
/// The sweeps' large count: 1<<20 + 3 (1<<17 + 3 in a lean sweep).
std::size_t large_count();

class Sweep {
 public:
  explicit Sweep(Communicator& comm);

  /// Every collective over the small counts {0, 1, 2, 7, 13, world+1, 1031}.
  void small();
  /// Counts of large_count() (pipelined, fills the shm ring) for every algorithm.
  void large();

  int checks() const { return checks_; }
  int skipped() const { return skipped_; }
  /// Hash of every output this rank produced (equal on all ranks where outputs are shared).
  std::uint64_t shared_hash() const { return shared_hash_; }

  // One check each; `algo` "" lets the selector choose.
  void allreduce(const std::string& algo, DataType t, ReduceOp op, std::size_t n, bool inplace);
  void broadcast(const std::string& algo, DataType t, std::size_t n, int root, bool inplace);
  void reduce(const std::string& algo, DataType t, ReduceOp op, std::size_t n, int root,
              bool inplace);
  void allgather(const std::string& algo, DataType t, std::size_t n, bool inplace);
  void allgatherv(const std::string& algo, DataType t, std::size_t base, bool inplace);
  void reduce_scatter(const std::string& algo, DataType t, ReduceOp op, std::size_t n,
                      bool inplace);
  void alltoall(const std::string& algo, DataType t, std::size_t n, bool inplace);
  void gather(const std::string& algo, DataType t, std::size_t n, int root, bool inplace);
  void scatter(const std::string& algo, DataType t, std::size_t n, int root, bool inplace);
  void sendrecv(DataType t, std::size_t n, bool async);
  void barrier(const std::string& algo);

 private:
  std::string context(std::string_view coll, const std::string& algo, DataType t,
                      std::string_view extra) const;
  void expect(const std::string& context, const std::string& diff);
  /// Runs `f`; false (and counted as skipped) when the forced algorithm does not support
  /// the call, which every rank sees alike.
  bool attempt(const std::function<void()>& f);
  std::uint32_t next_seed() { return seed_++; }

  Communicator& c_;
  int rank_;
  int world_;
  std::vector<std::size_t> counts_;
  std::vector<int> roots_;
  std::uint32_t seed_ = 1;
  int checks_ = 0;
  int failures_ = 0;
  int skipped_ = 0;
  std::uint64_t shared_hash_ = 1469598103934665603ull;
};

}  // namespace tandem::mptest
