#pragma once
/// @file types.hpp
/// The core vocabulary of tandem: data types, reduction operations, devices,
/// buffer views and deadlines. Every layer speaks in these terms.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace tandem {

/// Element type of a buffer. f16 and bf16 are reduced in f32 and rounded back.
enum class DataType : std::uint8_t { f32, f64, f16, bf16, i8, u8, i32, i64 };

/// Every DataType, in declaration order (for tests and tools).
inline constexpr DataType kAllDataTypes[] = {DataType::f32,  DataType::f64, DataType::f16,
                                             DataType::bf16, DataType::i8,  DataType::u8,
                                             DataType::i32,  DataType::i64};

/// Size of one element in bytes.
constexpr std::size_t dtype_size(DataType t) noexcept {
  switch (t) {
    case DataType::f64:
    case DataType::i64:
      return 8;
    case DataType::f32:
    case DataType::i32:
      return 4;
    case DataType::f16:
    case DataType::bf16:
      return 2;
    case DataType::i8:
    case DataType::u8:
      return 1;
  }
  return 0;
}

/// True for f32, f64, f16 and bf16.
constexpr bool is_floating(DataType t) noexcept {
  return t == DataType::f32 || t == DataType::f64 || t == DataType::f16 || t == DataType::bf16;
}

/// Short lower-case name ("f32", "bf16", ...).
std::string_view to_string(DataType t) noexcept;
/// Parses a name as printed by to_string(); also accepts common aliases
/// ("float", "float32", "double", "half", "bfloat16", "int32", "int64", "int8", "uint8").
std::optional<DataType> parse_dtype(std::string_view name) noexcept;

/// Reduction operation. avg is sum followed by division by the number of ranks (integers
/// truncate toward zero, as NCCL's ncclAvg does). band, bor and bxor are the bitwise and, or
/// and exclusive or of integers (Gloo's BAND, BOR, BXOR); they do not apply to floating types.
enum class ReduceOp : std::uint8_t { sum, prod, min, max, avg, band, bor, bxor };

/// The arithmetic ReduceOps, which apply to every DataType, in declaration order.
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min,
                                             ReduceOp::max, ReduceOp::avg};

/// The bitwise ReduceOps, which apply to the integer DataTypes only.
inline constexpr ReduceOp kBitwiseReduceOps[] = {ReduceOp::band, ReduceOp::bor, ReduceOp::bxor};

/// True for band, bor and bxor.
constexpr bool is_bitwise(ReduceOp op) noexcept {
  return op == ReduceOp::band || op == ReduceOp::bor || op == ReduceOp::bxor;
}

/// True when `op` applies to elements of `dtype`: every op to integers, the arithmetic ones
/// to floating types.
constexpr bool applies_to(ReduceOp op, DataType dtype) noexcept {
  return !is_bitwise(op) || !is_floating(dtype);
}

std::string_view to_string(ReduceOp op) noexcept;
std::optional<ReduceOp> parse_reduce_op(std::string_view name) noexcept;

/// The operations a Communicator offers.
enum class CollectiveKind : std::uint8_t {
  allreduce,
  broadcast,
  reduce,
  allgather,
  allgatherv,
  reduce_scatter,
  alltoall,
  gather,
  scatter,
  send,
  recv,
  barrier,
};
std::string_view to_string(CollectiveKind k) noexcept;
std::optional<CollectiveKind> parse_collective(std::string_view name) noexcept;

/// Maps a C++ element type to its DataType (float, double, int8_t, uint8_t, int32_t, int64_t).
template <class T>
constexpr DataType dtype_of() noexcept {
  if constexpr (std::is_same_v<T, float>)
    return DataType::f32;
  else if constexpr (std::is_same_v<T, double>)
    return DataType::f64;
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return DataType::i8;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return DataType::u8;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DataType::i32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return DataType::i64;
  else
    static_assert(sizeof(T) == 0, "no DataType for this element type");
}

/// Where a buffer lives: host memory, or a CUDA device.
struct Device {
  enum class Kind : std::uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = -1;

  static constexpr Device cpu() noexcept { return {}; }
  static constexpr Device cuda(int i) noexcept { return {Kind::cuda, i}; }
  constexpr bool is_cpu() const noexcept { return kind == Kind::cpu; }
  constexpr bool is_cuda() const noexcept { return kind == Kind::cuda; }
  /// "cpu" or "cuda:N".
  std::string str() const;
  friend constexpr bool operator==(const Device&, const Device&) = default;
};

/// A non-owning view of `count` elements of `dtype` at `data` on `device`.
/// Collectives take views; nothing in the runtime copies a user's tensor type.
struct BufferView {
  void* data = nullptr;
  std::size_t count = 0;
  DataType dtype = DataType::f32;
  Device device{};

  constexpr std::size_t bytes() const noexcept { return count * dtype_size(dtype); }
  /// Elements [offset, offset + n) of this view.
  constexpr BufferView slice(std::size_t offset, std::size_t n) const noexcept {
    return {static_cast<std::byte*>(data) + offset * dtype_size(dtype), n, dtype, device};
  }
  /// A view of a contiguous host range of a supported element type.
  template <class T>
  static BufferView of(std::span<T> s) noexcept {
    return {const_cast<std::remove_const_t<T>*>(s.data()), s.size(),
            dtype_of<std::remove_const_t<T>>(), Device::cpu()};
  }
  /// A view of raw host memory holding `count` elements of `dtype`.
  static constexpr BufferView raw(void* p, std::size_t count, DataType dtype) noexcept {
    return {p, count, dtype, Device::cpu()};
  }
};

/// All deadlines in tandem are points on the monotonic clock.
using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

/// A deadline `d` from now; saturates instead of overflowing for huge durations.
template <class Rep, class Period>
Deadline deadline_in(std::chrono::duration<Rep, Period> d) noexcept {
  const auto now = Clock::now();
  const auto left = Deadline::max() - now;
  // Compare in the caller's unit first: converting a huge duration to nanoseconds overflows.
  if (d >= std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(left))
    return Deadline::max();
  const auto want = std::chrono::duration_cast<Clock::duration>(d);
  return want >= left ? Deadline::max() : now + want;
}

/// A timeout with one owner and many readers: copies share one value, so a set() through any
/// copy is what every copy's next get() returns. A communicator's timeout is one: its calls,
/// its store's waits, its stall report and its device backend all read it, and
/// Communicator::set_timeout() changes it for all of them. Thread-safe.
class SharedTimeout {
 public:
  explicit SharedTimeout(std::chrono::milliseconds t = std::chrono::minutes(10))
      : value_(std::make_shared<std::atomic<std::chrono::milliseconds>>(t)) {}
  std::chrono::milliseconds get() const noexcept { return value_->load(std::memory_order_relaxed); }
  void set(std::chrono::milliseconds t) noexcept { value_->store(t, std::memory_order_relaxed); }

 private:
  std::shared_ptr<std::atomic<std::chrono::milliseconds>> value_;
};

}  // namespace tandem
