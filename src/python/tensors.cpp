#include "python/tensors.hpp"

#include "python/torch_compat.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <cstdlib>

namespace tandem::python {
namespace {

std::optional<DataType> tandem_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return DataType::f32;
    case at::kDouble:
      return DataType::f64;
    case at::kHalf:
      return DataType::f16;
    case at::kBFloat16:
      return DataType::bf16;
    case at::kChar:
      return DataType::i8;
    case at::kByte:
    case at::kBool:
      return DataType::u8;
    case at::kInt:
      return DataType::i32;
    case at::kLong:
      return DataType::i64;
    default:
      return std::nullopt;
  }
}

std::string_view op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "an unknown ReduceOp";
  }
}

}  // namespace

void check_tensor(const at::Tensor& t, std::string_view collective) {
  TANDEM_CHECK_ARG(t.defined(), "{}: a tensor is undefined (None)", collective);
  TANDEM_CHECK_ARG(t.layout() == at::kStrided,
                   "{}: tensor layout {} is not supported; backend 'tandem' takes dense tensors "
                   "(convert sparse tensors with .to_dense())",
                   collective, c10::str(t.layout()));
  TANDEM_CHECK_ARG(t.device().is_cpu() || (t.device().is_cuda() && t.device().index() >= 0),
                   "{}: a tensor on {} reached backend 'tandem', which takes CPU and CUDA "
                   "tensors; move it with .cpu() or .cuda()",
                   collective, t.device().str());
}

namespace {

// Where tandem sees `t`: CUDA tensors run through the communicator's CUDA backend (NCCL).
Device tandem_device(const at::Tensor& t) noexcept {
  return t.device().is_cuda() ? Device::cuda(t.device().index()) : Device::cpu();
}

}  // namespace

CallOptions on_stream(const at::Tensor& t) {
  CallOptions o;
#if TANDEM_HAVE_STREAM_HANDLE
  if (t.is_cuda()) {
    // Through torch's device-neutral interface: this file builds against CPU torch too.
    const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    o.stream = cuda.getStream(t.device()).native_handle();
  }
#else
  (void)t;  // no device-neutral stream handle before torch 2.11: the legacy default stream
#endif
  return o;
}

BufferView view_of(const at::Tensor& t, bool reducing, std::string_view collective) {
  check_tensor(t, collective);
  TANDEM_CHECK(t.is_contiguous(), "{}: a staged tensor is not contiguous", collective);
  const auto st = t.scalar_type();
  if (st == at::kComplexFloat || st == at::kComplexDouble) {
    return {t.data_ptr(), static_cast<std::size_t>(t.numel()) * 2,
            st == at::kComplexFloat ? DataType::f32 : DataType::f64, tandem_device(t)};
  }
  if (auto d = tandem_dtype(st))
    return {t.data_ptr(), static_cast<std::size_t>(t.numel()), *d, tandem_device(t)};
  TANDEM_CHECK_ARG(!reducing,
                   "{}: tensors of dtype {} do not reduce on NCCL or Gloo, nor on backend "
                   "'tandem', which reduces float32, float64, float16, bfloat16, the float8 "
                   "types, int8, uint8, int32, int64, bool and complex: convert the tensor, e.g. "
                   ".to(torch.int64)",
                   collective, c10::toString(st));
  return {t.data_ptr(), static_cast<std::size_t>(t.nbytes()), DataType::u8, tandem_device(t)};
}

ReduceOp reduce_op_of(const c10d::ReduceOp& op, at::ScalarType t, std::string_view collective) {
  const auto kind = op.op_;
  if (t == at::kBool) {
    // Logical reductions on bytes holding 0 or 1: or, and, exclusive or.
    switch (kind) {
      case c10d::ReduceOp::SUM:
      case c10d::ReduceOp::MAX:
      case c10d::ReduceOp::BOR:
        return ReduceOp::max;
      case c10d::ReduceOp::PRODUCT:
      case c10d::ReduceOp::MIN:
      case c10d::ReduceOp::BAND:
        return ReduceOp::min;
      case c10d::ReduceOp::BXOR:
        return ReduceOp::bxor;
      default:
        break;
    }
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "{}: ReduceOp.{} of bool tensors is refused by NCCL and Gloo alike; use SUM or "
                 "BOR (logical or), PRODUCT or BAND (logical and), BXOR, MIN or MAX, or convert "
                 "to an integer type to count",
                 collective, op_name(kind));
  }
  const bool complex = t == at::kComplexFloat || t == at::kComplexDouble;
  const bool integral = at::isIntegralType(t, /*includeBool=*/false);
  switch (kind) {
    case c10d::ReduceOp::SUM:
      return ReduceOp::sum;
    case c10d::ReduceOp::AVG:
      return ReduceOp::avg;
    case c10d::ReduceOp::PREMUL_SUM:
      TANDEM_CHECK_ARG(!integral,
                       "{}: ReduceOp.PREMUL_SUM of {} tensors is refused by NCCL and Gloo alike (a "
                       "scaled integer is not an integer); multiply, then reduce with SUM",
                       collective, c10::toString(t));
      return ReduceOp::sum;
    case c10d::ReduceOp::PRODUCT:
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      TANDEM_CHECK_ARG(!complex,
                       "{}: ReduceOp.{} of complex tensors is refused by NCCL and Gloo alike "
                       "(complex numbers have no order and reduce by parts); use SUM, AVG or "
                       "PREMUL_SUM, or reduce torch.view_as_real(tensor) for the parts",
                       collective, op_name(kind));
      return kind == c10d::ReduceOp::PRODUCT ? ReduceOp::prod
             : kind == c10d::ReduceOp::MIN   ? ReduceOp::min
                                             : ReduceOp::max;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TANDEM_CHECK_ARG(integral,
                       "{}: ReduceOp.{} of {} tensors is refused by NCCL and Gloo alike: bitwise "
                       "operations reduce integer and bool tensors; to combine the raw bits, "
                       "reduce tensor.view(torch.uint8)",
                       collective, op_name(kind), c10::toString(t));
      return kind == c10d::ReduceOp::BAND  ? ReduceOp::band
             : kind == c10d::ReduceOp::BOR ? ReduceOp::bor
                                           : ReduceOp::bxor;
    default:
      break;
  }
  TANDEM_THROW(ErrorCode::InvalidArgument,
               "{}: {} is not a reduction backend 'tandem' knows; it has SUM, AVG, PRODUCT, MIN, "
               "MAX, BAND, BOR, BXOR and PREMUL_SUM",
               collective, op_name(kind));
}

namespace {

// The float8 types that reduce, widened to f32 (not at::isFloat8Type, which also counts
// e8m0fnu: a scale type of powers of two, which no backend reduces).
bool is_float8(at::ScalarType t) noexcept {
  return t == at::kFloat8_e4m3fn || t == at::kFloat8_e5m2 || t == at::kFloat8_e4m3fnuz ||
         t == at::kFloat8_e5m2fnuz;
}

// `t` converted for a reduction with `op`, copied when `copy` or when it must be.
at::Tensor convert_for(const at::Tensor& t, const c10d::ReduceOp& op, bool copy) {
  const bool bitwise = op.op_ == c10d::ReduceOp::BAND || op.op_ == c10d::ReduceOp::BOR ||
                       op.op_ == c10d::ReduceOp::BXOR;
  const auto dtype = is_float8(t.scalar_type()) ? at::kFloat : t.scalar_type();
  const auto device = t.is_cuda() && bitwise ? at::Device(at::kCPU) : t.device();
  if (!copy && dtype == t.scalar_type() && device == t.device() && t.is_contiguous()) return t;
  return t.to(t.options().dtype(dtype).device(device), /*non_blocking=*/false, /*copy=*/true,
              at::MemoryFormat::Contiguous);
}

}  // namespace

at::Tensor reduction_buffer(const at::Tensor& t, const c10d::ReduceOp& op, bool copy) {
  auto buffer = convert_for(t, op, copy);
  premultiply_(buffer, op);
  return buffer;
}

at::Tensor result_buffer(const at::Tensor& t, const c10d::ReduceOp& op) {
  return convert_for(t, op, false);
}

bool is_premul(const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::PREMUL_SUM;
}

void premultiply_(const at::Tensor& t, const c10d::ReduceOp& op) {
  if (!is_premul(op)) return;
  const auto* factor = dynamic_cast<const PreMulSupplement*>(op.supplement_.get());
  TANDEM_CHECK_ARG(factor != nullptr,
                   "ReduceOp.PREMUL_SUM carries no factor; make it with "
                   "torch.distributed._make_nccl_premul_sum(factor)");
  if (factor->tensor_factor.defined()) {
    t.mul_(factor->tensor_factor.to(t.device()));
  } else {
    t.mul_(factor->double_factor);
  }
}

void check_same_layout(const std::vector<at::Tensor>& list, const at::Tensor& like,
                       std::string_view what, std::string_view collective) {
  for (std::size_t i = 0; i < list.size(); ++i) {
    check_tensor(list[i], collective);
    TANDEM_CHECK_ARG(list[i].scalar_type() == like.scalar_type() && list[i].numel() == like.numel(),
                     "{}: {}[{}] is {} x {} where {} x {} was expected (every tensor of the list "
                     "must match the input's dtype and size)",
                     collective, what, i, c10::toString(list[i].scalar_type()), list[i].numel(),
                     c10::toString(like.scalar_type()), like.numel());
  }
}

StagingPool::~StagingPool() {
  for (auto& [bytes, block] : free_) std::free(block);
}

at::Tensor StagingPool::take(std::int64_t numel, const at::TensorOptions& options) {
  // Device staging comes from torch's own (caching) allocator.
  if (options.device().is_cuda()) return at::empty({numel}, options);
  const std::size_t want =
      std::max<std::size_t>(64, static_cast<std::size_t>(numel) * options.dtype().itemsize());
  void* block = nullptr;
  std::size_t size = 0;
  {
    std::lock_guard lock(mutex_);
    // The smallest free block that fits and wastes at most half of itself.
    const auto it = free_.lower_bound(want);
    if (it != free_.end() && it->first <= 2 * want) {
      size = it->first;
      block = it->second;
      free_bytes_ -= size;
      free_.erase(it);
    }
  }
  if (block == nullptr) {
    size = (want + 4095) / 4096 * 4096;
    block = std::aligned_alloc(64, size);
    TANDEM_CHECK_ARG(block != nullptr, "cannot allocate {} bytes of staging memory", size);
  }
  auto self = shared_from_this();
  return at::from_blob(
      block, {numel}, [self, size](void* p) { self->give(size, p); }, options.device(at::kCPU));
}

void StagingPool::give(std::size_t bytes, void* block) {
  {
    std::lock_guard lock(mutex_);
    if (free_bytes_ + bytes <= kMaxFreeBytes) {
      free_.emplace(bytes, block);
      free_bytes_ += bytes;
      return;
    }
  }
  std::free(block);
}

at::Tensor flatten(const std::vector<at::Tensor>& list, StagingPool& pool) {
  std::int64_t total = 0;
  for (const auto& t : list) total += t.numel();
  auto flat = pool.take(total, list.empty() ? at::TensorOptions() : list[0].options());
  std::int64_t offset = 0;
  for (const auto& t : list) {
    flat.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t);
    offset += t.numel();
  }
  return flat;
}

void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& list) {
  std::int64_t offset = 0;
  for (const auto& t : list) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace tandem::python
