#include "python/group.hpp"

#include "python/tensors.hpp"
#include "python/work.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <optional>

namespace tandem::python {
namespace {

// Tags of the sends and receives an uneven all_to_all is made of: above every tag a Python
// program can give (torch tags are non-negative ints), so that they never match a user's.
constexpr std::uint32_t kAlltoallTag = 0x80000000u;

std::size_t elements(const at::Tensor& t) {
  return static_cast<std::size_t>(t.numel());
}

void check_one(const Tensors& tensors, std::string_view collective) {
  TANDEM_CHECK_ARG(tensors.size() == 1,
                   "{}: backend 'tandem' takes one tensor per rank here, not {} (one process "
                   "per device)",
                   collective, tensors.size());
}

void check_root(int root, int size, std::string_view collective) {
  TANDEM_CHECK_ARG(root >= 0 && root < size, "{}: root rank {} is not in this group of {} ranks",
                   collective, root, size);
}

// Reduces the tensors of one rank's list into one contiguous tensor, as the ranks' tensors
// are reduced (AVG sums here: the division by the list's length follows the allreduce).
at::Tensor combine(const Tensors& list, const c10d::ReduceOp& op) {
  const auto stacked = at::stack(list);
  switch (op.op_) {
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR: {
      auto acc = list[0].clone();
      for (std::size_t i = 1; i < list.size(); ++i) {
        if (op.op_ == c10d::ReduceOp::BAND) acc.bitwise_and_(list[i]);
        if (op.op_ == c10d::ReduceOp::BOR) acc.bitwise_or_(list[i]);
        if (op.op_ == c10d::ReduceOp::BXOR) acc.bitwise_xor_(list[i]);
      }
      return acc;
    }
    case c10d::ReduceOp::PRODUCT:
      return stacked.prod(0).to(list[0].scalar_type());
    case c10d::ReduceOp::MIN:
      return std::get<0>(stacked.min(0));
    case c10d::ReduceOp::MAX:
      return std::get<0>(stacked.max(0));
    default:
      return stacked.sum(0).to(list[0].scalar_type());
  }
}

// One view over the whole list when its tensors lie back to back in memory (the blocks of one
// tensor, as torch.split/chunk make them): the collective writes there, no staging copy.
std::optional<BufferView> adjacent(const Tensors& list) {
  if (list.empty() || !list[0].is_contiguous()) return std::nullopt;
  const auto* base = static_cast<const std::byte*>(list[0].data_ptr());
  const auto block = static_cast<std::size_t>(list[0].nbytes());
  for (std::size_t i = 1; i < list.size(); ++i) {
    if (!list[i].is_contiguous() ||
        static_cast<const std::byte*>(list[i].data_ptr()) != base + i * block)
      return std::nullopt;
  }
  auto v = view_of(list[0], false, "all_gather");
  v.count *= list.size();
  return v;
}

// What completes a call whose result landed in `s`'s buffer: nothing, or the copy back.
std::function<void()> copy_back(const Staged& s) {
  if (!s.copied()) return {};
  return [s] { s.copy_back(); };
}

CommOptions group_options(std::chrono::milliseconds timeout, std::string prefix) {
  CommOptions options;
  options.timeout = timeout;
  options.store_prefix = std::move(prefix);
  // torch.distributed's blocking calls wait right away: the waiting thread runs them, and
  // no call pays for waking the worker (docs/python.md); asynchronous ones (DDP's buckets)
  // start within 200 us when nobody waits for them.
  options.lazy_start = std::chrono::microseconds(200);
  return options;
}

}  // namespace

Group::Group(std::shared_ptr<store::Store> store, int rank, int size,
             std::chrono::milliseconds timeout, Start start)
    : rank_(rank), size_(size), timeout_(timeout), configured_(start == Start::now) {
  if (start == Start::at_reconfigure) return;
  // The store is this group's own (torch puts every group under a prefix of its own).
  comm_ = Communicator::create(std::move(store), rank, size, group_options(timeout, "tandem"));
  timeout_ = comm_->shared_timeout();
}

Group::Group(std::shared_ptr<Communicator> comm)
    : rank_(comm->rank()),
      size_(comm->size()),
      timeout_(comm->shared_timeout()),
      comm_(std::move(comm)) {}

Group::~Group() = default;

std::shared_ptr<Communicator> Group::shrink(std::span<const int> exclude, bool abort_first,
                                            std::chrono::milliseconds timeout) {
  std::shared_ptr<Communicator> parent = comm();
  if (abort_first) abort();
  auto child = parent->shrink(exclude);
  child->set_timeout(timeout);
  return child;
}

void Group::reconfigure(std::shared_ptr<store::Store> store, std::string prefix, int rank, int size,
                        std::chrono::milliseconds setup_timeout) {
  const auto call_timeout = timeout();
  auto next = Communicator::create(std::move(store), rank, size,
                                   group_options(setup_timeout, std::move(prefix)));
  next->set_timeout(call_timeout);
  std::shared_ptr<Communicator> previous;
  {
    std::lock_guard lock(mutex_);
    previous.swap(comm_);
    comm_ = next;
    rank_ = rank;
    size_ = size;
    configured_ = true;
  }
  timeout_ = next->shared_timeout();
  seq_.store(0, std::memory_order_relaxed);
  // A goodbye to the previous peers; closing joins threads and unmaps memory, which need not
  // hold up the caller.
  if (previous) run_later([previous = std::move(previous)]() mutable { previous.reset(); });
}

std::shared_ptr<Communicator> Group::comm() {
  std::lock_guard lock(mutex_);
  if (!comm_ && !configured_) {
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "this process group of backend 'tandem' was created with "
                 "enable_reconfigure=True and has no members yet: call "
                 "torch.distributed._reconfigure(uuid, handles, group) on every member first");
  }
  if (!comm_) {
    TANDEM_THROW(ErrorCode::Aborted,
                 "this process group of backend 'tandem' was shut down (destroy_process_group or "
                 "interpreter exit); create a new one");
  }
  return comm_;
}

void Group::set_timeout(std::chrono::milliseconds timeout) {
  comm()->set_timeout(timeout);
}

void Group::shutdown() {
  std::shared_ptr<Communicator> comm;
  {
    std::lock_guard lock(mutex_);
    comm.swap(comm_);
  }
  // The last reference may be held by a call in flight on another thread: it closes then.
}

void Group::abort() {
  std::shared_ptr<Communicator> comm;
  {
    std::lock_guard lock(mutex_);
    comm.swap(comm_);
  }
  if (!comm) return;
  comm->abort("the process group was aborted on this rank (ProcessGroup.abort)");
  // The calls in flight have failed and the peers were told; the rest of the closing (joining
  // the communicator's threads, unmapping its memory) need not hold up the caller: torchft's
  // configure() aborts the failed quorum's group just before it makes the next one.
  run_later([comm = std::move(comm)]() mutable { comm.reset(); });
}

WorkPtr Group::launch(c10d::OpType type, Tensors outputs, std::vector<std::shared_ptr<Work>> parts,
                      std::function<void()> on_success, Tensors keep) {
  seq_.fetch_add(1, std::memory_order_relaxed);
  auto work = c10::make_intrusive<TandemWork>(rank_, type, std::move(outputs), timeout());
  work->track(std::move(parts), std::move(on_success), std::move(keep));
  {
    std::lock_guard lock(block_mutex_);
    if (coalescing_) block_.push_back(work);
  }
  return work;
}

WorkPtr Group::launch_pieces(c10d::OpType type, Tensors outputs, std::vector<Piece> pieces) {
  std::vector<std::shared_ptr<Work>> parts;
  std::vector<std::function<void()>> dones;
  Tensors keep;
  for (auto& p : pieces) {
    parts.push_back(std::move(p.part));
    if (p.done) dones.push_back(std::move(p.done));
    keep.insert(keep.end(), p.keep.begin(), p.keep.end());
  }
  std::function<void()> done;
  if (!dones.empty()) {
    done = [dones = std::move(dones)] {
      for (const auto& d : dones) d();
    };
  }
  return launch(type, std::move(outputs), std::move(parts), std::move(done), std::move(keep));
}

WorkPtr Group::broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) {
  constexpr std::string_view name = "broadcast";
  TANDEM_CHECK_ARG(!tensors.empty(), "{}: no tensor given", name);
  check_root(static_cast<int>(opts.rootRank), size_, name);
  const auto index = rank_ == opts.rootRank ? static_cast<std::size_t>(opts.rootTensor) : 0;
  TANDEM_CHECK_ARG(index < tensors.size(), "{}: rootTensor {} is not in the list of {} tensors",
                   name, opts.rootTensor, tensors.size());
  check_same_layout(tensors, tensors[index], "tensors", name);
  const auto s = Staged::of(tensors[index]);
  const auto v = view_of(s.buffer, false, name);
  auto part = comm()->broadcast_async(v, v, static_cast<int>(opts.rootRank), on_stream(s.buffer));
  std::function<void()> done;
  if (s.copied() || tensors.size() > 1) {
    done = [s, tensors, index] {
      s.copy_back();
      for (std::size_t i = 0; i < tensors.size(); ++i)
        if (i != index) tensors[i].copy_(s.buffer.view(tensors[i].sizes()));
    };
  }
  return launch(c10d::OpType::BROADCAST, tensors, {part}, std::move(done), {s.buffer});
}

WorkPtr Group::allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) {
  constexpr std::string_view name = "all_reduce";
  TANDEM_CHECK_ARG(!tensors.empty(), "{}: no tensor given", name);
  if (tensors[0].layout() == at::kSparse) return allreduce_sparse(tensors, opts);
  const auto type = tensors[0].scalar_type();
  const ReduceOp op = reduce_op_of(opts.reduceOp, type, name);
  if (tensors.size() == 1) {
    const auto s = Staged::reducing(tensors[0], opts.reduceOp);
    const auto v = view_of(s.buffer, true, name);
    auto part = comm()->allreduce_async(v, v, op, on_stream(s.buffer));
    auto done = copy_back(s);
    return launch(c10d::OpType::ALLREDUCE, tensors, {part}, std::move(done), {s.buffer});
  }
  // Several tensors on one rank: all of them, on every rank, are reduced into each.
  check_same_layout(tensors, tensors[0], "tensors", name);
  TANDEM_CHECK_ARG(type != at::kBool && !at::isComplexType(type) && !at::isFloat8Type(type) &&
                       (at::isFloatingType(type) || opts.reduceOp.op_ != c10d::ReduceOp::AVG),
                   "{}: a list of several {} tensors per rank is not supported with this "
                   "ReduceOp; pass one tensor per rank (as NCCL requires)",
                   name, c10::toString(type));
  const auto acc = combine(tensors, opts.reduceOp).contiguous();
  const auto v = view_of(acc, true, name);
  premultiply_(acc, opts.reduceOp);
  auto part = comm()->allreduce_async(v, v, op, on_stream(acc));
  const bool average = opts.reduceOp.op_ == c10d::ReduceOp::AVG;
  auto done = [acc, tensors, average] {
    if (average) acc.div_(static_cast<double>(tensors.size()));
    for (const auto& t : tensors) t.copy_(acc.view(t.sizes()));
  };
  return launch(c10d::OpType::ALLREDUCE, tensors, {part}, std::move(done), {acc});
}

WorkPtr Group::allreduce_coalesced(Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  constexpr std::string_view name = "all_reduce_coalesced";
  TANDEM_CHECK_ARG(!tensors.empty(), "{}: no tensor given", name);
  // One allreduce per dtype, in the order the dtypes first occur (the same on every rank),
  // and one work for all: _coalescing_manager blocks may mix dtypes, as NCCL's groups do.
  std::vector<at::ScalarType> types;
  std::vector<Tensors> by_type;
  for (const auto& t : tensors) {
    check_tensor(t, name);
    const auto it = std::find(types.begin(), types.end(), t.scalar_type());
    if (it == types.end()) {
      types.push_back(t.scalar_type());
      by_type.push_back({t});
    } else {
      by_type[static_cast<std::size_t>(it - types.begin())].push_back(t);
    }
  }
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < types.size(); ++i) {
    const ReduceOp op = reduce_op_of(opts.reduceOp, types[i], name);
    const auto flat = reduction_buffer(flatten(by_type[i], *pool_), opts.reduceOp, false);
    const auto v = view_of(flat, true, name);
    auto part = comm()->allreduce_async(v, v, op, on_stream(flat));
    pieces.push_back(
        {std::move(part), [flat, list = by_type[i]] { unflatten(flat, list); }, {flat}});
  }
  return launch_pieces(c10d::OpType::ALLREDUCE_COALESCED, tensors, std::move(pieces));
}

WorkPtr Group::reduce(Tensors& tensors, const c10d::ReduceOptions& opts) {
  constexpr std::string_view name = "reduce";
  check_one(tensors, name);
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, size_, name);
  const ReduceOp op = reduce_op_of(opts.reduceOp, tensors[0].scalar_type(), name);
  // PREMUL_SUM scales a copy: a rank other than the root keeps its tensor as it was.
  const auto s = Staged::reducing(tensors[0], opts.reduceOp, is_premul(opts.reduceOp));
  const auto v = view_of(s.buffer, true, name);
  auto part = comm()->reduce_async(v, v, op, root, on_stream(s.buffer));
  std::function<void()> done;
  if (s.copied() && rank_ == root) done = [s] { s.copy_back(); };
  return launch(c10d::OpType::REDUCE, tensors, {part}, std::move(done), {s.buffer});
}

WorkPtr Group::allgather(std::vector<Tensors>& outputs, Tensors& inputs) {
  constexpr std::string_view name = "all_gather";
  check_one(inputs, name);
  TANDEM_CHECK_ARG(outputs.size() == 1, "{}: expected one output list, got {}", name,
                   outputs.size());
  auto& list = outputs[0];
  TANDEM_CHECK_ARG(list.size() == static_cast<std::size_t>(size_),
                   "{}: the output list has {} tensors; it needs one per rank ({})", name,
                   list.size(), size_);
  check_tensor(inputs[0], name);
  check_same_layout(list, inputs[0], "tensor_list", name);
  const auto in = inputs[0].contiguous();
  if (const auto direct = adjacent(list)) {
    auto part = comm()->allgather_async(view_of(in, false, name), *direct, on_stream(in));
    return launch(c10d::OpType::ALLGATHER, list, {part}, {}, {in});
  }
  const auto flat = pool_->take(static_cast<std::int64_t>(size_) * in.numel(), in.options());
  auto part =
      comm()->allgather_async(view_of(in, false, name), view_of(flat, false, name), on_stream(in));
  return launch(c10d::OpType::ALLGATHER, list, {part}, [flat, list] { unflatten(flat, list); },
                {in, flat});
}

Group::Piece Group::allgather_piece(const at::Tensor& output, const at::Tensor& input) {
  constexpr std::string_view name = "all_gather_into_tensor";
  check_tensor(output, name);
  check_tensor(input, name);
  TANDEM_CHECK_ARG(output.scalar_type() == input.scalar_type() &&
                       elements(output) == elements(input) * static_cast<std::size_t>(size_),
                   "{}: the output tensor is {} x {}; it must be {} x {} (world size x input)",
                   name, c10::toString(output.scalar_type()), output.numel(),
                   c10::toString(input.scalar_type()), input.numel() * size_);
  const auto in = input.contiguous();
  const auto s = Staged::of(output);
  auto part = comm()->allgather_async(view_of(in, false, name), view_of(s.buffer, false, name),
                                      on_stream(in));
  return {std::move(part), copy_back(s), {in, s.buffer}};
}

WorkPtr Group::allgather_base(at::Tensor& output, at::Tensor& input) {
  return launch_pieces(c10d::OpType::_ALLGATHER_BASE, {output}, {allgather_piece(output, input)});
}

WorkPtr Group::gather(std::vector<Tensors>& outputs, Tensors& inputs,
                      const c10d::GatherOptions& opts) {
  constexpr std::string_view name = "gather";
  check_one(inputs, name);
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, size_, name);
  check_tensor(inputs[0], name);
  const auto in = inputs[0].contiguous();
  if (rank_ != root) {
    TANDEM_CHECK_ARG(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                     "{}: only the root (rank {}) passes a gather_list", name, root);
    auto part = comm()->gather_async(view_of(in, false, name), {}, root, on_stream(in));
    return launch(c10d::OpType::GATHER, {}, {part}, {}, {in});
  }
  TANDEM_CHECK_ARG(outputs.size() == 1 && outputs[0].size() == static_cast<std::size_t>(size_),
                   "{}: the root needs a gather_list of {} tensors (one per rank)", name, size_);
  auto& list = outputs[0];
  check_same_layout(list, in, "gather_list", name);
  if (const auto direct = adjacent(list)) {
    auto part = comm()->gather_async(view_of(in, false, name), *direct, root, on_stream(in));
    return launch(c10d::OpType::GATHER, list, {part}, {}, {in});
  }
  const auto flat = pool_->take(static_cast<std::int64_t>(size_) * in.numel(), in.options());
  auto part = comm()->gather_async(view_of(in, false, name), view_of(flat, false, name), root,
                                   on_stream(in));
  return launch(c10d::OpType::GATHER, list, {part}, [flat, list] { unflatten(flat, list); },
                {in, flat});
}

WorkPtr Group::scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                       const c10d::ScatterOptions& opts) {
  constexpr std::string_view name = "scatter";
  check_one(outputs, name);
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, size_, name);
  check_tensor(outputs[0], name);
  const auto s = Staged::of(outputs[0]);
  auto done = copy_back(s);
  if (rank_ != root) {
    TANDEM_CHECK_ARG(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                     "{}: only the root (rank {}) passes a scatter_list", name, root);
    auto part =
        comm()->scatter_async({}, view_of(s.buffer, false, name), root, on_stream(s.buffer));
    return launch(c10d::OpType::SCATTER, outputs, {part}, std::move(done), {s.buffer});
  }
  TANDEM_CHECK_ARG(inputs.size() == 1 && inputs[0].size() == static_cast<std::size_t>(size_),
                   "{}: the root needs a scatter_list of {} tensors (one per rank)", name, size_);
  check_same_layout(inputs[0], outputs[0], "scatter_list", name);
  const auto flat = flatten(inputs[0], *pool_);
  auto part = comm()->scatter_async(view_of(flat, false, name), view_of(s.buffer, false, name),
                                    root, on_stream(flat));
  return launch(c10d::OpType::SCATTER, outputs, {part}, std::move(done), {flat, s.buffer});
}

WorkPtr Group::reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                              const c10d::ReduceScatterOptions& opts) {
  constexpr std::string_view name = "reduce_scatter";
  check_one(outputs, name);
  TANDEM_CHECK_ARG(inputs.size() == 1 && inputs[0].size() == static_cast<std::size_t>(size_),
                   "{}: input_list needs {} tensors (one per rank)", name, size_);
  check_tensor(outputs[0], name);
  check_same_layout(inputs[0], outputs[0], "input_list", name);
  const ReduceOp op = reduce_op_of(opts.reduceOp, outputs[0].scalar_type(), name);
  const auto flat = reduction_buffer(flatten(inputs[0], *pool_), opts.reduceOp, false);
  const auto s = Staged::result(outputs[0], opts.reduceOp);
  auto part = comm()->reduce_scatter_async(view_of(flat, true, name), view_of(s.buffer, true, name),
                                           op, on_stream(flat));
  auto done = copy_back(s);
  return launch(c10d::OpType::REDUCE_SCATTER, outputs, {part}, std::move(done), {flat, s.buffer});
}

Group::Piece Group::reduce_scatter_piece(const at::Tensor& output, const at::Tensor& input,
                                         const c10d::ReduceOp& reduce_op) {
  constexpr std::string_view name = "reduce_scatter_tensor";
  check_tensor(output, name);
  check_tensor(input, name);
  TANDEM_CHECK_ARG(output.scalar_type() == input.scalar_type() &&
                       elements(input) == elements(output) * static_cast<std::size_t>(size_),
                   "{}: the input tensor is {} x {}; it must be {} x {} (world size x output)",
                   name, c10::toString(input.scalar_type()), input.numel(),
                   c10::toString(output.scalar_type()), output.numel() * size_);
  const ReduceOp op = reduce_op_of(reduce_op, output.scalar_type(), name);
  // PREMUL_SUM scales a copy: the input is the caller's and stays as it was.
  const auto in = reduction_buffer(input, reduce_op, is_premul(reduce_op));
  const auto s = Staged::result(output, reduce_op);
  auto part = comm()->reduce_scatter_async(view_of(in, true, name), view_of(s.buffer, true, name),
                                           op, on_stream(in));
  return {std::move(part), copy_back(s), {in, s.buffer}};
}

WorkPtr Group::reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                   const c10d::ReduceScatterOptions& opts) {
  return launch_pieces(c10d::OpType::_REDUCE_SCATTER_BASE, {output},
                       {reduce_scatter_piece(output, input, opts.reduceOp)});
}

WorkPtr Group::alltoallv(const at::Tensor& out, const at::Tensor& in,
                         const std::vector<std::size_t>& send_counts,
                         const std::vector<std::size_t>& recv_counts, Tensors outputs,
                         std::function<void()> on_success, Tensors keep) {
  constexpr std::string_view name = "all_to_all";
  const auto vin = view_of(in, false, name);
  const auto vout = view_of(out, false, name);
  // Counts are in tensor elements; the views may count smaller units (complex numbers as
  // two reals, types tandem lacks as bytes).
  const std::size_t unit = static_cast<std::size_t>(in.element_size()) / dtype_size(vin.dtype);
  std::vector<std::size_t> send_at(static_cast<std::size_t>(size_), 0);
  std::vector<std::size_t> recv_at(static_cast<std::size_t>(size_), 0);
  std::exclusive_scan(send_counts.begin(), send_counts.end(), send_at.begin(), std::size_t{0});
  std::exclusive_scan(recv_counts.begin(), recv_counts.end(), recv_at.begin(), std::size_t{0});
  const auto me = static_cast<std::size_t>(rank_);
  TANDEM_CHECK_ARG(send_counts[me] == recv_counts[me],
                   "{}: this rank sends {} elements to itself but expects {}", name,
                   send_counts[me], recv_counts[me]);
  const auto c = comm();
  std::vector<std::shared_ptr<Work>> parts;
  // Receives first, then sends, each in rank order from this rank on: every pair of ranks
  // posts its two transfers in an order both agree on, and nothing waits for anything.
  for (int k = 1; k < size_; ++k) {
    const auto from = static_cast<std::size_t>((rank_ - k + size_) % size_);
    if (recv_counts[from] > 0)
      parts.push_back(c->recv_async(vout.slice(recv_at[from] * unit, recv_counts[from] * unit),
                                    static_cast<int>(from), kAlltoallTag, on_stream(out)));
  }
  for (int k = 1; k < size_; ++k) {
    const auto to = static_cast<std::size_t>((rank_ + k) % size_);
    if (send_counts[to] > 0)
      parts.push_back(c->send_async(vin.slice(send_at[to] * unit, send_counts[to] * unit),
                                    static_cast<int>(to), kAlltoallTag, on_stream(in)));
  }
  if (send_counts[me] > 0) {
    // This rank's own block, copied by torch: on the current stream for CUDA tensors.
    const auto n = static_cast<std::int64_t>(send_counts[me]);
    out.reshape(-1)
        .narrow(0, static_cast<std::int64_t>(recv_at[me]), n)
        .copy_(in.reshape(-1).narrow(0, static_cast<std::int64_t>(send_at[me]), n));
  }
  keep.push_back(in);
  keep.push_back(out);
  return launch(c10d::OpType::ALLTOALL_BASE, std::move(outputs), std::move(parts),
                std::move(on_success), std::move(keep));
}

WorkPtr Group::alltoall_base(at::Tensor& output, at::Tensor& input,
                             std::vector<std::int64_t>& output_splits,
                             std::vector<std::int64_t>& input_splits) {
  constexpr std::string_view name = "all_to_all_single";
  check_tensor(output, name);
  check_tensor(input, name);
  TANDEM_CHECK_ARG(output.scalar_type() == input.scalar_type(),
                   "{}: input is {} and output is {}; they must have the same dtype", name,
                   c10::toString(input.scalar_type()), c10::toString(output.scalar_type()));
  const auto in = input.contiguous();
  const auto s = Staged::of(output);
  auto done = copy_back(s);
  const auto world = static_cast<std::size_t>(size_);
  if (output_splits.empty() && input_splits.empty()) {
    TANDEM_CHECK_ARG(elements(in) == elements(output) && (in.dim() == 0 || in.size(0) % size_ == 0),
                     "{}: without split sizes, input and output must have the same size and a "
                     "first dimension divisible by the world size ({})",
                     name, size_);
    auto part = comm()->alltoall_async(view_of(in, false, name), view_of(s.buffer, false, name),
                                       on_stream(in));
    return launch(c10d::OpType::ALLTOALL_BASE, {output}, {part}, std::move(done), {in, s.buffer});
  }
  // Uneven splits count rows of the first dimension.
  const auto row = [&](const at::Tensor& t, std::string_view what) -> std::size_t {
    TANDEM_CHECK_ARG(t.dim() > 0, "{}: the {} tensor needs a first dimension to split", name, what);
    return t.size(0) == 0 ? 0 : elements(t) / static_cast<std::size_t>(t.size(0));
  };
  const auto counts = [&](const std::vector<std::int64_t>& splits, const at::Tensor& t,
                          std::string_view what) {
    const std::size_t per_row = row(t, what);
    std::vector<std::size_t> out(world);
    if (splits.empty()) {
      TANDEM_CHECK_ARG(t.size(0) % size_ == 0,
                       "{}: the {} tensor's first dimension ({}) is not divisible by the world "
                       "size ({}); give its split sizes",
                       name, what, t.size(0), size_);
      std::fill(out.begin(), out.end(), elements(t) / world);
      return out;
    }
    TANDEM_CHECK_ARG(splits.size() == world, "{}: {} split sizes has {} entries, not {}", name,
                     what, splits.size(), size_);
    std::int64_t rows = 0;
    for (std::size_t r = 0; r < world; ++r) {
      TANDEM_CHECK_ARG(splits[r] >= 0, "{}: {} split size {} is negative", name, what, splits[r]);
      rows += splits[r];
      out[r] = static_cast<std::size_t>(splits[r]) * per_row;
    }
    TANDEM_CHECK_ARG(rows == t.size(0),
                     "{}: the {} split sizes add up to {} rows but the tensor has {}", name, what,
                     rows, t.size(0));
    return out;
  };
  const auto send = counts(input_splits, in, "input");
  const auto recv = counts(output_splits, output, "output");
  return alltoallv(s.buffer, in, send, recv, {output}, std::move(done), {s.buffer});
}

WorkPtr Group::alltoall(Tensors& outputs, Tensors& inputs) {
  constexpr std::string_view name = "all_to_all";
  const auto world = static_cast<std::size_t>(size_);
  TANDEM_CHECK_ARG(outputs.size() == world && inputs.size() == world,
                   "{}: input and output lists need {} tensors each (one per rank), not {} and {}",
                   name, size_, inputs.size(), outputs.size());
  std::vector<std::size_t> send(world), recv(world);
  for (std::size_t r = 0; r < world; ++r) {
    check_tensor(inputs[r], name);
    check_tensor(outputs[r], name);
    TANDEM_CHECK_ARG(inputs[r].scalar_type() == inputs[0].scalar_type() &&
                         outputs[r].scalar_type() == inputs[0].scalar_type(),
                     "{}: every input and output tensor must have the same dtype", name);
    send[r] = elements(inputs[r]);
    recv[r] = elements(outputs[r]);
  }
  const auto in = flatten(inputs, *pool_);
  const auto total = std::accumulate(recv.begin(), recv.end(), std::size_t{0});
  const auto out = pool_->take(static_cast<std::int64_t>(total), in.options());
  return alltoallv(out, in, send, recv, outputs, [out, outputs] { unflatten(out, outputs); }, {});
}

WorkPtr Group::send(Tensors& tensors, int dst, int tag) {
  constexpr std::string_view name = "send";
  check_one(tensors, name);
  TANDEM_CHECK_ARG(tag >= 0, "{}: tag {} is negative; tags are 0 or more", name, tag);
  check_tensor(tensors[0], name);
  const auto in = tensors[0].contiguous();
  auto part = comm()->send_async(view_of(in, false, name), dst, static_cast<std::uint32_t>(tag),
                                 on_stream(in));
  return launch(c10d::OpType::SEND, tensors, {part}, {}, {in});
}

WorkPtr Group::recv(Tensors& tensors, int src, int tag) {
  constexpr std::string_view name = "recv";
  check_one(tensors, name);
  TANDEM_CHECK_ARG(tag >= 0, "{}: tag {} is negative; tags are 0 or more", name, tag);
  check_tensor(tensors[0], name);
  const auto s = Staged::of(tensors[0]);
  auto part = comm()->recv_async(view_of(s.buffer, false, name), src,
                                 static_cast<std::uint32_t>(tag), on_stream(s.buffer));
  auto done = copy_back(s);
  return launch(c10d::OpType::RECV, tensors, {part}, std::move(done), {s.buffer});
}

WorkPtr Group::barrier(const c10d::BarrierOptions&) {
  return launch(c10d::OpType::BARRIER, {}, {comm()->barrier_async()});
}

void Group::monitored_barrier(const c10d::BarrierOptions& opts) {
  CallOptions o;
  if (opts.timeout.count() > 0) o.deadline = deadline_in(opts.timeout);
  seq_.fetch_add(1, std::memory_order_relaxed);
  comm()->barrier(o);
}

}  // namespace tandem::python
