#pragma once
// From torch tensors and c10d options to tandem's vocabulary: element types, reduction
// operations and BufferViews, with a staging copy for tensors that are not contiguous.

#include <tandem/communicator.hpp>
#include <tandem/types.hpp>

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <ATen/ATen.h>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

namespace tandem::python {

/// Throws Error(InvalidArgument) unless `t` is a dense CPU or CUDA tensor (CUDA tensors run
/// through the communicator's CUDA backend, NCCL, when tandem was built with it).
void check_tensor(const at::Tensor& t, std::string_view collective);

/// The options of a call on `t`: for a CUDA tensor, the current stream of its device (the
/// collective starts after the work enqueued there and the later work there comes after it,
/// as with NCCL); nothing for a CPU tensor.
CallOptions on_stream(const at::Tensor& t);

/// tandem's view of a contiguous tensor's elements. For reductions (`reducing`): bool is u8
/// (reduced with min/max/bxor), complex is its real and imaginary parts (f32/f64, twice the
/// count); element types tandem cannot reduce throw (reduction_buffer() has widened the float8
/// types). For moves, types tandem lacks travel as bytes.
BufferView view_of(const at::Tensor& t, bool reducing, std::string_view collective);

/// tandem's operation for c10d's `op` on elements of type `t`, accepting what NCCL or Gloo
/// accepts: integer AVG (NCCL: the wrapped sum divided by the world size, truncated toward
/// zero), BAND/BOR/BXOR of integers and bool (Gloo), bool SUM as MAX and PRODUCT as MIN
/// (NCCL). Throws Error(InvalidArgument), naming what to do instead, for what both refuse:
/// bitwise ops on floating types, PREMUL_SUM of integers, bool AVG, anything but
/// SUM/AVG/PREMUL_SUM on complex numbers. PREMUL_SUM is SUM: the caller multiplies each
/// rank's contribution by its factor first (reduction_buffer, premultiply_).
ReduceOp reduce_op_of(const c10d::ReduceOp& op, at::ScalarType t, std::string_view collective);

/// True when `op` is PREMUL_SUM (torch's _make_nccl_premul_sum; FSDP's divide factors).
bool is_premul(const c10d::ReduceOp& op);
/// Multiplies `t` in place by PREMUL_SUM's factor (a number, or a one-element tensor); does
/// nothing for any other op.
void premultiply_(const at::Tensor& t, const c10d::ReduceOp& op);

/// The buffer a reduction of `t` with `op` runs on, premultiplied for PREMUL_SUM: `t` itself
/// when tandem reduces its elements where they are and `copy` is false; else a contiguous
/// copy (`copy` true: the caller's tensor must stay as it was). The copy widens the float8
/// types to float32 (reduced there, rounded once on the way back) and brings a CUDA tensor
/// to the host for a bitwise op, which NCCL lacks.
at::Tensor reduction_buffer(const at::Tensor& t, const c10d::ReduceOp& op, bool copy);

/// reduction_buffer() without the premultiplication: where a reduction with `op` leaves its
/// result for `t` (an output that is not an input).
at::Tensor result_buffer(const at::Tensor& t, const c10d::ReduceOp& op);

/// A tensor as tandem writes or reads it: the user's tensor itself when it is contiguous,
/// else a contiguous copy whose result is copied back on success (converted back to the
/// user's dtype and device when the copy is a reduction_buffer).
struct Staged {
  at::Tensor user;
  at::Tensor buffer;
  static Staged of(const at::Tensor& t) { return {t, t.is_contiguous() ? t : t.contiguous()}; }
  static Staged reducing(const at::Tensor& t, const c10d::ReduceOp& op, bool copy = false) {
    return {t, reduction_buffer(t, op, copy)};
  }
  static Staged result(const at::Tensor& t, const c10d::ReduceOp& op) {
    return {t, result_buffer(t, op)};
  }
  bool copied() const { return !buffer.is_same(user); }
  void copy_back() const {
    if (copied()) user.copy_(buffer);
  }
};

/// Every tensor of `list` has the dtype and shape of `like`, or Error(InvalidArgument).
void check_same_layout(const std::vector<at::Tensor>& list, const at::Tensor& like,
                       std::string_view what, std::string_view collective);

/// Reusable staging memory for a group's temporary buffers. A fresh allocation of some MiB
/// costs a page fault per page on its first touch, more than the copy through it: blocks
/// return here when the last tensor over them dies, and are kept up to kMaxFreeBytes.
class StagingPool : public std::enable_shared_from_this<StagingPool> {
 public:
  static constexpr std::size_t kMaxFreeBytes = std::size_t{512} << 20;
  StagingPool() = default;
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;
  ~StagingPool();
  /// A contiguous 1-D tensor of `numel` elements of `options`' dtype, on the host from this
  /// pool, on a CUDA device from torch's allocator.
  at::Tensor take(std::int64_t numel, const at::TensorOptions& options);

 private:
  void give(std::size_t bytes, void* block);
  std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;  // block size -> block
  std::size_t free_bytes_ = 0;
};

/// The tensors of `list` laid end to end in a staging tensor of `pool` (a copy).
at::Tensor flatten(const std::vector<at::Tensor>& list, StagingPool& pool);

/// Copies consecutive slices of `flat` into the tensors of `list` (sizes from `list`).
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& list);

}  // namespace tandem::python
