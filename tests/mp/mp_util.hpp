#pragma once
// Helpers of the multi-process communicator tests: typed buffers, inputs chosen so every
// result is exact in its dtype, and an independent reference (plain loops in double).

#include "support/multiproc.hpp"

#include <tandem/communicator.hpp>
#include <tandem/types.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::mptest {

/// Options for run_ranks: "shm", "tcp" (TANDEM_SHM_DISABLE=1), "ucx" or "ucx_tcp" (UCX, its
/// shared memory or its tcp; see mp_util.cpp), a short TANDEM_TIMEOUT so a
/// bug fails instead of hanging, plus `extra` variables.
testing::RunOptions run_options(std::string_view transport, std::vector<std::string> extra = {},
                                std::chrono::seconds timeout = std::chrono::seconds(180));

/// The world communicator of a forked rank (after re-reading TANDEM_DEBUG for its logger).
std::shared_ptr<Communicator> connect(const testing::RankContext& ctx, CommOptions options = {});

/// Kills rank `victim` while the others are inside an allreduce (sum) of `view` on `comm`: the
/// victim SIGKILLs itself once every other rank has said through `store` that it is entering
/// it; every other rank runs it and must fail with PeerLost naming the victim
/// within 15 s (gtest failures otherwise). Returns the survivor's error message (prints it
/// after `label` with the time it took); the victim never returns.
std::string allreduce_while_rank_dies(Communicator& comm, store::Store& store, BufferView view,
                                      int victim, std::string_view label);

/// Host memory for `count` elements of `dtype`, 64-byte aligned.
class Buffer {
 public:
  Buffer() = default;
  Buffer(DataType dtype, std::size_t count);
  BufferView view() const { return {data(), count_, dtype_, Device::cpu()}; }
  /// Elements [offset, offset + n).
  BufferView view(std::size_t offset, std::size_t n) const { return view().slice(offset, n); }
  void* data() const { return count_ == 0 ? nullptr : static_cast<void*>(words_.get()); }
  std::size_t count() const { return count_; }
  DataType dtype() const { return dtype_; }
  std::size_t bytes() const { return count_ * dtype_size(dtype_); }

  void set(std::size_t i, double v);
  double get(std::size_t i) const;
  /// Every byte set to `b` (to see what a collective wrote).
  void poison(unsigned char b = 0xA5);

 private:
  struct Free {
    void operator()(std::uint64_t* p) const;
  };
  std::unique_ptr<std::uint64_t, Free> words_;
  std::size_t count_ = 0;
  DataType dtype_ = DataType::f32;
};

/// Element `i` of rank `rank`'s input of a reduction with `op`: small integers whose
/// reduction over up to 8 ranks is exact in every dtype.
double reduce_input(ReduceOp op, DataType t, int rank, std::size_t i, std::uint32_t seed);
/// The reduction of reduce_input over `world` ranks, as tandem defines it (avg: the sum
/// divided once, in f32 for f32/f16/bf16, truncating for integers).
double reduce_expected(ReduceOp op, DataType t, int world, std::size_t i, std::uint32_t seed);
/// Data of the collectives that move data: distinct small integers, exact in every dtype.
double data_value(DataType t, int rank, std::size_t i, std::uint32_t seed);

/// "" when `got` and `want` are bitwise equal; else where they first differ.
std::string difference(const Buffer& got, const Buffer& want);
std::string difference(const void* got, const Buffer& want);

/// FNV-1a over bytes, to compare outputs across ranks.
std::uint64_t hash_bytes(const void* p, std::size_t n, std::uint64_t h = 1469598103934665603ull);

/// gtest parameter names: the transport itself ("shm", "tcp").
inline std::string transport_name(const ::testing::TestParamInfo<std::string>& p) {
  return p.param;
}

/// Names of every algorithm of `kind`, with "" (the selector's choice) first.
std::vector<std::string> algorithms_of(CollectiveKind kind);

}  // namespace tandem::mptest
