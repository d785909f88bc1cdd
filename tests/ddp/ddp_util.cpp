#include "ddp_util.hpp"

#include <tandem/data.hpp>
#include <tandem/half.hpp>
#include <tandem/log.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

namespace tandem::ddptest {

std::vector<ParamSpec> varied_model() {
  return {{DataType::f32, 1000}, {DataType::f64, 37},     {DataType::f16, 513},
          {DataType::bf16, 129}, {DataType::f32, 300000}, {DataType::i32, 17},
          {DataType::f32, 1},    {DataType::f32, 0},      {DataType::f32, 70001},
          {DataType::f64, 4096}, {DataType::f16, 1},      {DataType::f32, 262144}};
}

std::vector<ParamSpec> cnn_model() {
  return {{DataType::f32, 32 * 1 * 3 * 3},  {DataType::f32, 32},
          {DataType::f32, 64 * 32 * 3 * 3}, {DataType::f32, 64},
          {DataType::f32, 128 * 1600},      {DataType::f32, 128},
          {DataType::f32, 10 * 128},        {DataType::f32, 10}};
}

FakeModel::FakeModel(std::vector<ParamSpec> specs) : specs_(std::move(specs)) {
  for (const auto& s : specs_) grads_.emplace_back(s.count * dtype_size(s.dtype));
}

BufferView FakeModel::view(std::size_t i) const {
  return {grads_[i].data(), specs_[i].count, specs_[i].dtype, Device::cpu()};
}

std::vector<BufferView> FakeModel::views() const {
  std::vector<BufferView> v;
  for (std::size_t i = 0; i < specs_.size(); ++i) v.push_back(view(i));
  return v;
}

namespace {
template <class T>
T load(const BufferView& v, std::size_t k) {
  T x;
  std::memcpy(&x, static_cast<const std::byte*>(v.data) + k * sizeof(T), sizeof(T));
  return x;
}
template <class T>
void store_at(const BufferView& v, std::size_t k, T x) {
  std::memcpy(static_cast<std::byte*>(v.data) + k * sizeof(T), &x, sizeof(T));
}
}  // namespace

double get(const BufferView& v, std::size_t k) {
  switch (v.dtype) {
    case DataType::f32:
      return load<float>(v, k);
    case DataType::f64:
      return load<double>(v, k);
    case DataType::f16:
      return half_to_float(load<std::uint16_t>(v, k));
    case DataType::bf16:
      return bf16_to_float(load<std::uint16_t>(v, k));
    case DataType::i8:
      return load<std::int8_t>(v, k);
    case DataType::u8:
      return load<std::uint8_t>(v, k);
    case DataType::i32:
      return load<std::int32_t>(v, k);
    case DataType::i64:
      return static_cast<double>(load<std::int64_t>(v, k));
  }
  return 0;
}

void set(const BufferView& v, std::size_t k, double x) {
  switch (v.dtype) {
    case DataType::f32:
      return store_at(v, k, static_cast<float>(x));
    case DataType::f64:
      return store_at(v, k, x);
    case DataType::f16:
      return store_at(v, k, float_to_half(static_cast<float>(x)));
    case DataType::bf16:
      return store_at(v, k, float_to_bf16(static_cast<float>(x)));
    case DataType::i8:
      return store_at(v, k, static_cast<std::int8_t>(x));
    case DataType::u8:
      return store_at(v, k, static_cast<std::uint8_t>(x));
    case DataType::i32:
      return store_at(v, k, static_cast<std::int32_t>(x));
    case DataType::i64:
      return store_at(v, k, static_cast<std::int64_t>(x));
  }
}

double contribution(int rank, std::size_t p, std::size_t k, int t) {
  return (rank + 1) + static_cast<double>((k + 3 * p + 2 * static_cast<std::size_t>(t)) % 5);
}

void fill(const BufferView& v, int rank, std::size_t p, int t, bool add) {
  for (std::size_t k = 0; k < v.count; ++k)
    set(v, k, contribution(rank, p, k, t) + (add ? get(v, k) : 0.0));
}

double average_of(double sum, int world, DataType dtype) {
  switch (dtype) {
    case DataType::f32:
      return static_cast<float>(sum) / static_cast<float>(world);
    case DataType::f64:
      return sum / world;
    case DataType::f16:
      return half_to_float(float_to_half(static_cast<float>(sum) / static_cast<float>(world)));
    case DataType::bf16:
      return bf16_to_float(float_to_bf16(static_cast<float>(sum) / static_cast<float>(world)));
    default:
      return static_cast<double>(static_cast<std::int64_t>(sum) / world);
  }
}

std::size_t wrong_averages(const BufferView& v, std::size_t p, int world, int t0, int t1) {
  std::size_t wrong = 0;
  for (std::size_t k = 0; k < v.count; ++k) {
    double sum = 0;
    for (int r = 0; r < world; ++r)
      for (int t = t0; t <= t1; ++t) sum += contribution(r, p, k, t);
    wrong += get(v, k) != average_of(sum, world, v.dtype);
  }
  return wrong;
}

std::vector<std::size_t> ready_order(int rank, std::size_t n, int t) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (rank == 0) {
    std::reverse(order.begin(), order.end());
    return order;
  }
  if (rank == 2) return order;
  return data::permutation(n, 1000u * static_cast<unsigned>(rank) + static_cast<unsigned>(t));
}

std::uint64_t hash_gradients(const std::vector<BufferView>& views) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& v : views) {
    const auto* p = static_cast<const unsigned char*>(v.data);
    for (std::size_t i = 0; i < v.bytes(); ++i) {
      h ^= p[i];
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

void backward_pass(ddp::Reducer& r, const FakeModel& m, int rank, int t) {
  r.prepare_for_backward();
  for (std::size_t p = m.size(); p-- > 0;) {
    fill(m.view(p), rank, p, t);
    r.mark_variable_ready(p);
  }
  r.finalize_backward();
}

testing::RunOptions run_options(std::vector<std::string> extra) {
  testing::RunOptions o;
  o.timeout = std::chrono::seconds(180);
  o.env = {"TANDEM_TIMEOUT=60"};
  for (auto& e : extra) o.env.push_back(std::move(e));
  return o;
}

std::shared_ptr<Communicator> connect(const testing::RankContext& ctx) {
  log::reload_from_env();
  return Communicator::create(ctx.store(), ctx.rank, ctx.size);
}

}  // namespace tandem::ddptest
