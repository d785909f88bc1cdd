// all_reduce of a sparse COO tensor (DDP's sparse gradients, nn.Embedding(sparse=True)): every
// rank's indices and values are gathered, and each rank sums them into one coalesced tensor,
// as Gloo does. The counts of nonzeros are exchanged first, on the calling thread: the
// gathers that follow need them.

#include "python/group.hpp"

#include <tandem/error.hpp>

#include <functional>
#include <numeric>

namespace tandem::python {

WorkPtr Group::allreduce_sparse(Tensors& tensors, const c10d::AllreduceOptions& opts) {
  constexpr std::string_view name = "all_reduce (sparse)";
  TANDEM_CHECK_ARG(tensors.size() == 1,
                   "{}: backend 'tandem' takes one tensor per rank here, not {} (one process "
                   "per device)",
                   name, tensors.size());
  const at::Tensor& t = tensors[0];
  TANDEM_CHECK_ARG(t.layout() == at::kSparse && t.device().is_cpu(),
                   "{}: expected a sparse COO tensor on the CPU, got a {} tensor on {}", name,
                   c10::toString(t.layout()), t.device().str());
  const auto op = opts.reduceOp.op_;
  TANDEM_CHECK_ARG(op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::AVG,
                   "{}: sparse tensors are summed (SUM) or averaged (AVG); for another "
                   "operation, reduce t.to_dense()",
                   name);
  const auto input = t.coalesce();
  const auto indices = input._indices().contiguous();  // sparse_dim x nnz, int64
  const auto values = input._values().contiguous();    // nnz x the dense dimensions
  const std::int64_t nnz = indices.size(1);
  const std::int64_t sparse_dim = indices.size(0);
  const auto dense = values.sizes().slice(1);  // each nonzero's dense part
  const std::int64_t row =
      std::accumulate(dense.begin(), dense.end(), std::int64_t{1}, std::multiplies<>());
  const auto c = comm();

  auto mine = at::tensor({nnz}, at::kLong);
  auto counts = at::empty({size_}, at::kLong);
  c->allgather(view_of(mine, false, name), view_of(counts, false, name));
  const auto* per_rank = counts.data_ptr<std::int64_t>();
  const std::int64_t total = std::accumulate(per_rank, per_rank + size_, std::int64_t{0});

  auto all_indices = at::empty({sparse_dim * total}, at::kLong);
  auto all_values = at::empty({total * row}, values.options());
  std::vector<std::size_t> index_counts(static_cast<std::size_t>(size_));
  std::vector<std::size_t> value_counts(static_cast<std::size_t>(size_));
  // Counts are in the views' units: a value type tandem lacks travels as bytes.
  const auto vin = view_of(values, false, name);
  const auto unit = static_cast<std::size_t>(values.element_size()) / dtype_size(vin.dtype);
  for (int r = 0; r < size_; ++r) {
    index_counts[static_cast<std::size_t>(r)] = static_cast<std::size_t>(sparse_dim * per_rank[r]);
    value_counts[static_cast<std::size_t>(r)] = static_cast<std::size_t>(per_rank[r] * row) * unit;
  }
  const auto flat_indices = indices.view({-1});
  auto gather_indices = c->allgatherv_async(view_of(flat_indices, false, name),
                                            view_of(all_indices, false, name), index_counts);
  auto gather_values = c->allgatherv_async(vin, view_of(all_values, false, name), value_counts);

  std::vector<std::int64_t> nnz_of(per_rank, per_rank + size_);
  const bool average = op == c10d::ReduceOp::AVG;
  const int world = size_;
  auto done = [t, input, all_indices, all_values, nnz_of, sparse_dim, average, world] {
    // Rank r's indices are a sparse_dim x nnz_r block of their own.
    Tensors blocks;
    std::int64_t at = 0;
    for (const std::int64_t n : nnz_of) {
      blocks.push_back(all_indices.narrow(0, at, sparse_dim * n).view({sparse_dim, n}));
      at += sparse_dim * n;
    }
    auto value_shape = input._values().sizes().vec();
    value_shape[0] = std::accumulate(nnz_of.begin(), nnz_of.end(), std::int64_t{0});
    auto sum = at::sparse_coo_tensor(at::cat(blocks, 1), all_values.view(value_shape),
                                     input.sizes(), input.options())
                   .coalesce();
    if (average) sum = sum / world;
    t.copy_(sum);
  };
  return launch(c10d::OpType::ALLREDUCE, tensors, {gather_indices, gather_values}, std::move(done),
                {indices, values, all_indices, all_values});
}

}  // namespace tandem::python
