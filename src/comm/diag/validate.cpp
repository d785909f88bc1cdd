#include "comm/diag/validate.hpp"

#include <tandem/communicator.hpp>
#include <tandem/error.hpp>

#include <cstdint>
#include <limits>
#include <numeric>
#include <string_view>

namespace tandem::comm {
namespace {

using algorithms::Call;

constexpr std::size_t kMaxCount = std::numeric_limits<std::size_t>::max() / 16;

// Each check tests its condition inline and explains a failure out of line: validation runs
// on every call, failures almost never.

[[noreturn, gnu::cold]] void explain_view(std::string_view coll, std::string_view name,
                                          const BufferView& b) {
  TANDEM_CHECK_ARG(static_cast<unsigned>(b.dtype) <= static_cast<unsigned>(DataType::i64),
                   "{}: {}.dtype has the invalid value {}", coll, name,
                   static_cast<unsigned>(b.dtype));
  TANDEM_CHECK_ARG(b.device.is_cpu() || (b.device.is_cuda() && b.device.index >= 0),
                   "{}: {}.device is {}: a CUDA buffer names its device (Device::cuda(index))",
                   coll, name, b.device.str());
  TANDEM_CHECK_ARG(b.data != nullptr || b.count == 0, "{}: {}.data is null but {}.count is {}",
                   coll, name, name, b.count);
  TANDEM_THROW(ErrorCode::InvalidArgument, "{}: {}.count ({}) is impossibly large", coll, name,
               b.count);
}

void check_view(std::string_view coll, std::string_view name, const BufferView& b) {
  const bool ok = static_cast<unsigned>(b.dtype) <= static_cast<unsigned>(DataType::i64) &&
                  (b.device.is_cpu() || (b.device.is_cuda() && b.device.index >= 0)) &&
                  (b.data != nullptr || b.count == 0) && b.count <= kMaxCount;
  if (!ok) [[unlikely]]
    explain_view(coll, name, b);
}

[[noreturn, gnu::cold]] void explain_dtypes(std::string_view coll, const BufferView& in,
                                            const BufferView& out) {
  TANDEM_CHECK_ARG(in.device == out.device,
                   "{}: in is on {} but out on {}: both buffers must be on the same device", coll,
                   in.device.str(), out.device.str());
  TANDEM_THROW(ErrorCode::InvalidArgument,
               "{}: in.dtype ({}) differs from out.dtype ({}): both buffers must hold the same "
               "element type",
               coll, to_string(in.dtype), to_string(out.dtype));
}

void check_alike(std::string_view coll, const BufferView& in, const BufferView& out) {
  if (in.dtype != out.dtype || in.device != out.device) [[unlikely]]
    explain_dtypes(coll, in, out);
}

[[noreturn, gnu::cold]] void explain_count(std::string_view coll, std::string_view name,
                                           std::size_t have, std::size_t want,
                                           std::string_view rule) {
  TANDEM_THROW(ErrorCode::InvalidArgument, "{}: {}.count is {} but must be {} ({}){}", coll, name,
               have, want, rule, have < want ? ": the buffer is too small" : "");
}

void check_count(std::string_view coll, std::string_view name, std::size_t have, std::size_t want,
                 std::string_view rule) {
  if (have != want) [[unlikely]]
    explain_count(coll, name, have, want, rule);
}

[[noreturn, gnu::cold]] void explain_op(std::string_view coll, ReduceOp op, DataType dtype) {
  if (static_cast<unsigned>(op) > static_cast<unsigned>(ReduceOp::bxor))
    TANDEM_THROW(ErrorCode::InvalidArgument, "{}: ReduceOp has the invalid value {}", coll,
                 static_cast<unsigned>(op));
  TANDEM_THROW(ErrorCode::InvalidArgument,
               "{}: ReduceOp::{} is a bitwise operation and {} is a floating type; bitwise "
               "operations reduce integers (i8, u8, i32, i64): reduce the raw bits as an integer "
               "view of the buffer, or use sum, prod, min, max or avg",
               coll, to_string(op), to_string(dtype));
}

// The dtype is checked by check_view; an op that does not apply to it is refused here.
void check_op(std::string_view coll, ReduceOp op, DataType dtype) {
  if (static_cast<unsigned>(op) > static_cast<unsigned>(ReduceOp::bxor) || !applies_to(op, dtype))
      [[unlikely]]
    explain_op(coll, op, dtype);
}

void check_root(std::string_view coll, std::string_view what, int root, int size) {
  TANDEM_CHECK_ARG(root >= 0 && root < size, "{}: {} {} is out of range [0, {})", coll, what, root,
                   size);
}

// True when the byte ranges of a and b intersect.
bool overlap(const BufferView& a, const BufferView& b) noexcept {
  if (a.bytes() == 0 || b.bytes() == 0) return false;
  const auto pa = reinterpret_cast<std::uintptr_t>(a.data);
  const auto pb = reinterpret_cast<std::uintptr_t>(b.data);
  return pa < pb + b.bytes() && pb < pa + a.bytes();
}

[[noreturn, gnu::cold]] void explain_layout(std::string_view coll, std::string_view rule) {
  TANDEM_THROW(ErrorCode::InvalidArgument, "{}: in and out overlap but are not in-place ({})", coll,
               rule);
}

// in and out may only overlap in the one in-place layout: `inner` at element `offset` of
// `outer`.
void check_layout(std::string_view coll, const BufferView& inner, const BufferView& outer,
                  std::size_t offset, std::string_view rule) {
  if (inner.data == outer.data && offset == 0) return;  // in-place, the usual layout
  if (!overlap(inner, outer)) return;
  const auto* expect = static_cast<const std::byte*>(outer.data) + offset * dtype_size(outer.dtype);
  if (inner.data != expect) [[unlikely]]
    explain_layout(coll, rule);
}

}  // namespace

void validate(const Call& c, int rank, int size) {
  const std::string_view coll = to_string(c.kind);
  const auto world = static_cast<std::size_t>(size);
  switch (c.kind) {
    case CollectiveKind::allreduce:
      check_op(coll, c.op, c.in.dtype);
      check_view(coll, "in", c.in);
      check_view(coll, "out", c.out);
      check_alike(coll, c.in, c.out);
      check_count(coll, "out", c.out.count, c.in.count, "out.count == in.count");
      check_layout(coll, c.in, c.out, 0, "in-place means in.data == out.data");
      return;
    case CollectiveKind::broadcast:
      check_root(coll, "root", c.root, size);
      check_view(coll, "out", c.out);
      if (rank == c.root) {
        check_view(coll, "in", c.in);
        check_alike(coll, c.in, c.out);
        check_count(coll, "in", c.in.count, c.out.count, "on the root, in.count == out.count");
        check_layout(coll, c.in, c.out, 0, "in-place means in.data == out.data");
      }
      return;
    case CollectiveKind::reduce:
      check_op(coll, c.op, c.in.dtype);
      check_root(coll, "root", c.root, size);
      check_view(coll, "in", c.in);
      if (rank == c.root) {
        check_view(coll, "out", c.out);
        check_alike(coll, c.in, c.out);
        check_count(coll, "out", c.out.count, c.in.count, "on the root, out.count == in.count");
        check_layout(coll, c.in, c.out, 0, "in-place means in.data == out.data");
      }
      return;
    case CollectiveKind::allgather:
      check_view(coll, "in", c.in);
      check_view(coll, "out", c.out);
      check_alike(coll, c.in, c.out);
      check_count(coll, "out", c.out.count, world * c.in.count, "size() * in.count");
      check_layout(coll, c.in, c.out, static_cast<std::size_t>(rank) * c.in.count,
                   "in-place means in.data == out.data + rank() * in.count elements");
      return;
    case CollectiveKind::allgatherv: {
      check_view(coll, "in", c.in);
      check_view(coll, "out", c.out);
      check_alike(coll, c.in, c.out);
      TANDEM_CHECK_ARG(c.counts.size() == world,
                       "{}: counts has {} entries but the communicator has {} ranks", coll,
                       c.counts.size(), size);
      std::size_t total = 0;
      for (std::size_t r = 0; r < world; ++r) {
        TANDEM_CHECK_ARG(c.counts[r] <= kMaxCount - total, "{}: counts[{}] ({}) is too large", coll,
                         r, c.counts[r]);
        total += c.counts[r];
      }
      const auto me = static_cast<std::size_t>(rank);
      check_count(coll, "in", c.in.count, c.counts[me], "counts[rank()]");
      check_count(coll, "out", c.out.count, total, "the sum of counts");
      const std::size_t offset = std::accumulate(
          c.counts.begin(), c.counts.begin() + static_cast<std::ptrdiff_t>(me), std::size_t{0});
      check_layout(coll, c.in, c.out, offset,
                   "in-place means in.data == out.data + counts[0] + ... + counts[rank() - 1]");
      return;
    }
    case CollectiveKind::reduce_scatter:
      check_op(coll, c.op, c.in.dtype);
      check_view(coll, "in", c.in);
      check_view(coll, "out", c.out);
      check_alike(coll, c.in, c.out);
      check_count(coll, "in", c.in.count, world * c.out.count, "size() * out.count");
      check_layout(coll, c.out, c.in, static_cast<std::size_t>(rank) * c.out.count,
                   "in-place means out.data == in.data + rank() * out.count elements");
      return;
    case CollectiveKind::alltoall:
      check_view(coll, "in", c.in);
      check_view(coll, "out", c.out);
      check_alike(coll, c.in, c.out);
      check_count(coll, "out", c.out.count, c.in.count, "out.count == in.count");
      TANDEM_CHECK_ARG(c.in.count % world == 0,
                       "{}: in.count ({}) is not a multiple of size() ({}): every rank gets an "
                       "equal block",
                       coll, c.in.count, size);
      check_layout(coll, c.in, c.out, 0, "in-place means in.data == out.data");
      return;
    case CollectiveKind::gather:
      check_root(coll, "root", c.root, size);
      check_view(coll, "in", c.in);
      if (rank == c.root) {
        check_view(coll, "out", c.out);
        check_alike(coll, c.in, c.out);
        check_count(coll, "out", c.out.count, world * c.in.count, "on the root, size() * in.count");
        check_layout(coll, c.in, c.out, static_cast<std::size_t>(rank) * c.in.count,
                     "in-place means in.data == out.data + root * in.count elements");
      }
      return;
    case CollectiveKind::scatter:
      check_root(coll, "root", c.root, size);
      check_view(coll, "out", c.out);
      if (rank == c.root) {
        check_view(coll, "in", c.in);
        check_alike(coll, c.in, c.out);
        check_count(coll, "in", c.in.count, world * c.out.count, "on the root, size() * out.count");
        check_layout(coll, c.out, c.in, static_cast<std::size_t>(rank) * c.out.count,
                     "in-place means out.data == in.data + root * out.count elements");
      }
      return;
    case CollectiveKind::recv:
      if (c.root == kAnySource) {
        TANDEM_CHECK_ARG(size > 1, "{}: from any rank, in a group of one rank: there is no peer",
                         coll);
        check_view(coll, "buf", c.out);
        TANDEM_CHECK_ARG(c.out.device.is_cpu(),
                         "{}: from any rank takes a host buffer, not one on {}; name the peer",
                         coll, c.out.device.str());
        return;
      }
      [[fallthrough]];
    case CollectiveKind::send:
      check_root(coll, "peer", c.root, size);
      TANDEM_CHECK_ARG(c.root != rank, "{}: peer {} is this rank; {} needs another rank", coll,
                       c.root, coll);
      check_view(coll, "buf", c.kind == CollectiveKind::send ? c.in : c.out);
      return;
    case CollectiveKind::barrier:
      return;
  }
  TANDEM_THROW(ErrorCode::InvalidArgument, "invalid CollectiveKind {}",
               static_cast<unsigned>(c.kind));
}

std::size_t shape_count(const Call& c) noexcept {
  switch (c.kind) {
    case CollectiveKind::broadcast:
    case CollectiveKind::scatter:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::recv:
    case CollectiveKind::allgatherv:
      return c.out.count;
    case CollectiveKind::barrier:
      return 0;
    default:
      return c.in.count;
  }
}

DataType shape_dtype(const Call& c) noexcept {
  switch (c.kind) {
    case CollectiveKind::broadcast:
    case CollectiveKind::scatter:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::recv:
      return c.out.dtype;
    case CollectiveKind::barrier:
      return DataType::u8;
    default:
      return c.in.dtype;
  }
}

}  // namespace tandem::comm
