// Reduction kernels. Highway compiles the code between HWY_BEFORE_NAMESPACE and
// HWY_AFTER_NAMESPACE once per instruction set (this file re-includes itself through
// foreach_target.h); reduce() dispatches to the best one the CPU supports.
//
// Every kernel walks whole vectors with unaligned loads and stores, then handles the tail by
// copying it into a zero-padded block on the stack, so any count and any alignment work and
// nothing reads past the caller's buffers. Loads of a block precede its store, so dst may
// alias a or b exactly.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/reduce.cpp"
#include "core/reduce.hpp"

#include "core/reduce_scalar.hpp"

#include <tandem/half.hpp>

#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <unistd.h>

HWY_BEFORE_NAMESPACE();
namespace tandem::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class E, class Step>
HWY_INLINE void for_blocks(E* dst, const E* a, const E* b, std::size_t count, const Step& step) {
  const std::size_t n = step.block();
  std::size_t i = 0;
  for (; i + 2 * n <= count; i += 2 * n) {
    step(dst + i, a + i, b + i);
    step(dst + i + n, a + i + n, b + i + n);
  }
  for (; i + n <= count; i += n) step(dst + i, a + i, b + i);
  if (i < count) {
    // A step covers at most one full vector of E (widening steps cover less).
    constexpr std::size_t kMax = HWY_MAX_BYTES / sizeof(E);
    HWY_ALIGN E ta[kMax] = {};
    HWY_ALIGN E tb[kMax] = {};
    HWY_ALIGN E td[kMax] = {};
    const std::size_t rem = count - i;
    std::memcpy(ta, a + i, rem * sizeof(E));
    std::memcpy(tb, b + i, rem * sizeof(E));
    step(td, ta, tb);
    std::memcpy(dst + i, td, rem * sizeof(E));
  }
}

// Large outputs: non-temporal stores write whole lines straight to memory, without first
// reading each destination line into the cache (a quarter of a reduce's memory traffic) and
// without evicting the inputs. The first elements go through for_blocks until dst is aligned
// to a block (streaming stores need that); dst must be element-aligned. FlushStream orders the
// weakly-ordered stores before anything this thread publishes next (a flag a peer polls).
template <class E, class Step>
HWY_INLINE void for_blocks_stream(E* dst, const E* a, const E* b, std::size_t count,
                                  const Step& step) {
  const std::size_t n = step.block();
  const std::size_t align = n * sizeof(E);
  const std::size_t mis = reinterpret_cast<std::uintptr_t>(dst) % align;
  std::size_t i = std::min(count, mis == 0 ? 0 : (align - mis) / sizeof(E));
  for_blocks(dst, a, b, i, step);
  for (; i + 2 * n <= count; i += 2 * n) {
    step.template apply<true>(dst + i, a + i, b + i);
    step.template apply<true>(dst + i + n, a + i + n, b + i + n);
  }
  for (; i + n <= count; i += n) step.template apply<true>(dst + i, a + i, b + i);
  for_blocks(dst + i, a + i, b + i, count - i, step);
  hwy::FlushStream();
}

// A block's store: streaming (dst aligned to the vector) or ordinary (any alignment).
// Streaming stores write whole vectors: half-width ones (f16 and 8-bit products hold their
// results in half a vector) store normally.
template <bool kStream, class D, class V>
HWY_INLINE void store(V v, D d, hn::TFromD<D>* p) {
  if constexpr (kStream && hn::MaxLanes(D()) == hn::MaxLanes(hn::ScalableTag<hn::TFromD<D>>()))
    hn::Stream(v, d, p);
  else
    hn::StoreU(v, d, p);
}

// ---- element-wise operations on vectors ------------------------------------------------

struct OpSum {
  template <class D, class V>
  HWY_INLINE V operator()(D, V a, V b) const {
    return hn::Add(a, b);
  }
};

template <class V>
concept HasVectorMul = requires(V v) {
  v* v;
};

struct OpProd {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V a, V b) const {
    if constexpr (HasVectorMul<V>) {
      return a * b;
    } else {
      // 64-bit lanes without a 64-bit multiply: low 64 bits of the product from three
      // 32x32->64 multiplies (lo*lo + ((hi*lo + lo*hi) << 32)).
      const hn::Repartition<std::uint32_t, D> d32;
      const auto a32 = hn::BitCast(d32, a);
      const auto b32 = hn::BitCast(d32, b);
      const auto a_hi = hn::BitCast(d32, hn::ShiftRight<32>(a));
      const auto b_hi = hn::BitCast(d32, hn::ShiftRight<32>(b));
      const V lo = hn::BitCast(d, hn::MulEven(a32, b32));
      const V cross =
          hn::BitCast(d, hn::MulEven(a_hi, b32)) + hn::BitCast(d, hn::MulEven(a32, b_hi));
      return lo + hn::ShiftLeft<32>(cross);
    }
  }
};

struct OpMin {
  template <class D, class V>
  HWY_INLINE V operator()(D, V a, V b) const {
    if constexpr (hwy::IsFloat<hn::TFromD<D>>()) {  // NaN wins, as in torch.minimum
      const V m = hn::IfThenElse(hn::IsNaN(b), b, hn::Min(a, b));
      return hn::IfThenElse(hn::IsNaN(a), a, m);
    } else {
      return hn::Min(a, b);
    }
  }
};

struct OpMax {
  template <class D, class V>
  HWY_INLINE V operator()(D, V a, V b) const {
    if constexpr (hwy::IsFloat<hn::TFromD<D>>()) {
      const V m = hn::IfThenElse(hn::IsNaN(b), b, hn::Max(a, b));
      return hn::IfThenElse(hn::IsNaN(a), a, m);
    } else {
      return hn::Max(a, b);
    }
  }
};

struct OpAnd {
  template <class D, class V>
  HWY_INLINE V operator()(D, V a, V b) const {
    return hn::And(a, b);
  }
};

struct OpOr {
  template <class D, class V>
  HWY_INLINE V operator()(D, V a, V b) const {
    return hn::Or(a, b);
  }
};

struct OpXor {
  template <class D, class V>
  HWY_INLINE V operator()(D, V a, V b) const {
    return hn::Xor(a, b);
  }
};

// a / divisor (b unused): the last step of avg for floating types.
template <class T>
struct OpDivide {
  T divisor;
  template <class D, class V>
  HWY_INLINE V operator()(D d, V a, V) const {
    return hn::Div(a, hn::Set(d, divisor));
  }
};

// ---- blocks: one vector's worth of elements -------------------------------------------

// Lanes of T stored as T.
template <class T, class Op>
struct NativeStep {
  hn::ScalableTag<T> d;
  Op op;
  HWY_INLINE std::size_t block() const { return hn::Lanes(d); }
  template <bool kStream = false>
  HWY_INLINE void apply(T* o, const T* a, const T* b) const {
    store<kStream>(op(d, hn::LoadU(d, a), hn::LoadU(d, b)), d, o);
  }
  HWY_INLINE void operator()(T* o, const T* a, const T* b) const { apply(o, a, b); }
};

// 8-bit products (no 8-bit multiply on most targets): widen to 16 bits, keep the low byte.
struct Prod8Step {
  hn::ScalableTag<std::uint16_t> d16;
  hn::Rebind<std::uint8_t, hn::ScalableTag<std::uint16_t>> d8;
  hn::RebindToSigned<hn::ScalableTag<std::uint16_t>> di16;
  HWY_INLINE std::size_t block() const { return hn::Lanes(d16); }
  template <bool kStream = false>
  HWY_INLINE void apply(std::uint8_t* o, const std::uint8_t* a, const std::uint8_t* b) const {
    const auto wa = hn::PromoteTo(d16, hn::LoadU(d8, a));
    const auto wb = hn::PromoteTo(d16, hn::LoadU(d8, b));
    const auto p = hn::And(wa * wb, hn::Set(d16, 0xFF));
    store<kStream>(hn::DemoteTo(d8, hn::BitCast(di16, p)), d8, o);
  }
  HWY_INLINE void operator()(std::uint8_t* o, const std::uint8_t* a, const std::uint8_t* b) const {
    apply(o, a, b);
  }
};

using DF = hn::ScalableTag<float>;
using DH = hn::Rebind<std::uint16_t, DF>;  // 16-bit storage, as many lanes as DF
using VF = hn::Vec<DF>;
using VH = hn::Vec<DH>;

// IEEE binary16 <-> f32, round to nearest even.
struct F16Codec {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
  // F16C / AVX-512: exact widening, narrowing in the current rounding mode (nearest even).
  static HWY_INLINE VF widen(DF df, VH h) {
    return hn::PromoteTo(df, hn::BitCast(hn::Rebind<hwy::float16_t, DF>(), h));
  }
  static HWY_INLINE VH narrow(DF, VF f) {
    return hn::BitCast(DH(), hn::DemoteTo(hn::Rebind<hwy::float16_t, DF>(), f));
  }
#else
  // Highway's emulated conversions turn inf/NaN into finite values and truncate instead of
  // rounding; these are half.cpp's half_to_float / float_to_half, lane by lane.
  static HWY_INLINE VF widen(DF df, VH h) {
    const hn::RebindToSigned<DF> di;
    const auto bits = hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DF>(), h));
    const auto sign = hn::ShiftLeft<16>(hn::And(bits, hn::Set(di, 0x8000)));
    const auto mag = hn::And(bits, hn::Set(di, 0x7fff));
    const auto normal = hn::ShiftLeft<13>(mag) + hn::Set(di, 112 << 23);
    const auto sub = hn::BitCast(di, hn::ConvertTo(df, mag) * hn::Set(df, 0x1p-24f));
    const auto special = hn::Or(hn::ShiftLeft<13>(mag), hn::Set(di, 0x7f800000));
    auto r = hn::IfThenElse(hn::Lt(mag, hn::Set(di, 0x400)), sub, normal);
    r = hn::IfThenElse(hn::Gt(mag, hn::Set(di, 0x7bff)), special, r);
    return hn::BitCast(df, hn::Or(r, sign));
  }
  static HWY_INLINE VH narrow(DF df, VF f) {
    const hn::RebindToSigned<DF> di;
    const hn::RebindToUnsigned<DF> du;
    const auto x = hn::BitCast(du, f);
    const auto sign = hn::BitCast(di, hn::And(hn::ShiftRight<16>(x), hn::Set(du, 0x8000)));
    const auto ax = hn::BitCast(di, hn::And(x, hn::Set(du, 0x7fffffff)));
    const auto odd = hn::And(hn::ShiftRight<13>(ax), hn::Set(di, 1));
    const auto normal = hn::ShiftRight<13>(ax - hn::Set(di, 0x38000000) + hn::Set(di, 0xfff) + odd);
    const auto sub =
        hn::BitCast(di, hn::BitCast(df, ax) + hn::Set(df, 0.5f)) - hn::Set(di, 0x3f000000);
    const auto nan =
        hn::Or(hn::Set(di, 0x7e00), hn::And(hn::ShiftRight<13>(ax), hn::Set(di, 0x3ff)));
    auto r = hn::IfThenElse(hn::Lt(ax, hn::Set(di, 0x38800000)), sub, normal);
    r = hn::IfThenElse(hn::Gt(ax, hn::Set(di, 0x477fefff)), hn::Set(di, 0x7c00), r);
    r = hn::IfThenElse(hn::Gt(ax, hn::Set(di, 0x7f800000)), nan, r);
    return hn::DemoteTo(DH(), hn::Or(r, sign));
  }
#endif
};

// bfloat16, two elements per 32-bit lane: the upper element already is an f32 with its low
// mantissa bits cleared, the lower one becomes one by a shift. No lane shuffles are needed,
// and the results go back to the halves they came from. Rounding is to nearest even in
// integer arithmetic (the hardware conversions flush subnormals to zero).
template <class Op>
struct BF16PairStep {
  hn::ScalableTag<std::uint32_t> du;
  Op op;
  HWY_INLINE std::size_t block() const { return HWY_TARGET == HWY_SCALAR ? 1 : 2 * hn::Lanes(du); }

  // Upper 16 bits of each lane: f rounded to bfloat16 (lower 16 bits are garbage).
  HWY_INLINE hn::Vec<decltype(du)> round(VF f) const {
    const auto x = hn::BitCast(du, f);
    const auto bias = hn::Add(hn::Set(du, 0x7fff), hn::And(hn::ShiftRight<16>(x), hn::Set(du, 1)));
    const auto quiet = hn::Or(x, hn::Set(du, 0x00400000));  // NaN stays NaN
    return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(f)), quiet, hn::Add(x, bias));
  }

  HWY_INLINE void operator()(std::uint16_t* o, const std::uint16_t* a,
                             const std::uint16_t* b) const {
    apply(o, a, b);
  }

#if HWY_TARGET == HWY_SCALAR  // one lane: no pairs
  template <bool kStream = false>
  HWY_INLINE void apply(std::uint16_t* o, const std::uint16_t* a, const std::uint16_t* b) const {
    const hn::Rebind<std::uint16_t, decltype(du)> d16;
    const DF df;
    const auto va = hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, a)));
    const auto vb = hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, b)));
    const auto r = hn::ShiftRight<16>(round(op(df, hn::BitCast(df, va), hn::BitCast(df, vb))));
    store<kStream>(hn::DemoteTo(d16, hn::BitCast(hn::RebindToSigned<decltype(du)>(), r)), d16, o);
  }
#else
  template <bool kStream = false>
  HWY_INLINE void apply(std::uint16_t* o, const std::uint16_t* a, const std::uint16_t* b) const {
    const hn::Repartition<std::uint16_t, decltype(du)> d16;
    const DF df;
    const auto hi = hn::Set(du, 0xffff0000u);
    const auto va = hn::BitCast(du, hn::LoadU(d16, a));
    const auto vb = hn::BitCast(du, hn::LoadU(d16, b));
    const VF lo_r =
        op(df, hn::BitCast(df, hn::ShiftLeft<16>(va)), hn::BitCast(df, hn::ShiftLeft<16>(vb)));
    const VF hi_r = op(df, hn::BitCast(df, hn::And(va, hi)), hn::BitCast(df, hn::And(vb, hi)));
    const auto out = hn::Or(hn::ShiftRight<16>(round(lo_r)), hn::And(round(hi_r), hi));
    store<kStream>(hn::BitCast(d16, out), d16, o);
  }
#endif
};

template <class Op>
struct F16Step {
  DF df;
  Op op;
  HWY_INLINE std::size_t block() const { return hn::Lanes(df); }
  template <bool kStream = false>
  HWY_INLINE void apply(std::uint16_t* o, const std::uint16_t* a, const std::uint16_t* b) const {
    const DH dh;
    const VF r =
        op(df, F16Codec::widen(df, hn::LoadU(dh, a)), F16Codec::widen(df, hn::LoadU(dh, b)));
    store<kStream>(F16Codec::narrow(df, r), dh, o);
  }
  HWY_INLINE void operator()(std::uint16_t* o, const std::uint16_t* a,
                             const std::uint16_t* b) const {
    apply(o, a, b);
  }
};

// ---- per dtype ----------------------------------------------------------------------

// `stream`: the output is large enough for stores that bypass the cache (see reduce()).
template <class T, class Step>
HWY_INLINE void run(void* dst, const void* a, const void* b, std::size_t n, bool stream,
                    const Step& step) {
  auto* d = static_cast<T*>(dst);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  if (stream)
    for_blocks_stream(d, x, y, n, step);
  else
    for_blocks(d, x, y, n, step);
}

template <class T>
void reduce_float(void* dst, const void* a, const void* b, std::size_t n, ReduceOp op,
                  bool stream) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return run<T>(dst, a, b, n, stream, NativeStep<T, OpSum>{});
    case ReduceOp::prod:
      return run<T>(dst, a, b, n, stream, NativeStep<T, OpProd>{});
    case ReduceOp::min:
      return run<T>(dst, a, b, n, stream, NativeStep<T, OpMin>{});
    case ReduceOp::max:
      return run<T>(dst, a, b, n, stream, NativeStep<T, OpMax>{});
    case ReduceOp::band:  // not for floating types (applies_to() is false): nothing to do
    case ReduceOp::bor:
    case ReduceOp::bxor:
      return;
  }
}

template <template <class> class Step>
void reduce_half(void* dst, const void* a, const void* b, std::size_t n, ReduceOp op, bool stream) {
  using U = std::uint16_t;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return run<U>(dst, a, b, n, stream, Step<OpSum>{});
    case ReduceOp::prod:
      return run<U>(dst, a, b, n, stream, Step<OpProd>{});
    case ReduceOp::min:
      return run<U>(dst, a, b, n, stream, Step<OpMin>{});
    case ReduceOp::max:
      return run<U>(dst, a, b, n, stream, Step<OpMax>{});
    case ReduceOp::band:  // not for floating types (applies_to() is false): nothing to do
    case ReduceOp::bor:
    case ReduceOp::bxor:
      return;
  }
}

// Sums and products wrap modulo 2^bits: they run on the unsigned lanes of the same width.
template <class T>
void reduce_int(void* dst, const void* a, const void* b, std::size_t n, ReduceOp op, bool stream) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return run<U>(dst, a, b, n, stream, NativeStep<U, OpSum>{});
    case ReduceOp::prod:
      if constexpr (sizeof(T) == 1)
        return run<U>(dst, a, b, n, stream, Prod8Step{});
      else
        return run<U>(dst, a, b, n, stream, NativeStep<U, OpProd>{});
    case ReduceOp::min:
      return run<T>(dst, a, b, n, stream, NativeStep<T, OpMin>{});
    case ReduceOp::max:
      return run<T>(dst, a, b, n, stream, NativeStep<T, OpMax>{});
    case ReduceOp::band:
      return run<U>(dst, a, b, n, stream, NativeStep<U, OpAnd>{});
    case ReduceOp::bor:
      return run<U>(dst, a, b, n, stream, NativeStep<U, OpOr>{});
    case ReduceOp::bxor:
      return run<U>(dst, a, b, n, stream, NativeStep<U, OpXor>{});
  }
}

void reduce_kernel(void* dst, const void* a, const void* b, std::size_t n, DataType dtype,
                   ReduceOp op, bool stream) {
  switch (dtype) {
    case DataType::f32:
      return reduce_float<float>(dst, a, b, n, op, stream);
    case DataType::f64:
      return reduce_float<double>(dst, a, b, n, op, stream);
    case DataType::f16:
      return reduce_half<F16Step>(dst, a, b, n, op, stream);
    case DataType::bf16:
      return reduce_half<BF16PairStep>(dst, a, b, n, op, stream);
    case DataType::i8:
      return reduce_int<std::int8_t>(dst, a, b, n, op, stream);
    case DataType::u8:
      return reduce_int<std::uint8_t>(dst, a, b, n, op, stream);
    case DataType::i32:
      return reduce_int<std::int32_t>(dst, a, b, n, op, stream);
    case DataType::i64:
      return reduce_int<std::int64_t>(dst, a, b, n, op, stream);
  }
}

// i32 / divisor in f64: exact after truncation. |x| < 2^31 makes the quotient's rounding
// error at most 2^-22 / |divisor|, less than the 1 / |divisor| by which a quotient that is
// not an integer stays away from one, so rounding never reaches or crosses an integer.
// DemoteTo truncates toward zero, as C++'s division does. Only INT32_MIN / -1 overflows (the
// demotion would saturate where the scalar code wraps): divide() keeps -1 in scalar code.
struct DivideI32Step {
  hn::ScalableTag<double> dd;
  double divisor;
  HWY_INLINE std::size_t block() const { return hn::Lanes(dd); }
  HWY_INLINE void operator()(std::int32_t* o, const std::int32_t* a, const std::int32_t*) const {
    const hn::Rebind<std::int32_t, decltype(dd)> di;
    const auto q = hn::Div(hn::PromoteTo(dd, hn::LoadU(di, a)), hn::Set(dd, divisor));
    hn::StoreU(hn::DemoteTo(di, q), di, o);
  }
};

// Floating types and i32; the other integers divide in scalar code below.
void divide_kernel(void* dst, std::size_t n, DataType dtype, int divisor) {
  switch (dtype) {
    case DataType::i32:
      return for_blocks(static_cast<std::int32_t*>(dst), static_cast<const std::int32_t*>(dst),
                        static_cast<const std::int32_t*>(dst), n,
                        DivideI32Step{{}, static_cast<double>(divisor)});
    case DataType::f32:
      return run<float>(dst, dst, dst, n, false,
                        NativeStep<float, OpDivide<float>>{{}, {static_cast<float>(divisor)}});
    case DataType::f64:
      return run<double>(dst, dst, dst, n, false,
                         NativeStep<double, OpDivide<double>>{{}, {static_cast<double>(divisor)}});
    case DataType::f16:
      return run<std::uint16_t>(dst, dst, dst, n, false,
                                F16Step<OpDivide<float>>{{}, {static_cast<float>(divisor)}});
    case DataType::bf16:
      return run<std::uint16_t>(dst, dst, dst, n, false,
                                BF16PairStep<OpDivide<float>>{{}, {static_cast<float>(divisor)}});
    default:
      return;
  }
}

const char* target_name() {
  return hwy::TargetName(HWY_TARGET);
}

}  // namespace HWY_NAMESPACE
}  // namespace tandem::core
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tandem::core {

HWY_EXPORT(reduce_kernel);
HWY_EXPORT(divide_kernel);
HWY_EXPORT(target_name);

namespace {

template <class T>
void divide_int(void* dst, std::size_t n, int divisor) noexcept {
  auto* p = static_cast<std::byte*>(dst);
  for (std::size_t i = 0; i < n; ++i, p += sizeof(T)) {
    T x;
    std::memcpy(&x, p, sizeof(T));
    if constexpr (sizeof(T) < sizeof(std::int64_t)) {
      x = static_cast<T>(static_cast<std::int64_t>(x) / divisor);  // truncates toward zero
    } else {
      // INT64_MIN / -1 overflows: negate in unsigned (wrapping, like the sum before it).
      x = divisor == -1 ? static_cast<T>(0 - static_cast<std::uint64_t>(x)) : x / divisor;
    }
    std::memcpy(p, &x, sizeof(T));
  }
}

// Below 8 elements and 32 bytes the scalar loop beats the vector kernels' dispatch
// (docs/benchmarks-small.md).
constexpr std::size_t kScalarCount = 8;
constexpr std::size_t kScalarBytes = 32;

// Outputs at least this large are written with streaming stores: by default the size of the
// last-level cache, beyond which the output cannot stay cached for whoever reads it next, and
// at most kStreamCapBytes: a large last-level cache is shared by many cores (or by other
// guests of a VM), of which a rank gets only a share (docs/benchmarks-large.md).
constexpr std::size_t kStreamCapBytes = std::size_t{16} << 20;

std::size_t default_stream_threshold() noexcept {
  const long llc = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  return llc > 0 ? std::min(static_cast<std::size_t>(llc), kStreamCapBytes) : kStreamCapBytes;
}

std::atomic<std::size_t> g_stream_threshold{default_stream_threshold()};

}  // namespace

void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType dtype,
            ReduceOp op) noexcept {
  const std::size_t bytes = count * dtype_size(dtype);
  // f16 stays on the vector path even for one element: its conversions are instructions
  // (F16C) there, and several times dearer in scalar code.
  if (count < kScalarCount && bytes < kScalarBytes && dtype != DataType::f16)
    return scalar::reduce_scalar(dst, a, b, count, dtype, op);
  // In place, the destination's lines were just read as an input and sit in the cache:
  // streaming them out saves no traffic, so only distinct outputs do.
  const bool stream = bytes >= g_stream_threshold.load(std::memory_order_relaxed) && dst != a &&
                      dst != b && reinterpret_cast<std::uintptr_t>(dst) % dtype_size(dtype) == 0;
  HWY_DYNAMIC_DISPATCH(reduce_kernel)(dst, a, b, count, dtype, op, stream);
}

std::size_t stream_threshold() noexcept {
  return g_stream_threshold.load(std::memory_order_relaxed);
}

void set_stream_threshold(std::size_t bytes) noexcept {
  g_stream_threshold.store(bytes == 0 ? default_stream_threshold() : bytes,
                           std::memory_order_relaxed);
}

void divide(void* dst, std::size_t count, DataType dtype, int divisor) noexcept {
  if (count == 0 || divisor == 0 || divisor == 1) return;
  switch (dtype) {
    case DataType::i8:
      return divide_int<std::int8_t>(dst, count, divisor);
    case DataType::u8:
      return divide_int<std::uint8_t>(dst, count, divisor);
    case DataType::i32:
      if (divisor == -1) return divide_int<std::int32_t>(dst, count, divisor);
      return HWY_DYNAMIC_DISPATCH(divide_kernel)(dst, count, dtype, divisor);
    case DataType::i64:
      return divide_int<std::int64_t>(dst, count, divisor);
    default:
      return HWY_DYNAMIC_DISPATCH(divide_kernel)(dst, count, dtype, divisor);
  }
}

const char* kernel_target() noexcept {
  return HWY_DYNAMIC_DISPATCH(target_name)();
}

}  // namespace tandem::core
#endif  // HWY_ONCE
