// Broadcast and allgather of plain (unregistered) buffers moved with cross-memory attach
// (algorithms/cma.hpp: a broadcast's ranks read, its root in place writes its part; an
// allgather's ranks write their blocks): every size across the thresholds, the pieces and
// around the root's part, in place and out of place, every root, against a reference; a rank
// with CMA off makes every rank agree on the ring (allgather, or a broadcast from it) or asks
// for the data (a broadcast to it); and a read or a write the kernel refuses (a non-dumpable
// peer, a caller without CAP_SYS_PTRACE) falls back to sending that part and turns CMA off on
// the caller; ranks whose first messages name different sizes (an allgather's hellos, a
// broadcast's) fail before anything is copied.

#include "algorithms/cma.hpp"

#include "algorithms/direct.hpp"
#include "core/reduce.hpp"
#include "mp_util.hpp"
#include "transport/mesh.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <linux/capability.h>
#include <sched.h>
#include <string>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace tandem::mptest {
namespace {

// Element counts (f32) around the thresholds: 16 KiB of allgather result, 64 KiB of broadcast
// (its one-copy crossover before it moved to 32 KiB), an allgather's pieces of 256 KiB (one,
// one and an element, four less one), the 1 MiB where a broadcast once turned to the ring,
// awkward and not.
const std::size_t kCounts[] = {1, 1031, 4096, 16383, 16384, 65536, 65537, 262143, 300007};

std::uint32_t g_seed = 1;

std::string check_allgather(Communicator& comm, std::size_t count, bool in_place) {
  const auto n = static_cast<std::size_t>(comm.size());
  const auto r = static_cast<std::size_t>(comm.rank());
  const std::uint32_t seed = ++g_seed;
  Buffer want(DataType::f32, count * n);
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t i = 0; i < count; ++i)
      want.set(p * count + i, data_value(DataType::f32, static_cast<int>(p), i, seed));
  Buffer out(DataType::f32, count * n);
  out.poison();
  Buffer in(DataType::f32, count);
  for (std::size_t i = 0; i < count; ++i) in.set(i, want.get(r * count + i));
  BufferView src = in.view();
  if (in_place) {
    std::memcpy(static_cast<float*>(out.data()) + r * count, in.data(), count * sizeof(float));
    src = out.view(r * count, count);
  }
  comm.allgather(src, out.view());
  return difference(out, want);
}

std::string check_broadcast(Communicator& comm, std::size_t count, int root, bool in_place,
                            const CallOptions& o = {}) {
  const std::uint32_t seed = ++g_seed;
  Buffer want(DataType::f32, count);
  for (std::size_t i = 0; i < count; ++i) want.set(i, data_value(DataType::f32, root, i, seed));
  Buffer in(DataType::f32, count);
  Buffer out(DataType::f32, count);
  out.poison();
  if (comm.rank() == root) std::memcpy(in.data(), want.data(), want.bytes());
  if (in_place) {
    if (comm.rank() == root) std::memcpy(out.data(), want.data(), want.bytes());
    comm.broadcast(out.view(), root, o);
  } else {
    comm.broadcast(in.view(), out.view(), root, o);
  }
  return difference(out, want);
}

// An allgather of `count` elements a rank matches the reference and, from 16 KiB of result
// where every rank may use cross-memory attach, ran one-copy.
void expect_allgather(Communicator& comm, std::size_t count, bool in_place, bool cma) {
  EXPECT_EQ(check_allgather(comm, count, in_place), "")
      << "allgather " << count << (in_place ? " in place" : "");
  if (cma && count * sizeof(float) * static_cast<std::size_t>(comm.size()) >= (16u << 10)) {
    EXPECT_EQ(comm.last_algorithm(), "direct");
  }
}

TEST(Cma, BroadcastAndAllgatherOfPlainBuffersMatchTheReference) {
  for (int world : {2, 3}) {
    const auto exits = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          auto comm = connect(ctx);
          const bool cma = algorithms::detail::cma_usable();
          for (std::size_t count : kCounts) {
            for (bool in_place : {false, true}) {
              expect_allgather(*comm, count, in_place, cma);
              for (int root = 0; root < ctx.size; ++root) {
                EXPECT_EQ(check_broadcast(*comm, count, root, in_place), "")
                    << "broadcast " << count << " from " << root << (in_place ? " in place" : "");
                // From 64 KiB (one copy from 32 KiB): one copy at every size where CMA may be
                // used, else the ring.
                if (count * sizeof(float) >= (64u << 10)) {
                  EXPECT_EQ(comm->last_algorithm(), cma ? "direct" : "ring");
                }
              }
            }
          }
        },
        run_options("shm"));
    testing::expect_all_ok(exits);
  }
}

// An output of core::streams() size (16 MiB by default) gets each rank's own block copied with
// streaming stores and written into the peers from the input: with the threshold at 256 B
// every size of kCounts takes that path, in place (nothing to copy) and out of place.
TEST(Cma, AllgatherWithStreamingStoresMatchesTheReference) {
  for (int world : {2, 3}) {
    const auto exits = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          auto comm = connect(ctx);
          ASSERT_EQ(core::stream_threshold(), 256u);
          const bool cma = algorithms::detail::cma_usable();
          for (std::size_t count : kCounts)
            for (bool in_place : {false, true}) expect_allgather(*comm, count, in_place, cma);
        },
        run_options("shm", {"TANDEM_STREAM_BYTES=256"}));
    testing::expect_all_ok(exits);
  }
}

// A root broadcasting in place writes the last 1/n of the data (whole 64-byte lines) into the
// others' outputs while they read the rest: every split, from none (under 64 bytes a rank) to
// lines and bytes left over, on 2-4 ranks, every root, in place and out of place.
TEST(Cma, DirectBroadcastOfEveryAwkwardSizeMatchesTheReference) {
  const std::size_t counts[] = {1, 15, 16, 17, 31, 32, 33, 47, 48, 49, 64, 65, 4099, 65537};
  CallOptions direct;
  direct.algorithm = "direct";
  for (int world : {2, 3, 4}) {
    const auto exits = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          auto comm = connect(ctx);
          const bool cma = algorithms::detail::cma_usable();
          for (std::size_t count : counts) {
            for (bool in_place : {true, false}) {
              for (int root = 0; root < ctx.size; ++root) {
                EXPECT_EQ(check_broadcast(*comm, count, root, in_place, direct), "")
                    << "broadcast " << count << " from " << root << (in_place ? " in place" : "");
                EXPECT_EQ(comm->last_algorithm(), cma ? "direct" : "ring");
              }
            }
          }
          EXPECT_EQ(algorithms::detail::cma_usable(), cma) << "no read or write was refused";
        },
        run_options("shm"));
    testing::expect_all_ok(exits);
  }
}

TEST(Cma, ARankWithCmaOffIsServedOrMakesEveryRankUseTheRing) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        if (ctx.rank == 1) algorithms::detail::cma_disable();
        const bool cma = algorithms::detail::cma_usable();
        comm->barrier();
        const std::size_t count = 65537;  // 256 KiB: direct for both collectives
        EXPECT_EQ(check_allgather(*comm, count, false), "");
        EXPECT_EQ(comm->last_algorithm(), "ring") << "one rank without CMA: all use the ring";
        for (int root = 0; root < ctx.size; ++root) {
          EXPECT_EQ(check_broadcast(*comm, count, root, root == 2), "") << "from " << root;
          // From the rank without CMA: the ring; from the others: rank 1 asks for the data.
          if (root == 1) {
            EXPECT_EQ(comm->last_algorithm(), "ring");
          } else if (cma || ctx.rank == 1) {
            EXPECT_EQ(comm->last_algorithm(), "direct");
          }
        }
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

// Clears CAP_SYS_PTRACE from this process's effective capabilities (nothing to clear when it
// does not have it).
void drop_ptrace_capability() {
  __user_cap_header_struct head{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  ASSERT_EQ(::syscall(SYS_capget, &head, data), 0);
  data[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
  ASSERT_EQ(::syscall(SYS_capset, &head, data), 0);
}

// Rank 1 becomes a process that rank 0 may neither read nor write: it is not dumpable, and
// rank 0 may not override that. Then a barrier, so that no transfer starts before.
void keep_rank0_out_of_rank1(const testing::RankContext& ctx, Communicator& comm) {
  if (ctx.rank == 1) {
    ASSERT_EQ(::prctl(PR_SET_DUMPABLE, 0), 0);
  }
  if (ctx.rank == 0) drop_ptrace_capability();
  comm.barrier();
}

// Rank 0 reads the unreadable rank 1's buffer in a broadcast out of place from rank 1.
TEST(Cma, ARefusedReadIsSentInsteadAndTurnsCmaOff) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        keep_rank0_out_of_rank1(ctx, *comm);
        const bool before = algorithms::detail::cma_usable();
        const std::size_t count = 65537;
        EXPECT_EQ(check_broadcast(*comm, count, 1, false), "") << "from the unreadable rank";
        if (ctx.rank == 0) {
          EXPECT_FALSE(algorithms::detail::cma_usable()) << "the refused read turns CMA off";
        }
        // Later calls agree on the ring, and stay right.
        EXPECT_EQ(check_allgather(*comm, count, true), "");
        if (before) {
          EXPECT_EQ(comm->last_algorithm(), "ring");
        }
        EXPECT_EQ(check_broadcast(*comm, count, 0, true), "");
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

// An allgather's write into a rank it may not write: rank 0's block goes to rank 1 through
// shared memory (from the piece that was refused on, the copy into its own output going on),
// rank 1's write into rank 0 is allowed and stays one copy.
TEST(Cma, AnAllgathersRefusedWriteIsSentInsteadAndTurnsCmaOff) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        keep_rank0_out_of_rank1(ctx, *comm);
        const bool before = algorithms::detail::cma_usable();
        const std::size_t count = 300007;  // 1.2 MB a rank: several pieces
        EXPECT_EQ(check_allgather(*comm, count, false), "") << "out of place";
        if (before) {
          EXPECT_EQ(comm->last_algorithm(), "direct");
        }
        if (ctx.rank == 0) {
          EXPECT_FALSE(algorithms::detail::cma_usable()) << "the refused write turns CMA off";
        }
        if (ctx.rank == 1) {
          EXPECT_EQ(algorithms::detail::cma_usable(), before) << "rank 1's write was allowed";
        }
        // Later calls agree on the ring, and stay right.
        EXPECT_EQ(check_allgather(*comm, count, true), "") << "in place";
        if (before) {
          EXPECT_EQ(comm->last_algorithm(), "ring");
        }
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

// The root's write into a rank it may not write (rank 1 not dumpable, rank 0 without
// CAP_SYS_PTRACE) is sent instead, and turns CMA off on the root; rank 1's read of the rest
// from rank 0 is allowed and stays one copy.
TEST(Cma, ARefusedWriteIsSentInsteadAndTurnsCmaOff) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        keep_rank0_out_of_rank1(ctx, *comm);
        const bool before = algorithms::detail::cma_usable();
        const std::size_t count = 65537;  // 256 KiB: the root writes the last 128 KiB
        EXPECT_EQ(check_broadcast(*comm, count, 0, true), "") << "in place from rank 0";
        if (ctx.rank == 0) {
          EXPECT_FALSE(algorithms::detail::cma_usable()) << "the refused write turns CMA off";
        }
        if (ctx.rank == 1) {
          EXPECT_EQ(algorithms::detail::cma_usable(), before) << "rank 1's read was allowed";
        }
        // Later calls from either root stay right (from rank 0: the ring).
        EXPECT_EQ(check_broadcast(*comm, count, 0, true), "");
        if (before) {
          EXPECT_EQ(comm->last_algorithm(), "ring");
        }
        EXPECT_EQ(check_broadcast(*comm, count, 1, true), "");
        EXPECT_EQ(check_broadcast(*comm, 300007, 1, false), "");
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

// A bare shm mesh (no communicator) and an allgather's call of `in` into `out` over it, for
// the algorithms layer's helpers.
std::unique_ptr<transport::Mesh> bare_mesh(const testing::RankContext& ctx, store::Store& store) {
  transport::MeshOptions o;
  o.token = "cma-test-token";
  return transport::connect_mesh(store, ctx.rank, ctx.size, o);
}

algorithms::Call allgather_call(std::vector<float>& in, std::vector<float>& out) {
  algorithms::Call call;
  call.kind = CollectiveKind::allgather;
  call.in = BufferView::of(std::span<float>(in));
  call.out = BufferView::of(std::span<float>(out));
  call.deadline = Clock::now() + std::chrono::seconds(60);
  return call;
}

// Two ranks whose calls carry the same tag (a 32-bit hash of kind, dtype, size, root and
// sequence number) but different sizes learn it from the hello itself, before anything is
// written into the other's buffer: both fail with Mismatch, naming the sizes. Equal sizes pass
// and each learns the other's pid and addresses.
TEST(Cma, HellosOfDifferentSizesFailBeforeAnyCopy) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto store = ctx.store();
        auto mesh = bare_mesh(ctx, *store);
        std::vector<float> in(ctx.rank == 0 ? 1000 : 1001);
        std::vector<float> out(2 * in.size());
        algorithms::Call call = allgather_call(in, out);
        call.tag = 0x5eed;  // the same on both ranks, as a hash collision would have it
        try {
          (void)algorithms::detail::exchange_where(call, *mesh, false);
          ADD_FAILURE() << "sizes 4000 and 4004 bytes passed the hello";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
          const std::string mine = ctx.rank == 0 ? "4000" : "4004";
          const std::string theirs = ctx.rank == 0 ? "4004" : "4000";
          EXPECT_NE(e.message().find("input is " + mine + " bytes"), std::string::npos)
              << e.message();
          EXPECT_NE(e.message().find("is " + theirs + " bytes"), std::string::npos) << e.message();
        }
        in.resize(1000);
        call.in = BufferView::of(std::span<float>(in));
        call.tag = 0x5eee;
        const auto where = algorithms::detail::exchange_where(call, *mesh, false);
        const auto& peer = where[static_cast<std::size_t>(1 - ctx.rank)];
        EXPECT_EQ(peer.in_bytes, 4000u);
        EXPECT_NE(peer.pid, ::getpid());
        EXPECT_NE(peer.in_at, 0u) << "an unregistered input: its address";
        EXPECT_NE(peer.out_at, 0u) << "an unregistered output: its address";
        mesh->close();
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

// The broadcast's twin: the root in place (which writes its part of the data into every
// rank's output) and a rank whose calls carry the same tag but different sizes learn it from
// the first message each way, before the root writes: both fail with Mismatch, naming the
// sizes, and the guard behind the smaller output is untouched. Equal sizes then broadcast.
TEST(Cma, ABroadcastsSizesAreCheckedBeforeTheRootWrites) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto store = ctx.store();
        auto mesh = bare_mesh(ctx, *store);
        const algorithms::Algorithm* direct =
            algorithms::Registry::builtin().find(CollectiveKind::broadcast, "direct");
        ASSERT_NE(direct, nullptr);
        algorithms::Scratch scratch;
        algorithms::Context actx{*mesh, scratch};
        // Rank 0 broadcasts 1001 floats from 64 KiB on, rank 1 expects 1000 and keeps a guard of
        // 64 floats behind them.
        constexpr std::size_t kGuard = 64;
        const std::size_t count = ctx.rank == 0 ? 16384 + 1001 : 16384 + 1000;
        std::vector<float> buf(count + kGuard, 7.0f);
        for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(i);
        algorithms::Call call;
        call.kind = CollectiveKind::broadcast;
        call.in = call.out = BufferView::of(std::span<float>(buf.data(), count));
        call.root = 0;
        call.tag = 0x5eed;  // the same on both ranks, as a hash collision would have it
        call.deadline = Clock::now() + std::chrono::seconds(60);
        try {
          direct->run(call, actx);
          ADD_FAILURE() << "sizes 69540 and 69536 bytes passed the first messages";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
          const std::string mine = ctx.rank == 0 ? "69540" : "69536";
          const std::string theirs = ctx.rank == 0 ? "69536" : "69540";
          EXPECT_NE(e.message().find("buffer is " + mine + " bytes"), std::string::npos)
              << e.message();
          EXPECT_NE(e.message().find("is " + theirs + " bytes"), std::string::npos) << e.message();
        }
        for (std::size_t i = count; i < buf.size(); ++i)
          ASSERT_EQ(buf[i], 7.0f) << "the guard behind the output was written at " << i - count;
        // Equal sizes: the root's data arrives whole, part read and part written.
        const std::size_t equal = 16384 + 1000;
        for (std::size_t i = 0; i < equal; ++i)
          buf[i] = ctx.rank == 0 ? static_cast<float>(3 * i + 1) : -1.0f;
        call.in = call.out = BufferView::of(std::span<float>(buf.data(), equal));
        call.tag = 0x5eee;
        direct->run(call, actx);
        for (std::size_t i = 0; i < equal; ++i)
          ASSERT_EQ(buf[i], static_cast<float>(3 * i + 1)) << "element " << i;
        mesh->close();
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

// Between the pieces a rank writes into its peers' buffers it stops once its deadline has
// passed (Timeout) or, when it looks, once a peer aborted (Aborted): the peer may be reusing
// its buffer by then.
TEST(Cma, WritesStopAtTheDeadlineOrAPeersAbort) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto store = ctx.store();
        auto mesh = bare_mesh(ctx, *store);
        std::vector<float> in(1000);
        std::vector<float> out(2000);
        algorithms::Call call = allgather_call(in, out);
        // Alive and in time: no error, with and without the look at the peers.
        algorithms::detail::stop_writing_if_given_up(call, *mesh, 3, 16);
        algorithms::detail::stop_writing_if_given_up(call, *mesh, 16, 16);
        const Deadline ends = call.deadline;
        call.deadline = Clock::now() - std::chrono::seconds(1);
        try {
          algorithms::detail::stop_writing_if_given_up(call, *mesh, 5, 16);
          ADD_FAILURE() << "a write went on after the deadline";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
          EXPECT_NE(e.message().find("(5 pieces written)"), std::string::npos) << e.message();
        }
        call.deadline = ends;
        // Both ranks are past the checks above before rank 1 aborts.
        store->set("checked" + std::to_string(ctx.rank), "1");
        store->wait(std::vector<std::string>{"checked0", "checked1"}, ends);
        if (ctx.rank == 1) {
          mesh->abort(Error(ErrorCode::Aborted, "the test's rank 1 gives up"));
          store->wait(std::vector<std::string>{"seen"}, ends);  // until rank 0 saw it
          return;
        }
        // Rank 0 looks (every piece, as the broadcast's root does) until the abort arrives.
        ErrorCode seen = ErrorCode::Internal;
        while (Clock::now() < ends && seen == ErrorCode::Internal) {
          try {
            algorithms::detail::stop_writing_if_given_up(call, *mesh, 1, 1);
          } catch (const Error& e) {
            seen = e.code();
          }
        }
        store->set("seen", "1");
        EXPECT_EQ(seen, ErrorCode::Aborted);
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

// A rank in another pid namespace (containers of one pod: one host, their own pids): its pid
// means another process to its peers, so nobody reads it, or is read by it, with CMA; the
// results stay right. Needs CAP_SYS_ADMIN for the namespace (skipped without).
TEST(Cma, RanksInDifferentPidNamespacesDoNotReadEachOther) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        if (ctx.rank == 1) {
          if (::unshare(CLONE_NEWPID) != 0) {
            std::printf("rank 1: no new pid namespace (%s): the peers share one\n",
                        std::strerror(errno));
          } else {
            const pid_t child = ::fork();  // the first process of the new namespace: pid 1
            ASSERT_GE(child, 0);
            if (child > 0) {
              int status = 0;
              ASSERT_EQ(::waitpid(child, &status, 0), child);
              std::fflush(stdout);
              std::_Exit(WIFEXITED(status) ? WEXITSTATUS(status) : 4);
            }
            EXPECT_EQ(::getpid(), 1);
          }
        }
        auto comm = connect(ctx);
        const bool cma = algorithms::detail::cma_usable();
        const std::size_t count = 65537;  // 256 KiB: direct for both collectives
        EXPECT_EQ(check_allgather(*comm, count, false), "");
        for (int root = 0; root < ctx.size; ++root) {
          EXPECT_EQ(check_broadcast(*comm, count, root, false), "") << "from " << root;
        }
        EXPECT_EQ(check_allgather(*comm, count, true), "");
        // No read was even tried (one would have failed, on a pid that is not the peer's, and
        // turned CMA off).
        EXPECT_EQ(algorithms::detail::cma_usable(), cma);
        if (ctx.rank == 1) {
          std::fflush(stdout);
          std::fflush(stderr);
          std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
        }
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

}  // namespace
}  // namespace tandem::mptest
