#include "sweep.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace tandem::mptest {
namespace {

std::string_view place(bool inplace) {
  return inplace ? "in-place" : "out-of-place";
}

}  // namespace

bool lean_sweep() {
  const char* env = std::getenv("TANDEM_TEST_SWEEP");
  const std::string_view v = env == nullptr ? "" : env;
  if (v.empty() || v == "full") return false;
  if (v == "lean") return true;
  throw std::invalid_argument(fmt::format("TANDEM_TEST_SWEEP={}: expected 'full' or 'lean'", v));
}

std::span<const DataType> sweep_types() {
  static constexpr DataType kWidths[] = {DataType::f64, DataType::f32, DataType::bf16,
                                         DataType::u8};
  if (lean_sweep()) return kWidths;
  return kAllDataTypes;
}

std::size_t large_count() {
  return (std::size_t{1} << (lean_sweep() ? 17 : 20)) + 3;
}

std::vector<std::string> sweep_env() {
  if (!lean_sweep()) return {};
  return {"TANDEM_CHUNK_SIZE=128K", "TANDEM_BUFFSIZE=512K"};
}

Sweep::Sweep(Communicator& comm) : c_(comm), rank_(comm.rank()), world_(comm.size()) {
  const auto w = static_cast<std::size_t>(world_);
  counts_ = {0, 1, 2, 7, 13, w + 1, 1031};
  roots_ = {0, world_ - 1, world_ / 2};
}

std::string Sweep::context(std::string_view coll, const std::string& algo, DataType t,
                           std::string_view extra) const {
  return fmt::format("{} [{}] {} {} (world {})", coll, algo.empty() ? "default" : algo,
                     to_string(t), extra, world_);
}

void Sweep::expect(const std::string& ctx, const std::string& diff) {
  ++checks_;
  if (diff.empty()) return;
  if (++failures_ <= 20) ADD_FAILURE() << "rank " << rank_ << ": " << ctx << ": " << diff;
}

bool Sweep::attempt(const std::function<void()>& f) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::InvalidArgument &&
        e.message().find("does not support") != std::string::npos) {
      ++skipped_;
      return false;
    }
    throw;
  }
}

void Sweep::allreduce(const std::string& algo, DataType t, ReduceOp op, std::size_t n,
                      bool inplace) {
  const auto seed = next_seed();
  Buffer in(t, n), out(t, n), want(t, n), orig(t, n);
  for (std::size_t i = 0; i < n; ++i) {
    in.set(i, reduce_input(op, t, rank_, i, seed));
    orig.set(i, in.get(i));
    want.set(i, reduce_expected(op, t, world_, i, seed));
  }
  out.poison();
  CallOptions o;
  o.algorithm = algo;
  if (!attempt([&] {
        if (inplace)
          c_.allreduce(in.view(), op, o);
        else
          c_.allreduce(in.view(), out.view(), op, o);
      }))
    return;
  const auto ctx =
      context("allreduce", algo, t, fmt::format("{} n={} {}", to_string(op), n, place(inplace)));
  const Buffer& got = inplace ? in : out;
  expect(ctx, difference(got, want));
  if (!inplace) expect(ctx + " input changed", difference(in, orig));
  shared_hash_ = hash_bytes(got.data(), got.bytes(), shared_hash_);
}

void Sweep::broadcast(const std::string& algo, DataType t, std::size_t n, int root, bool inplace) {
  const auto seed = next_seed();
  Buffer in(t, n), out(t, n), want(t, n);
  for (std::size_t i = 0; i < n; ++i) want.set(i, data_value(t, root, i, seed));
  out.poison();
  CallOptions o;
  o.algorithm = algo;
  if (rank_ == root) {
    for (std::size_t i = 0; i < n; ++i) (inplace ? out : in).set(i, want.get(i));
  }
  if (!attempt([&] {
        if (inplace) c_.broadcast(out.view(), root, o);
        // Out-of-place: the input of a non-root rank is ignored; pass nothing.
        else
          c_.broadcast(rank_ == root ? in.view() : BufferView{}, out.view(), root, o);
      }))
    return;
  const auto ctx =
      context("broadcast", algo, t, fmt::format("n={} root={} {}", n, root, place(inplace)));
  expect(ctx, difference(out, want));
  if (rank_ == root && !inplace) expect(ctx + " input changed", difference(in, want));
  shared_hash_ = hash_bytes(out.data(), out.bytes(), shared_hash_);
}

void Sweep::reduce(const std::string& algo, DataType t, ReduceOp op, std::size_t n, int root,
                   bool inplace) {
  const auto seed = next_seed();
  Buffer in(t, n), out(t, n), want(t, n), orig(t, n), untouched(t, n);
  for (std::size_t i = 0; i < n; ++i) {
    in.set(i, reduce_input(op, t, rank_, i, seed));
    orig.set(i, in.get(i));
    want.set(i, reduce_expected(op, t, world_, i, seed));
  }
  out.poison();
  untouched.poison();
  CallOptions o;
  o.algorithm = algo;
  if (!attempt([&] {
        if (inplace)
          c_.reduce(in.view(), in.view(), op, root, o);
        else
          c_.reduce(in.view(), out.view(), op, root, o);
      }))
    return;
  const auto ctx = context(
      "reduce", algo, t, fmt::format("{} n={} root={} {}", to_string(op), n, root, place(inplace)));
  if (rank_ == root) {
    expect(ctx, difference(inplace ? in : out, want));
    if (!inplace) expect(ctx + " input changed", difference(in, orig));
  } else {
    expect(ctx + " input changed on a non-root rank", difference(in, orig));
    if (!inplace) expect(ctx + " out touched on a non-root rank", difference(out, untouched));
  }
}

void Sweep::allgather(const std::string& algo, DataType t, std::size_t n, bool inplace) {
  const auto seed = next_seed();
  const auto w = static_cast<std::size_t>(world_);
  Buffer in(t, n), out(t, w * n), want(t, w * n);
  for (std::size_t r = 0; r < w; ++r)
    for (std::size_t i = 0; i < n; ++i)
      want.set(r * n + i, data_value(t, static_cast<int>(r), i, seed));
  out.poison();
  const std::size_t mine = static_cast<std::size_t>(rank_) * n;
  for (std::size_t i = 0; i < n; ++i)
    (inplace ? out : in).set((inplace ? mine : 0) + i, want.get(mine + i));
  CallOptions o;
  o.algorithm = algo;
  if (!attempt([&] { c_.allgather(inplace ? out.view(mine, n) : in.view(), out.view(), o); }))
    return;
  expect(context("allgather", algo, t, fmt::format("n={} {}", n, place(inplace))),
         difference(out, want));
  shared_hash_ = hash_bytes(out.data(), out.bytes(), shared_hash_);
}

void Sweep::allgatherv(const std::string& algo, DataType t, std::size_t base, bool inplace) {
  const auto seed = next_seed();
  const auto w = static_cast<std::size_t>(world_);
  std::vector<std::size_t> counts(w), offsets(w);
  std::size_t total = 0;
  for (std::size_t r = 0; r < w; ++r) {
    counts[r] = r % 3 == 1 ? 0 : base + r;  // some ranks contribute nothing
    offsets[r] = total;
    total += counts[r];
  }
  const auto me = static_cast<std::size_t>(rank_);
  Buffer in(t, counts[me]), out(t, total), want(t, total);
  for (std::size_t r = 0; r < w; ++r)
    for (std::size_t i = 0; i < counts[r]; ++i)
      want.set(offsets[r] + i, data_value(t, static_cast<int>(r), i, seed));
  out.poison();
  for (std::size_t i = 0; i < counts[me]; ++i)
    (inplace ? out : in).set((inplace ? offsets[me] : 0) + i, want.get(offsets[me] + i));
  CallOptions o;
  o.algorithm = algo;
  if (!attempt([&] {
        c_.allgatherv(inplace ? out.view(offsets[me], counts[me]) : in.view(), out.view(), counts,
                      o);
      }))
    return;
  expect(context("allgatherv", algo, t, fmt::format("base={} {}", base, place(inplace))),
         difference(out, want));
  shared_hash_ = hash_bytes(out.data(), out.bytes(), shared_hash_);
}

void Sweep::reduce_scatter(const std::string& algo, DataType t, ReduceOp op, std::size_t n,
                           bool inplace) {
  const auto seed = next_seed();
  const auto w = static_cast<std::size_t>(world_);
  const std::size_t mine = static_cast<std::size_t>(rank_) * n;
  Buffer in(t, w * n), out(t, n), want(t, n);
  for (std::size_t j = 0; j < w * n; ++j) in.set(j, reduce_input(op, t, rank_, j, seed));
  for (std::size_t i = 0; i < n; ++i) want.set(i, reduce_expected(op, t, world_, mine + i, seed));
  out.poison();
  CallOptions o;
  o.algorithm = algo;
  if (!attempt(
          [&] { c_.reduce_scatter(in.view(), inplace ? in.view(mine, n) : out.view(), op, o); }))
    return;
  const auto ctx = context("reduce_scatter", algo, t,
                           fmt::format("{} n={} {}", to_string(op), n, place(inplace)));
  expect(ctx, difference(inplace ? static_cast<const std::byte*>(in.data()) + mine * dtype_size(t)
                                 : out.data(),
                         want));
}

void Sweep::alltoall(const std::string& algo, DataType t, std::size_t n, bool inplace) {
  const auto seed = next_seed();
  const auto w = static_cast<std::size_t>(world_);
  // Block j of rank r's input is data_value(r * 64 + j): unique per (source, destination).
  Buffer in(t, w * n), out(t, w * n), want(t, w * n);
  for (std::size_t j = 0; j < w; ++j) {
    for (std::size_t i = 0; i < n; ++i) {
      in.set(j * n + i, data_value(t, rank_ * 64 + static_cast<int>(j), i, seed));
      want.set(j * n + i, data_value(t, static_cast<int>(j) * 64 + rank_, i, seed));
    }
  }
  out.poison();
  CallOptions o;
  o.algorithm = algo;
  if (!attempt([&] { c_.alltoall(in.view(), inplace ? in.view() : out.view(), o); })) return;
  expect(context("alltoall", algo, t, fmt::format("n={} {}", n, place(inplace))),
         difference(inplace ? in : out, want));
}

void Sweep::gather(const std::string& algo, DataType t, std::size_t n, int root, bool inplace) {
  const auto seed = next_seed();
  const auto w = static_cast<std::size_t>(world_);
  Buffer in(t, n), out(t, w * n), want(t, w * n), untouched(t, w * n);
  for (std::size_t r = 0; r < w; ++r)
    for (std::size_t i = 0; i < n; ++i)
      want.set(r * n + i, data_value(t, static_cast<int>(r), i, seed));
  out.poison();
  untouched.poison();
  const std::size_t mine = static_cast<std::size_t>(rank_) * n;
  const bool at_root_in_place = inplace && rank_ == root;
  for (std::size_t i = 0; i < n; ++i)
    (at_root_in_place ? out : in).set((at_root_in_place ? mine : 0) + i, want.get(mine + i));
  CallOptions o;
  o.algorithm = algo;
  if (!attempt([&] {
        c_.gather(at_root_in_place ? out.view(mine, n) : in.view(), out.view(), root, o);
      }))
    return;
  const auto ctx =
      context("gather", algo, t, fmt::format("n={} root={} {}", n, root, place(inplace)));
  expect(ctx, difference(out, rank_ == root ? want : untouched));
}

void Sweep::scatter(const std::string& algo, DataType t, std::size_t n, int root, bool inplace) {
  const auto seed = next_seed();
  const auto w = static_cast<std::size_t>(world_);
  Buffer in(t, w * n), out(t, n), want(t, n);
  if (rank_ == root)
    for (std::size_t j = 0; j < w * n; ++j)
      in.set(j, data_value(t, static_cast<int>(j / (n ? n : 1)), j % (n ? n : 1), seed));
  for (std::size_t i = 0; i < n; ++i) want.set(i, data_value(t, rank_, i, seed));
  out.poison();
  const std::size_t mine = static_cast<std::size_t>(rank_) * n;
  const bool at_root_in_place = inplace && rank_ == root;
  CallOptions o;
  o.algorithm = algo;
  if (!attempt([&] {
        c_.scatter(rank_ == root ? in.view() : BufferView{},
                   at_root_in_place ? in.view(mine, n) : out.view(), root, o);
      }))
    return;
  const auto ctx =
      context("scatter", algo, t, fmt::format("n={} root={} {}", n, root, place(inplace)));
  expect(ctx, difference(at_root_in_place
                             ? static_cast<const std::byte*>(in.data()) + mine * dtype_size(t)
                             : out.data(),
                         want));
}

void Sweep::sendrecv(DataType t, std::size_t n, bool async) {
  const auto seed = next_seed();
  const int next = (rank_ + 1) % world_;
  const int prev = (rank_ + world_ - 1) % world_;
  Buffer out(t, n), in(t, n), want(t, n);
  for (std::size_t i = 0; i < n; ++i) {
    out.set(i, data_value(t, rank_, i, seed));
    want.set(i, data_value(t, prev, i, seed));
  }
  in.poison();
  const std::uint32_t tag = seed % 1000;
  if (async) {
    // Both posted before either is waited: consecutive point-to-point operations progress
    // together, so a ring of large messages does not deadlock.
    auto r = c_.recv_async(in.view(), prev, tag);
    auto s = c_.send_async(out.view(), next, tag);
    s->wait();
    r->wait();
  } else if (rank_ % 2 == 0) {
    c_.send(out.view(), next, tag);
    c_.recv(in.view(), prev, tag);
  } else {
    c_.recv(in.view(), prev, tag);
    c_.send(out.view(), next, tag);
  }
  expect(context(async ? "send/recv async" : "send/recv", "", t, fmt::format("n={}", n)),
         difference(in, want));
}

void Sweep::barrier(const std::string& algo) {
  CallOptions o;
  o.algorithm = algo;
  if (attempt([&] { c_.barrier(o); })) ++checks_;
}

void Sweep::small() {
  const auto types = sweep_types();
  const int nd = static_cast<int>(types.size());
  const auto op_for = [](int a, int b, int c) { return kAllReduceOps[(a + b + c) % 5]; };
  for (const auto& algo : algorithms_of(CollectiveKind::allreduce)) {
    for (int d = 0; d < nd; ++d) {
      const DataType t = types[d];
      for (int k = 0; k < static_cast<int>(counts_.size()); ++k) {
        for (bool ip : {false, true}) {
          if (algo.empty()) {
            for (ReduceOp op : kAllReduceOps) allreduce(algo, t, op, counts_[k], ip);
          } else {
            allreduce(algo, t, op_for(d, k, ip), counts_[k], ip);
          }
        }
      }
    }
  }
  for (const auto& algo : algorithms_of(CollectiveKind::reduce)) {
    for (int d = 0; d < nd; ++d)
      for (int k = 0; k < static_cast<int>(counts_.size()); ++k)
        for (bool ip : {false, true})
          reduce(algo, types[d], op_for(d, k, ip), counts_[k], roots_[(d + k + ip) % 3], ip);
  }
  for (const auto& algo : algorithms_of(CollectiveKind::reduce_scatter)) {
    for (int d = 0; d < nd; ++d)
      for (int k = 0; k < static_cast<int>(counts_.size()); ++k)
        for (bool ip : {false, true})
          reduce_scatter(algo, types[d], op_for(d, k, ip), counts_[k], ip);
  }
  for (const auto& algo : algorithms_of(CollectiveKind::broadcast)) {
    for (int d = 0; d < nd; ++d)
      for (int k = 0; k < static_cast<int>(counts_.size()); ++k)
        for (bool ip : {false, true})
          for (int root : roots_) broadcast(algo, types[d], counts_[k], root, ip);
  }
  for (const auto& algo : algorithms_of(CollectiveKind::allgather)) {
    for (int d = 0; d < nd; ++d)
      for (std::size_t n : counts_)
        for (bool ip : {false, true}) allgather(algo, types[d], n, ip);
  }
  for (const auto& algo : algorithms_of(CollectiveKind::allgatherv))
    for (int d = 0; d < nd; ++d)
      for (std::size_t n : counts_)
        for (bool ip : {false, true}) allgatherv(algo, types[d], n, ip);
  for (const auto& algo : algorithms_of(CollectiveKind::alltoall))
    for (int d = 0; d < nd; ++d)
      for (std::size_t n : counts_)
        for (bool ip : {false, true}) alltoall(algo, types[d], n, ip);
  for (const auto& algo : algorithms_of(CollectiveKind::gather))
    for (int d = 0; d < nd; ++d)
      for (int k = 0; k < static_cast<int>(counts_.size()); ++k)
        for (bool ip : {false, true}) gather(algo, types[d], counts_[k], roots_[(d + k) % 3], ip);
  for (const auto& algo : algorithms_of(CollectiveKind::scatter))
    for (int d = 0; d < nd; ++d)
      for (int k = 0; k < static_cast<int>(counts_.size()); ++k)
        for (bool ip : {false, true}) scatter(algo, types[d], counts_[k], roots_[(d + k) % 3], ip);
  if (world_ > 1) {
    for (int d = 0; d < nd; ++d)
      for (std::size_t n : counts_) {
        sendrecv(types[d], n, false);
        sendrecv(types[d], n, true);
      }
  }
  for (const auto& algo : algorithms_of(CollectiveKind::barrier)) barrier(algo);
}

void Sweep::large() {
  const std::size_t n = large_count();
  for (const auto& algo : algorithms_of(CollectiveKind::allreduce)) {
    allreduce(algo, DataType::f32, ReduceOp::sum, n, false);
    allreduce(algo, DataType::bf16, ReduceOp::avg, n, true);
  }
  allreduce("", DataType::i32, ReduceOp::max, n, true);
  allreduce("", DataType::f16, ReduceOp::prod, n, false);
  for (const auto& algo : algorithms_of(CollectiveKind::broadcast)) {
    broadcast(algo, DataType::f32, n, world_ / 2, false);
    broadcast(algo, DataType::u8, n + 5, world_ - 1, true);
  }
  for (const auto& algo : algorithms_of(CollectiveKind::reduce))
    reduce(algo, DataType::f32, ReduceOp::sum, n, world_ - 1, false);
  for (const auto& algo : algorithms_of(CollectiveKind::allgather))
    allgather(algo, DataType::f32, n / static_cast<std::size_t>(world_), algo.empty());
  for (const auto& algo : algorithms_of(CollectiveKind::reduce_scatter))
    reduce_scatter(algo, DataType::f32, ReduceOp::sum, n / static_cast<std::size_t>(world_),
                   algo.empty());
  allgatherv("", DataType::f32, n / static_cast<std::size_t>(world_), false);
  alltoall("", DataType::f32, n / static_cast<std::size_t>(world_), false);
  gather("", DataType::f32, n / static_cast<std::size_t>(world_), 0, false);
  scatter("", DataType::f32, n / static_cast<std::size_t>(world_), world_ - 1, false);
  if (world_ > 1) {
    sendrecv(DataType::f32, n, true);
    sendrecv(DataType::f32, n, false);
  }
}

}  // namespace tandem::mptest
