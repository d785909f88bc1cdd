#pragma once
// Tensors as tandem buffers: dtype and device mapping, views of contiguous tensors, the
// current stream.

#include <tandem/error.hpp>
#include <tandem/types.hpp>

#include <torch/torch.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::torch::detail {

/// The DataType of a LibTorch dtype; bool maps to u8 (one byte, moved, never reduced).
inline std::optional<DataType> to_dtype(c10::ScalarType t) noexcept {
  switch (t) {
    case c10::ScalarType::Float:
      return DataType::f32;
    case c10::ScalarType::Double:
      return DataType::f64;
    case c10::ScalarType::Half:
      return DataType::f16;
    case c10::ScalarType::BFloat16:
      return DataType::bf16;
    case c10::ScalarType::Char:
      return DataType::i8;
    case c10::ScalarType::Byte:
    case c10::ScalarType::Bool:
      return DataType::u8;
    case c10::ScalarType::Int:
      return DataType::i32;
    case c10::ScalarType::Long:
      return DataType::i64;
    default:
      return std::nullopt;
  }
}

/// "f32 [32, 1, 3, 3] on cpu"
inline std::string describe(const ::torch::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string dims;
  for (auto d : t.sizes()) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  return fmt::format("{} [{}] on {}", std::string(c10::toString(t.scalar_type())), dims,
                     t.device().str());
}

/// tandem's name of a CPU or CUDA device; InvalidArgument for any other device type.
inline Device to_device(const c10::Device& d) {
  if (d.is_cpu()) return Device::cpu();
  TANDEM_CHECK_ARG(d.is_cuda(), "tensors on {} cannot be synchronised; use cpu or cuda tensors",
                   d.str());
  return Device::cuda(d.has_index() ? d.index() : 0);
}

/// The current stream of `d` on the calling thread, as CallOptions::stream takes it (null for
/// the CPU).
inline void* current_stream(const c10::Device& d) {
  if (!d.is_cuda()) return nullptr;
  return c10::impl::getDeviceGuardImpl(d.type())->getStream(d).native_handle();
}

/// Throws Error(InvalidArgument) unless `t` is a contiguous CPU or CUDA tensor of a dtype tandem
/// moves
/// (`floating_only`: f32, f64, f16 or bf16, the dtypes gradients are averaged in).
inline void check_tensor(const ::torch::Tensor& t, std::string_view what, std::string_view name,
                         bool floating_only) {
  TANDEM_CHECK_ARG(t.defined(), "{} '{}' is undefined", what, name);
  TANDEM_CHECK_ARG(t.device().is_cpu() || t.device().is_cuda(),
                   "{} '{}' is {}: tandem_torch synchronises CPU and CUDA tensors; move the "
                   "module to one of them",
                   what, name, describe(t));
  TANDEM_CHECK_ARG(t.layout() == c10::kStrided,
                   "{} '{}' is sparse or has another non-strided layout; only dense tensors "
                   "can be synchronised",
                   what, name);
  TANDEM_CHECK_ARG(t.is_contiguous(),
                   "{} '{}' ({}) is not contiguous; make it contiguous (e.g. "
                   "param.set_data(param.contiguous())) before wrapping the module",
                   what, name, describe(t));
  const auto dt = to_dtype(t.scalar_type());
  const bool ok =
      floating_only ? dt && is_floating(*dt) && t.scalar_type() != c10::kBool : dt.has_value();
  TANDEM_CHECK_ARG(ok, "{} '{}' has dtype {}, which tandem cannot synchronise; use {}", what, name,
                   std::string(c10::toString(t.scalar_type())),
                   floating_only ? "float, double, half or bfloat16"
                                 : "a floating-point, integer or bool dtype");
}

/// A view of a contiguous tensor's elements on its device (no checks beyond the dtype).
inline BufferView view_of(const ::torch::Tensor& t) {
  const auto dt = to_dtype(t.scalar_type());
  TANDEM_CHECK(dt.has_value(), "no tandem dtype for {}", describe(t));
  return {t.numel() > 0 ? t.data_ptr() : nullptr, static_cast<std::size_t>(t.numel()), *dt,
          to_device(t.device())};
}

}  // namespace tandem::torch::detail
