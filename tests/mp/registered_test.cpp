// Registered buffers (Communicator::allocate) and the one-copy allreduce over them: the
// memory and its lifetime, every dtype x op x awkward count on 2 to 5 ranks against an
// independent reference, in-place and out-of-place, ranks that register only some buffers
// (the call must fall back, not fail), a rank killed mid-allreduce, and /dev/shm left clean.

#include "algorithms/cma.hpp"
#include "core/reduce.hpp"
#include "mp_util.hpp"
#include "sweep.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <dirent.h>
#include <ostream>
#include <string>
#include <unistd.h>
#include <vector>

namespace tandem::mptest {
namespace {

using namespace std::chrono_literals;

// Names of /dev/shm entries created by process `pid` (the segments carry their creator's pid).
std::vector<std::string> shm_names_of(int pid) {
  std::vector<std::string> out;
  const std::string reg = fmt::format("tandem-reg-{}x", pid);
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.starts_with(reg) || name.find(fmt::format("-{}x", pid)) != std::string::npos)
      out.push_back(name);
  }
  ::closedir(d);
  return out;
}

bool contains(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

// Runs one allreduce of `count` elements on `in`/`out` (raw memory, registered or not) with
// this rank's reference inputs, and checks the output against the reference.
void check_allreduce(Communicator& comm, void* in, void* out, DataType t, ReduceOp op,
                     std::size_t count, std::uint32_t seed, std::string_view algorithm) {
  const int rank = comm.rank();
  Buffer input(t, count);
  Buffer want(t, count);
  for (std::size_t i = 0; i < count; ++i) {
    input.set(i, reduce_input(op, t, rank, i, seed));
    want.set(i, reduce_expected(op, t, comm.size(), i, seed));
  }
  const std::size_t bytes = count * dtype_size(t);
  if (bytes != 0) std::memcpy(in, input.data(), bytes);
  if (out != in && bytes != 0) std::memset(out, 0xA5, bytes);
  CallOptions o;
  o.algorithm = algorithm;
  comm.allreduce(BufferView::raw(in, count, t), BufferView::raw(out, count, t), op, o);
  EXPECT_EQ(difference(out, want), "")
      << to_string(t) << " " << to_string(op) << " x " << count << (in == out ? " in-place" : "")
      << " on rank " << rank << " of " << comm.size();
}

// Broadcasts `count` elements from `root`'s `in` into every rank's `out` and checks them.
void check_broadcast(Communicator& comm, void* in, void* out, DataType t, int root,
                     std::size_t count, std::uint32_t seed) {
  Buffer want(t, count);
  for (std::size_t i = 0; i < count; ++i) want.set(i, data_value(t, root, i, seed));
  const std::size_t bytes = count * dtype_size(t);
  if (comm.rank() == root && bytes != 0) std::memcpy(in, want.data(), bytes);
  if (out != in && bytes != 0) std::memset(out, 0xA5, bytes);
  CallOptions o;
  o.algorithm = "direct";
  comm.broadcast(BufferView::raw(in, count, t), BufferView::raw(out, count, t), root, o);
  EXPECT_EQ(difference(out, want), "")
      << to_string(t) << " x " << count << " from root " << root << (in == out ? " in-place" : "")
      << " on rank " << comm.rank();
}

// Allgathers `count` elements per rank from `in` (nullptr: in place, block rank() of `out`).
void check_allgather(Communicator& comm, void* in, void* out, DataType t, std::size_t count,
                     std::uint32_t seed) {
  const auto n = static_cast<std::size_t>(comm.size());
  const auto r = static_cast<std::size_t>(comm.rank());
  const std::size_t es = dtype_size(t);
  Buffer want(t, count * n);
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t i = 0; i < count; ++i)
      want.set(p * count + i, data_value(t, static_cast<int>(p), i, seed));
  if (count != 0) std::memset(out, 0xA5, count * n * es);
  void* src = in != nullptr ? in : static_cast<std::byte*>(out) + r * count * es;
  if (count != 0)
    std::memcpy(src, static_cast<std::byte*>(want.data()) + r * count * es, count * es);
  CallOptions o;
  o.algorithm = "direct";
  comm.allgather(BufferView::raw(src, count, t), BufferView::raw(out, count * n, t), o);
  EXPECT_EQ(difference(out, want), "")
      << to_string(t) << " x " << count << (in == nullptr ? " in-place" : "") << " on rank " << r;
}

// Reduce-scatters `count` elements per rank from `in` (n blocks) into `out` (nullptr: in
// place, block rank() of `in`).
void check_reduce_scatter(Communicator& comm, void* in, void* out, DataType t, ReduceOp op,
                          std::size_t count, std::uint32_t seed) {
  const auto n = static_cast<std::size_t>(comm.size());
  const auto r = static_cast<std::size_t>(comm.rank());
  const std::size_t es = dtype_size(t);
  Buffer input(t, count * n);
  Buffer want(t, count);
  for (std::size_t i = 0; i < count * n; ++i)
    input.set(i, reduce_input(op, t, comm.rank(), i, seed));
  for (std::size_t i = 0; i < count; ++i)
    want.set(i, reduce_expected(op, t, comm.size(), r * count + i, seed));
  if (count != 0) std::memcpy(in, input.data(), count * n * es);
  void* dst = out != nullptr ? out : static_cast<std::byte*>(in) + r * count * es;
  if (out != nullptr && count != 0) std::memset(out, 0xA5, count * es);
  CallOptions o;
  o.algorithm = "direct";
  comm.reduce_scatter(BufferView::raw(in, count * n, t), BufferView::raw(dst, count, t), op, o);
  EXPECT_EQ(difference(dst, want), "") << to_string(t) << " " << to_string(op) << " x " << count
                                       << (out == nullptr ? " in-place" : "") << " on rank " << r;
}

TEST(Registered, AllocateSharesZeroedAlignedMemoryAndLeavesNoName) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto a = comm->allocate(1000);
        auto b = comm->allocate(3u << 20);
        auto empty = comm->allocate(0);
        for (const SharedBuffer* s : {&a, &b}) {
          EXPECT_TRUE(s->shared());
          ASSERT_NE(s->data(), nullptr);
          EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s->data()) % 4096, 0u);
          const auto bytes = s->as<unsigned char>();
          std::size_t nonzero = 0;
          for (unsigned char c : bytes) nonzero += c != 0;
          EXPECT_EQ(nonzero, 0u);
        }
        EXPECT_EQ(a.bytes(), 1000u);
        EXPECT_EQ(b.bytes(), 3u << 20);
        EXPECT_EQ(empty.bytes(), 0u);
        EXPECT_EQ(a.view(DataType::f32).count, 250u);
        EXPECT_EQ(a.view(DataType::i64, 2, 8).data, static_cast<std::byte*>(a.data()) + 8);
        EXPECT_THROW(a.view(DataType::f32, 251), Error);
        // Every name is gone once allocate() returns: a crash now leaves nothing behind.
        EXPECT_EQ(shm_names_of(::getpid()), std::vector<std::string>{});
        // Moving keeps the memory; freeing one rank's buffer early is safe for the other.
        SharedBuffer moved = std::move(a);
        EXPECT_EQ(a.data(), nullptr);
        EXPECT_EQ(moved.bytes(), 1000u);
        if (ctx.rank == 0) moved = SharedBuffer();
        check_allreduce(*comm, b.data(), b.data(), DataType::f32, ReduceOp::sum, 300000, 1, "");
        // A buffer may outlive its communicator.
        comm.reset();
        b.as<float>()[0] = 42.0f;
        EXPECT_EQ(b.as<float>()[0], 42.0f);
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

TEST(Registered, SizeMismatchFailsOnEveryRank) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        try {
          auto a = comm->allocate(ctx.rank == 0 ? 4096 : 8192);
          ADD_FAILURE() << "allocate() of different sizes succeeded";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
          EXPECT_TRUE(contains(e.message(), "same sizes")) << e.what();
        }
        EXPECT_EQ(shm_names_of(::getpid()), std::vector<std::string>{});
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

TEST(Registered, PrivateMemoryWithoutSharedMemoryStillWorks) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto a = comm->allocate(1u << 20);
        EXPECT_FALSE(a.shared());
        ASSERT_NE(a.data(), nullptr);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 4096, 0u);
        check_allreduce(*comm, a.data(), a.data(), DataType::f32, ReduceOp::sum, 262143, 2, "");
        check_allreduce(*comm, a.data(), a.data(), DataType::i32, ReduceOp::max, 1001, 3, "direct");
        EXPECT_EQ(comm->last_algorithm(), "ring") << "direct runs the ring over tcp";
      },
      run_options("tcp"));
  testing::expect_all_ok(exits);
}

struct Config {
  int world = 2;
  bool stream = false;  ///< TANDEM_STREAM_BYTES=256: every copy and reduction from 256 B streams
};

void PrintTo(const Config& c, std::ostream* os) {
  *os << "world " << c.world << (c.stream ? ", streaming stores" : "");
}

class RegisteredSweep : public ::testing::TestWithParam<Config> {};

// Every dtype x op x count, out-of-place and in-place, on buffers registered at a different
// offset on every rank; then the same calls on mixed buffers (registered on some ranks only).
// With `stream`, the streaming-store paths (copies into the destination, the shared-memory
// receive, the direct algorithms' reads of peers) run from 256-byte calls up.
TEST_P(RegisteredSweep, DirectMatchesReference) {
  const int world = GetParam().world;
  const auto exits = testing::run_ranks(
      world,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        if (GetParam().stream) {
          ASSERT_EQ(core::stream_threshold(), 256u);
        }
        const std::size_t counts[] = {0, 1, 2, 3, 7, 13, 1031, 65537, 300007};
        const std::size_t max_bytes = 300007 * 8 + 4096;
        auto in = comm->allocate(max_bytes);
        auto out = comm->allocate(max_bytes);
        ASSERT_TRUE(in.shared());
        // Offsets differ per rank (whole elements of every dtype: multiples of 8).
        const std::size_t shift = 8 * static_cast<std::size_t>(ctx.rank);
        auto* rin = static_cast<std::byte*>(in.data()) + shift;
        auto* rout = static_cast<std::byte*>(out.data()) + shift;
        std::vector<std::byte> user_in(max_bytes), user_out(max_bytes);
        std::uint32_t seed = 10;
        for (DataType t : sweep_types()) {
          for (ReduceOp op : kAllReduceOps) {
            for (std::size_t n : counts) {
              // The largest count only for f32 and f64 sum/max (keeps the test short).
              if (n > 100000 && !((t == DataType::f32 || t == DataType::f64) &&
                                  (op == ReduceOp::sum || op == ReduceOp::max)))
                continue;
              check_allreduce(*comm, rin, rout, t, op, n, ++seed, "direct");
              check_allreduce(*comm, rin, rin, t, op, n, ++seed, "direct");
              if (n > 0) {
                EXPECT_EQ(comm->last_algorithm(), "direct");
              }
              // Registered on even ranks only: the ranks must agree to fall back.
              void* mixed = ctx.rank % 2 == 0 ? static_cast<void*>(rin) : user_in.data();
              check_allreduce(*comm, mixed, mixed, t, op, n, ++seed, "direct");
              if (n > 0) {
                EXPECT_EQ(comm->last_algorithm(), "ring") << "the fallback is named";
              }
              // Input registered, output not (on every rank): falls back as well.
              check_allreduce(*comm, rin, user_out.data(), t, op, n, ++seed, "direct");
            }
          }
        }
        // Broadcast: only the root's source needs to be registered.
        for (int root = 0; root < ctx.size; ++root) {
          for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{1031},
                                std::size_t{300007}}) {
            for (DataType t : {DataType::f32, DataType::u8, DataType::f64}) {
              check_broadcast(*comm, rin, rin, t, root, n, ++seed);
              check_broadcast(*comm, rin, rout, t, root, n, ++seed);
              check_broadcast(*comm, rin, user_out.data(), t, root, n, ++seed);
              // The root's source unregistered: the ranks read it with cross-memory attach
              // (the root, in place, writing its part) where the kernel lets them, else every
              // rank falls back to the ring.
              check_broadcast(*comm, user_in.data(), user_in.data(), t, root, n, ++seed);
              if (n > 0) {
                EXPECT_EQ(comm->last_algorithm(),
                          algorithms::detail::cma_usable() ? "direct" : "ring");
              }
            }
          }
        }
        // Allgather: every rank's input registered (in place too), or not on odd ranks.
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{1031},
                              std::size_t{60013}}) {
          for (DataType t : {DataType::f32, DataType::u8, DataType::f64}) {
            check_allgather(*comm, rin, rout, t, n, ++seed);
            check_allgather(*comm, nullptr, rout, t, n, ++seed);
            check_allgather(*comm, ctx.rank % 2 == 0 ? static_cast<void*>(rin) : user_in.data(),
                            rout, t, n, ++seed);
            check_allgather(*comm, rin, user_out.data(), t, n, ++seed);
          }
        }
        // Reduce-scatter: every rank's input registered (in place too), or not on odd ranks.
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{1031},
                              std::size_t{60013}}) {
          for (DataType t : {DataType::f32, DataType::i32, DataType::f64, DataType::bf16}) {
            for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min}) {
              check_reduce_scatter(*comm, rin, rout, t, op, n, ++seed);
              check_reduce_scatter(*comm, rin, nullptr, t, op, n, ++seed);
              check_reduce_scatter(*comm,
                                   ctx.rank % 2 == 0 ? static_cast<void*>(rin) : user_in.data(),
                                   rout, t, op, n, ++seed);
            }
          }
        }
        // The selector's own choice for large calls, registered and not.
        check_allreduce(*comm, rin, rout, DataType::f32, ReduceOp::avg, 1u << 19, ++seed, "");
        check_allreduce(*comm, user_in.data(), user_in.data(), DataType::f32, ReduceOp::sum,
                        1u << 19, ++seed, "");
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::allreduce, 4u << 20), "direct");
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::broadcast, 4u << 20), "direct");
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::allgather, 4u << 20), "direct");
        EXPECT_EQ(comm->algorithm_for(CollectiveKind::reduce_scatter, 4u << 20), "direct");
        comm->barrier();
      },
      run_options("shm", GetParam().stream ? std::vector<std::string>{"TANDEM_STREAM_BYTES=256"}
                                           : std::vector<std::string>{}));
  testing::expect_all_ok(exits);
}

INSTANTIATE_TEST_SUITE_P(Worlds, RegisteredSweep,
                         ::testing::Values(Config{2}, Config{3}, Config{4}, Config{5},
                                           Config{3, true}),
                         [](const ::testing::TestParamInfo<Config>& p) {
                           return fmt::format("world{}{}", p.param.world,
                                              p.param.stream ? "_streaming" : "");
                         });

TEST(Registered, RankKilledMidDirectAllreduceGivesPeerLostAndLeavesNoSegment) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto store = ctx.store();
        store->set(fmt::format("pid/{}", ctx.rank), std::to_string(::getpid()));
        const std::size_t n = 8u << 20;  // 32 MiB of f32
        auto buf = comm->allocate(n * sizeof(float));
        auto view = buf.view(DataType::f32);
        comm->barrier();
        allreduce_while_rank_dies(*comm, *store, view, 1, "direct");
        EXPECT_TRUE(comm->poisoned());
        // Nothing of any rank, the killed one included, is left in /dev/shm.
        const int killed = std::stoi(store->get("pid/1"));
        EXPECT_EQ(shm_names_of(killed), std::vector<std::string>{});
        EXPECT_EQ(shm_names_of(::getpid()), std::vector<std::string>{});
      },
      run_options("shm"));
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
  EXPECT_FALSE(exits[1].exited);
  EXPECT_EQ(exits[1].signal, SIGKILL);
  EXPECT_TRUE(exits[2].ok()) << testing::describe(exits[2]);
}

}  // namespace
}  // namespace tandem::mptest
