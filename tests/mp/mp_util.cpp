#include "mp_util.hpp"

#include "algorithms/algorithm.hpp"
#include "support/reference.hpp"

#include <tandem/error.hpp>
#include <tandem/half.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <signal.h>

namespace tandem::mptest {

testing::RunOptions run_options(std::string_view transport, std::vector<std::string> extra,
                                std::chrono::seconds timeout) {
  testing::RunOptions o;
  o.timeout = timeout;
  // "ucx": UCX between the ranks of this host (its shared-memory transports); "ucx_tcp":
  // UCX over its tcp transport only (UCX_TLS=tcp), on loopback.
  const bool ucx = transport.starts_with("ucx");
  o.env = {"TANDEM_TIMEOUT=60",
           "TANDEM_SHM_DISABLE=" + std::string(transport == "tcp" || ucx ? "1" : "0"),
           "TANDEM_TRANSPORT=" + std::string(ucx ? "ucx" : "tcp")};
  if (transport == "ucx_tcp") o.env.emplace_back("UCX_TLS=tcp");
  for (auto& e : extra) o.env.push_back(std::move(e));
  return o;
}

std::shared_ptr<Communicator> connect(const testing::RankContext& ctx, CommOptions options) {
  // The rank inherited the test process's logger, configured before its environment was.
  log::reload_from_env();
  return Communicator::create(ctx.store(), ctx.rank, ctx.size, std::move(options));
}

std::string allreduce_while_rank_dies(Communicator& comm, store::Store& store, BufferView view,
                                      int victim, std::string_view label) {
  const int rank = comm.rank();
  if (rank == victim) {
    // Dies once every other rank is inside the allreduce, before its own part of it: had it
    // started the call, the others could finish it from what it already gave (a direct
    // allreduce reads the peers' registered buffers) and rightly succeed.
    std::vector<std::string> entered;
    for (int r = 0; r < comm.size(); ++r)
      if (r != victim) entered.push_back(fmt::format("entered/{}", r));
    store.wait(entered);
    ::raise(SIGKILL);
  }
  store.set(fmt::format("entered/{}", rank), "1");
  const auto start = std::chrono::steady_clock::now();
  try {
    comm.allreduce(view, ReduceOp::sum);
  } catch (const Error& e) {
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
    EXPECT_NE(e.message().find(fmt::format("rank {}", victim)), std::string::npos) << e.what();
    EXPECT_LT(took, 15.0) << e.what();  // never-hang bound; run_options' TANDEM_TIMEOUT is 60 s
    std::printf("[ %.*s ] rank %d: PeerLost after %.3f s: %s\n", static_cast<int>(label.size()),
                label.data(), rank, took, e.message().c_str());
    return e.message();
  }
  ADD_FAILURE() << "allreduce succeeded although rank " << victim << " was killed";
  return {};
}

void Buffer::Free::operator()(std::uint64_t* p) const {
  std::free(p);
}

Buffer::Buffer(DataType dtype, std::size_t count) : count_(count), dtype_(dtype) {
  const std::size_t bytes = (count * dtype_size(dtype) + 63) / 64 * 64;
  if (bytes > 0) {
    words_.reset(static_cast<std::uint64_t*>(std::aligned_alloc(64, bytes)));
    if (!words_) throw std::bad_alloc();
    std::memset(words_.get(), 0, bytes);
  }
}

void Buffer::poison(unsigned char b) {
  if (count_ > 0) std::memset(data(), b, bytes());
}

namespace {

void put(DataType t, void* base, std::size_t i, double v) {
  switch (t) {
    case DataType::f32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case DataType::f64:
      static_cast<double*>(base)[i] = v;
      return;
    case DataType::f16:
      static_cast<std::uint16_t*>(base)[i] = float_to_half(static_cast<float>(v));
      return;
    case DataType::bf16:
      static_cast<std::uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(v));
      return;
    case DataType::i8:
      static_cast<std::int8_t*>(base)[i] = static_cast<std::int8_t>(v);
      return;
    case DataType::u8:
      static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(v);
      return;
    case DataType::i32:
      static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(v);
      return;
    case DataType::i64:
      static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(v);
      return;
  }
}

double fetch(DataType t, const void* base, std::size_t i) {
  switch (t) {
    case DataType::f32:
      return static_cast<const float*>(base)[i];
    case DataType::f64:
      return static_cast<const double*>(base)[i];
    case DataType::f16:
      return half_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DataType::bf16:
      return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DataType::i8:
      return static_cast<const std::int8_t*>(base)[i];
    case DataType::u8:
      return static_cast<const std::uint8_t*>(base)[i];
    case DataType::i32:
      return static_cast<const std::int32_t*>(base)[i];
    case DataType::i64:
      return static_cast<double>(static_cast<const std::int64_t*>(base)[i]);
  }
  return 0;
}

std::uint64_t mix(std::uint64_t r, std::uint64_t i, std::uint64_t seed) {
  return r * 0x9E3779B1u + i * 0x85EBCA77u + seed * 0xC2B2AE3Du;
}

}  // namespace

void Buffer::set(std::size_t i, double v) {
  put(dtype_, data(), i, v);
}
double Buffer::get(std::size_t i) const {
  return fetch(dtype_, data(), i);
}

double reduce_input(ReduceOp op, DataType t, int rank, std::size_t i, std::uint32_t seed) {
  const bool is_unsigned = t == DataType::u8;
  const auto r = static_cast<std::uint64_t>(rank);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: {
      const auto v = static_cast<int>((r * 7 + i * 13 + seed) % 7);  // 0..6
      return is_unsigned ? v % 4 : v - 3;                            // [0,3] or [-3,3]
    }
    case ReduceOp::prod: {
      // 2 for at most one rank of any 11 consecutive ones, so |product| <= 2.
      const auto v = (r * 5 + i * 3 + seed) % 11;
      if (v == 0) return 2;
      return (v % 2 == 1 && !is_unsigned) ? -1 : 1;
    }
    case ReduceOp::min:
    case ReduceOp::max:
    case ReduceOp::band:  // integers only
    case ReduceOp::bor:
    case ReduceOp::bxor: {
      const auto v = static_cast<int>(mix(r, i, seed) % 41);  // 0..40
      return is_unsigned ? v : v - 20;
    }
  }
  return 0;
}

double reduce_expected(ReduceOp op, DataType t, int world, std::size_t i, std::uint32_t seed) {
  return testing::reference_reduce(op, t, world,
                                   [&](int r) { return reduce_input(op, t, r, i, seed); });
}

double data_value(DataType t, int rank, std::size_t i, std::uint32_t seed) {
  const auto v = static_cast<int>(mix(static_cast<std::uint64_t>(rank) + 1, i, seed) % 201);
  return t == DataType::u8 ? v : v - 100;
}

std::string difference(const void* got, const Buffer& want) {
  if (want.bytes() == 0 || std::memcmp(got, want.data(), want.bytes()) == 0) return {};
  const std::size_t e = dtype_size(want.dtype());
  for (std::size_t i = 0; i < want.count(); ++i) {
    if (std::memcmp(static_cast<const std::byte*>(got) + i * e,
                    static_cast<const std::byte*>(want.data()) + i * e, e) != 0) {
      return fmt::format("element {} of {}: got {} want {}", i, want.count(),
                         fetch(want.dtype(), got, i), want.get(i));
    }
  }
  return "bytes differ";
}

std::string difference(const Buffer& got, const Buffer& want) {
  if (got.count() != want.count()) return fmt::format("count {} != {}", got.count(), want.count());
  return difference(got.data(), want);
}

std::uint64_t hash_bytes(const void* p, std::size_t n, std::uint64_t h) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::vector<std::string> algorithms_of(CollectiveKind kind) {
  std::vector<std::string> names{""};
  for (const auto* a : algorithms::Registry::builtin().of(kind)) names.emplace_back(a->name());
  return names;
}

}  // namespace tandem::mptest
