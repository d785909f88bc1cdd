#pragma once
// Helpers of the Reducer tests: a fake "model" (gradient buffers of varied dtypes and sizes),
// rank-dependent exact gradient values, the averages tandem must produce, and the orders in
// which ranks mark gradients ready.

#include "ddp/aligned_buffer.hpp"
#include "support/multiproc.hpp"
#include "support/rank_checks.hpp"

#include <tandem/communicator.hpp>
#include <tandem/ddp.hpp>
#include <tandem/types.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem::ddptest {

struct ParamSpec {
  DataType dtype;
  std::size_t count;
};

/// Parameters of several dtypes and sizes (zero, one, prime counts, > 1 MiB).
std::vector<ParamSpec> varied_model();
/// Only f32, the shapes of the Fashion-MNIST CNN (conv, conv, fc, fc: weights and biases).
std::vector<ParamSpec> cnn_model();

/// Gradient storage of a fake model: one 64-byte-aligned buffer per parameter.
class FakeModel {
 public:
  explicit FakeModel(std::vector<ParamSpec> specs);
  std::size_t size() const { return specs_.size(); }
  const ParamSpec& spec(std::size_t i) const { return specs_[i]; }
  /// Views of every gradient (what a framework registers).
  std::vector<BufferView> views() const;
  BufferView view(std::size_t i) const;

 private:
  std::vector<ParamSpec> specs_;
  std::vector<ddp::AlignedBuffer> grads_;
};

/// Element k of a view as a double / set from a double (every dtype, f16 and bf16 rounded).
double get(const BufferView& v, std::size_t k);
void set(const BufferView& v, std::size_t k, double x);

/// Rank `rank`'s gradient value of element k of parameter p in step t: a small integer, so
/// sums over ranks (and over a few steps) are exact in every dtype.
double contribution(int rank, std::size_t p, std::size_t k, int t);
/// Writes contribution(rank, p, ., t) into `v` (or adds it, to accumulate like a framework).
void fill(const BufferView& v, int rank, std::size_t p, int t, bool add = false);
/// What tandem's average of a sum over `world` ranks is in `dtype`: the sum divided once in
/// the dtype's arithmetic (f32 for f16/bf16, then rounded; truncating for integers).
double average_of(double sum, int world, DataType dtype);

/// Counts elements of `v` that differ from average_of(sum over ranks and steps [t0, t1]).
std::size_t wrong_averages(const BufferView& v, std::size_t p, int world, int t0, int t1);

/// The order in which rank r marks n parameters ready in step t: rank 0 in reverse
/// registration order, rank 1 in a shuffled order, rank 2 in registration order, others
/// shuffled differently; t changes the shuffle.
std::vector<std::size_t> ready_order(int rank, std::size_t n, int t);

/// FNV-1a over the bytes of every gradient.
std::uint64_t hash_gradients(const std::vector<BufferView>& views);

/// One synchronised backward pass of `m` on `r`: every parameter filled for pass `t` and marked
/// ready in reverse order (as autograd does), then finalize_backward().
void backward_pass(ddp::Reducer& r, const FakeModel& m, int rank, int t);
using tandem::testing::same_on_every_rank;

/// Options for run_ranks: a short TANDEM_TIMEOUT so a bug fails instead of hanging.
testing::RunOptions run_options(std::vector<std::string> extra = {});
/// The world communicator of a forked rank.
std::shared_ptr<Communicator> connect(const testing::RankContext& ctx);

}  // namespace tandem::ddptest
