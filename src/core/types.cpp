#include <tandem/types.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

namespace tandem {
namespace {

bool iequals(std::string_view a, std::string_view b) noexcept {
  return std::ranges::equal(a, b, [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

constexpr std::array<std::pair<std::string_view, DataType>, 21> kDtypeNames{{
    {"f32", DataType::f32},   {"float", DataType::f32},     {"float32", DataType::f32},
    {"f64", DataType::f64},   {"double", DataType::f64},    {"float64", DataType::f64},
    {"f16", DataType::f16},   {"half", DataType::f16},      {"float16", DataType::f16},
    {"bf16", DataType::bf16}, {"bfloat16", DataType::bf16}, {"i8", DataType::i8},
    {"int8", DataType::i8},   {"u8", DataType::u8},         {"uint8", DataType::u8},
    {"i32", DataType::i32},   {"int32", DataType::i32},     {"int", DataType::i32},
    {"i64", DataType::i64},   {"int64", DataType::i64},     {"long", DataType::i64},
}};

constexpr std::array<std::string_view, 12> kCollectiveNames{
    "allreduce", "broadcast", "reduce",  "allgather", "allgatherv", "reduce_scatter",
    "alltoall",  "gather",    "scatter", "send",      "recv",       "barrier"};

}  // namespace

std::string_view to_string(DataType t) noexcept {
  switch (t) {
    case DataType::f32:
      return "f32";
    case DataType::f64:
      return "f64";
    case DataType::f16:
      return "f16";
    case DataType::bf16:
      return "bf16";
    case DataType::i8:
      return "i8";
    case DataType::u8:
      return "u8";
    case DataType::i32:
      return "i32";
    case DataType::i64:
      return "i64";
  }
  return "unknown";
}

std::optional<DataType> parse_dtype(std::string_view name) noexcept {
  for (const auto& [n, t] : kDtypeNames)
    if (iequals(n, name)) return t;
  return std::nullopt;
}

std::string_view to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::prod:
      return "prod";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::band:
      return "band";
    case ReduceOp::bor:
      return "bor";
    case ReduceOp::bxor:
      return "bxor";
  }
  return "unknown";
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) noexcept {
  for (ReduceOp op : kAllReduceOps)
    if (iequals(to_string(op), name)) return op;
  for (ReduceOp op : kBitwiseReduceOps)
    if (iequals(to_string(op), name)) return op;
  if (iequals(name, "product")) return ReduceOp::prod;
  if (iequals(name, "mean") || iequals(name, "average")) return ReduceOp::avg;
  return std::nullopt;
}

std::string Device::str() const {
  if (kind == Kind::cuda) return fmt::format("cuda:{}", index);
  return "cpu";
}

std::string_view to_string(CollectiveKind k) noexcept {
  const auto i = static_cast<std::size_t>(k);
  return i < kCollectiveNames.size() ? kCollectiveNames[i] : std::string_view("unknown");
}

std::optional<CollectiveKind> parse_collective(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kCollectiveNames.size(); ++i)
    if (iequals(kCollectiveNames[i], name)) return static_cast<CollectiveKind>(i);
  return std::nullopt;
}

}  // namespace tandem
