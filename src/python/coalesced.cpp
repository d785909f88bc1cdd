// torch 2.x's coalesced calls (all_gather_coalesced, the *_into_tensor/_tensor_coalesced pairs
// that functional collectives and _coalescing_manager issue) and coalescing blocks
// (batch_isend_irecv): each is one c10d Work over the tandem operations behind it.

#include "python/group.hpp"

#include <tandem/error.hpp>

#include <cstddef>

namespace tandem::python {
namespace {

// The byte offset of each tensor of `list` when they are laid end to end, each starting on a
// 16-byte boundary (so that every slice can be viewed as its tensor's dtype); the last entry
// is the total.
std::vector<std::int64_t> packed_offsets(const Tensors& list) {
  constexpr std::int64_t kAlign = 16;
  std::vector<std::int64_t> offset(list.size() + 1, 0);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto bytes = static_cast<std::int64_t>(list[i].nbytes());
    offset[i + 1] = offset[i] + (bytes + kAlign - 1) / kAlign * kAlign;
  }
  return offset;
}

// The bytes [from, from + t.nbytes()) of the 1-D byte tensor `bytes`, as a tensor shaped like t.
at::Tensor slice_as(const at::Tensor& bytes, std::int64_t from, const at::Tensor& t) {
  return bytes.narrow(0, from, static_cast<std::int64_t>(t.nbytes()))
      .view(t.scalar_type())
      .view(t.sizes());
}

}  // namespace

WorkPtr Group::allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs) {
  constexpr std::string_view name = "all_gather_coalesced";
  TANDEM_CHECK_ARG(!inputs.empty(), "{}: no input tensor given", name);
  TANDEM_CHECK_ARG(outputs.size() == static_cast<std::size_t>(size_),
                   "{}: output_tensor_lists has {} lists; it needs one per rank ({})", name,
                   outputs.size(), size_);
  for (const auto& t : inputs) check_tensor(t, name);
  for (std::size_t r = 0; r < outputs.size(); ++r) {
    TANDEM_CHECK_ARG(outputs[r].size() == inputs.size(),
                     "{}: output_tensor_lists[{}] has {} tensors; it needs one per input ({})",
                     name, r, outputs[r].size(), inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      check_tensor(outputs[r][i], name);
      TANDEM_CHECK_ARG(outputs[r][i].scalar_type() == inputs[i].scalar_type() &&
                           outputs[r][i].numel() == inputs[i].numel(),
                       "{}: output_tensor_lists[{}][{}] is {} x {} where {} x {} (input {}) was "
                       "expected",
                       name, r, i, c10::toString(outputs[r][i].scalar_type()),
                       outputs[r][i].numel(), c10::toString(inputs[i].scalar_type()),
                       inputs[i].numel(), i);
    }
  }
  // Every input, whatever its dtype, travels in one exchange as bytes.
  const auto offset = packed_offsets(inputs);
  const auto block = offset.back();
  const auto bytes = at::TensorOptions().dtype(at::kByte).device(inputs[0].device());
  const auto in = pool_->take(block, bytes);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    slice_as(in, offset[i], inputs[i]).copy_(inputs[i]);
  const auto out = pool_->take(block * size_, bytes);
  auto part =
      comm()->allgather_async(view_of(in, false, name), view_of(out, false, name), on_stream(in));
  Tensors flat_outputs;
  for (const auto& list : outputs)
    flat_outputs.insert(flat_outputs.end(), list.begin(), list.end());
  auto done = [out, outputs, offset, block] {
    for (std::size_t r = 0; r < outputs.size(); ++r) {
      for (std::size_t i = 0; i < outputs[r].size(); ++i)
        outputs[r][i].copy_(
            slice_as(out, static_cast<std::int64_t>(r) * block + offset[i], outputs[r][i]));
    }
  };
  return launch(c10d::OpType::ALLGATHER_COALESCED, std::move(flat_outputs), {part}, std::move(done),
                {in, out});
}

WorkPtr Group::allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs) {
  TANDEM_CHECK_ARG(!inputs.empty() && outputs.size() == inputs.size(),
                   "all_gather_into_tensor_coalesced: {} outputs for {} inputs; give one output "
                   "per input",
                   outputs.size(), inputs.size());
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    pieces.push_back(allgather_piece(outputs[i], inputs[i]));
  return launch_pieces(c10d::OpType::COALESCED, outputs, std::move(pieces));
}

WorkPtr Group::reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                               const c10d::ReduceScatterOptions& opts) {
  TANDEM_CHECK_ARG(!inputs.empty() && outputs.size() == inputs.size(),
                   "reduce_scatter_tensor_coalesced: {} outputs for {} inputs; give one output "
                   "per input",
                   outputs.size(), inputs.size());
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    pieces.push_back(reduce_scatter_piece(outputs[i], inputs[i], opts.reduceOp));
  return launch_pieces(c10d::OpType::COALESCED, outputs, std::move(pieces));
}

void Group::start_coalescing() {
  std::lock_guard lock(block_mutex_);
  TANDEM_CHECK_ARG(!coalescing_,
                   "startCoalescing: a coalescing block of this group is open already; end it "
                   "(endCoalescing) before starting another");
  coalescing_ = true;
  block_.clear();
}

WorkPtr Group::end_coalescing() {
  std::vector<c10::intrusive_ptr<TandemWork>> block;
  {
    std::lock_guard lock(block_mutex_);
    TANDEM_CHECK_ARG(coalescing_,
                     "endCoalescing: no coalescing block of this group is open "
                     "(startCoalescing first)");
    coalescing_ = false;
    block.swap(block_);
  }
  Tensors outputs;
  for (const auto& w : block) {
    auto r = w->result();
    outputs.insert(outputs.end(), r.begin(), r.end());
  }
  auto work = c10::make_intrusive<TandemWork>(rank_, c10d::OpType::COALESCED, std::move(outputs),
                                              timeout());
  work->track_works(block);
  return work;
}

}  // namespace tandem::python
