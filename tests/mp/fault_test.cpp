// Failure paths: a rank killed mid-allreduce, mismatched collectives, deadlines, abort(),
// destruction with work pending, and invalid arguments.

#include "mp_util.hpp"
#include "support/scoped_env.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <signal.h>
#include <string>
#include <vector>

namespace tandem::mptest {
namespace {

using namespace std::chrono_literals;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool contains(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

class Fault : public ::testing::TestWithParam<std::string> {};

TEST_P(Fault, RankKilledMidAllreduceFailsEverySurvivorWithPeerLost) {
  const std::string transport = GetParam();
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto store = ctx.store();
        const std::size_t n = 8u << 20;  // 32 MiB of f32: still moving when the rank dies
        std::vector<float> v(n, 1.0f);
        auto view = BufferView::of(std::span<float>(v));
        comm->barrier();
        const std::string lost = allreduce_while_rank_dies(*comm, *store, view, 1, transport);
        EXPECT_TRUE(contains(lost, "allreduce #1")) << lost;
        EXPECT_TRUE(comm->poisoned());
        EXPECT_NE(comm->error(), nullptr);
        // Later operations fail at once, with the same code, naming the original failure.
        const auto later = Clock::now();
        try {
          comm->barrier();
          ADD_FAILURE() << "barrier succeeded on a poisoned communicator";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
          EXPECT_TRUE(contains(e.message(), "communicator poisoned")) << e.what();
          EXPECT_TRUE(contains(e.message(), "rank 1")) << e.what();
          EXPECT_LT(seconds_since(later), 1.0);
        }
        auto w = comm->allreduce_async(view, view, ReduceOp::sum);
        EXPECT_THROW(w->wait(deadline_in(5s)), Error);
      },
      run_options(transport));
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
  EXPECT_EQ(exits[1].signal, SIGKILL) << testing::describe(exits[1]);
  EXPECT_TRUE(exits[2].ok()) << testing::describe(exits[2]);
}

// Each rank records the code its collective failed with; rank 0 checks them. Calls carry a
// 5 s deadline: whatever a mismatch turns into, every rank fails by then.
void expect_failure_codes(const testing::RankContext& ctx, store::Store& store,
                          const std::function<void(const CallOptions&)>& collective,
                          bool want_mismatch) {
  const auto start = Clock::now();
  ErrorCode code = ErrorCode::Internal;
  try {
    collective(CallOptions{deadline_in(5s), {}});
    ADD_FAILURE() << "rank " << ctx.rank << ": mismatched collective succeeded";
  } catch (const Error& e) {
    code = e.code();
    EXPECT_LT(seconds_since(start), 15.0) << e.what();
    EXPECT_TRUE(code == ErrorCode::Mismatch || code == ErrorCode::Aborted ||
                code == ErrorCode::PeerLost || code == ErrorCode::Timeout)
        << e.what();
    std::printf("rank %d after %.3f s: %s\n", ctx.rank, seconds_since(start), e.what());
  }
  store.set(fmt::format("code/{}", ctx.rank), std::string(to_string(code)));
  if (ctx.rank != 0) return;
  int mismatches = 0;
  for (int r = 0; r < ctx.size; ++r)
    mismatches += store.get(fmt::format("code/{}", r)) == to_string(ErrorCode::Mismatch);
  if (want_mismatch) {
    EXPECT_GE(mismatches, 1) << "no rank reported Mismatch";
  }
}

// Collectives the ranks call differently, one row each. `rank_calls(rank, comm, buffer, o)`
// is what that rank calls; `mismatch`: at least one rank must say Mismatch (two ranks: their
// messages meet and disagree). With three ranks an allreduce against a broadcast need not meet
// at all (each rank waits for a different peer): nothing can tell a mismatch from a slow peer,
// and the deadline ends it on every rank.
struct MismatchCase {
  const char* name;
  int world;
  std::function<void(int, Communicator&, std::vector<float>&, const CallOptions&)> rank_calls;
  bool mismatch;
};

void allreduce_or_broadcast_on(int broadcaster, int rank, Communicator& comm, std::vector<float>& v,
                               const CallOptions& o) {
  auto view = BufferView::of(std::span<float>(v));
  if (rank == broadcaster)
    comm.broadcast(view, 0, o);
  else
    comm.allreduce(view, ReduceOp::sum, o);
}

const MismatchCase kMismatches[] = {
    {"Counts", 2,
     [](int rank, Communicator& comm, std::vector<float>& v, const CallOptions& o) {
       v.resize(rank == 0 ? 100 : 200);
       comm.allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum, o);
     },
     true},
    {"AllreduceAgainstBroadcast", 2,
     [](int rank, Communicator& comm, std::vector<float>& v, const CallOptions& o) {
       allreduce_or_broadcast_on(1, rank, comm, v, o);
     },
     true},
    {"ThreeRanksAllreduceAgainstBroadcast", 3,
     [](int rank, Communicator& comm, std::vector<float>& v, const CallOptions& o) {
       allreduce_or_broadcast_on(2, rank, comm, v, o);
     },
     false},
};

class FaultMismatch
    : public ::testing::TestWithParam<std::tuple<std::string, const MismatchCase*>> {};

TEST_P(FaultMismatch, EveryRankFailsByTheDeadline) {
  const auto& [transport, c] = GetParam();
  const auto exits = testing::run_ranks(
      c->world,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto store = ctx.store();
        std::vector<float> v(1000, 1.0f);
        expect_failure_codes(
            ctx, *store, [&](const CallOptions& o) { c->rank_calls(ctx.rank, *comm, v, o); },
            c->mismatch);
      },
      run_options(transport));
  testing::expect_all_ok(exits);
}

std::string mismatch_name(
    const ::testing::TestParamInfo<std::tuple<std::string, const MismatchCase*>>& p) {
  return std::get<0>(p.param) + "_" + std::get<1>(p.param)->name;
}

INSTANTIATE_TEST_SUITE_P(RealTransports, FaultMismatch,
                         ::testing::Combine(::testing::Values("shm", "tcp"),
                                            ::testing::Values(&kMismatches[0], &kMismatches[1],
                                                              &kMismatches[2])),
                         mismatch_name);
#if TANDEM_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, FaultMismatch,
                         ::testing::Combine(::testing::Values("ucx", "ucx_tcp"),
                                            ::testing::Values(&kMismatches[0], &kMismatches[1],
                                                              &kMismatches[2])),
                         mismatch_name);
#endif

// In debug mode the ranks compare their calls first: the same three-rank mismatch fails at
// once with Mismatch on every rank, naming each rank's call.
TEST_P(Fault, DebugModeReportsEveryRanksCall) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        std::vector<float> v(1000, 1.0f);
        auto view = BufferView::of(std::span<float>(v));
        comm->allreduce(view, ReduceOp::max);  // matching calls pass the check
        EXPECT_EQ(v[0], 1.0f);
        const auto start = Clock::now();
        try {
          if (ctx.rank == 2)
            comm->broadcast(view, 0, {deadline_in(30s), {}});
          else
            comm->allreduce(view, ReduceOp::sum, {deadline_in(30s), {}});
          ADD_FAILURE() << "mismatched collective succeeded";
        } catch (const Error& e) {
          EXPECT_LT(seconds_since(start), 10.0) << e.what();
          EXPECT_TRUE(e.code() == ErrorCode::Mismatch || e.code() == ErrorCode::Aborted)
              << e.what();
          if (e.code() == ErrorCode::Mismatch) {
            EXPECT_TRUE(contains(e.message(),
                                 "ranks 0,1: allreduce #1 f32 x 1000 sum; rank 2: "
                                 "broadcast #1 f32 x 1000 root 0"))
                << e.what();
          }
        }
      },
      run_options(GetParam(), {"TANDEM_DEBUG=DETAIL", "TANDEM_DEBUG_SUBSYS=COLL"}));
  testing::expect_all_ok(exits);
}

TEST_P(Fault, CollectiveOneRankNeverCallsTimesOut) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto store = ctx.store();
        std::vector<float> v(64, 1.0f);
        if (ctx.rank == 0) {
          const auto start = Clock::now();
          try {
            comm->allreduce(BufferView::of(std::span<float>(v)), ReduceOp::sum,
                            {deadline_in(1s), {}});
            ADD_FAILURE() << "allreduce succeeded without rank 1";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
            EXPECT_TRUE(contains(e.message(), "allreduce #0")) << e.what();
            EXPECT_GE(seconds_since(start), 0.9);
            EXPECT_LT(seconds_since(start), 10.0);
          }
          store->set("done", "1");
        } else {
          store->get("done");
          // Rank 0 gave up and aborted: this rank learns of it on its next operation.
          try {
            comm->barrier({deadline_in(20s), {}});
            ADD_FAILURE() << "barrier succeeded although rank 0 aborted";
          } catch (const Error& e) {
            // Rank 0's abort, or its message that this rank never matched.
            EXPECT_TRUE(e.code() == ErrorCode::Aborted || e.code() == ErrorCode::PeerLost ||
                        e.code() == ErrorCode::Mismatch)
                << e.what();
            EXPECT_TRUE(contains(e.message(), "rank 0")) << e.what();
          }
        }
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

TEST_P(Fault, SetTimeoutGivesLaterCallsTheNewDeadline) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto store = ctx.store();
        EXPECT_THROW(comm->set_timeout(0ms), Error);
        comm->set_timeout(300ms);
        EXPECT_EQ(comm->timeout(), 300ms);
        if (ctx.rank == 0) {
          // Rank 1 never sends: the receive fails at the timeout just set, not the one the
          // communicator was made with (run_options' 180 s), and says which it was.
          std::vector<float> v(4);
          try {
            comm->recv_async(BufferView::of(std::span<float>(v)), 1, 3)->wait(Deadline::max());
            ADD_FAILURE() << "a receive completed although rank 1 sent nothing";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
            EXPECT_TRUE(contains(e.message(), "timeout 300 ms")) << e.what();
          }
          store->set("done", "1");
        } else {
          store->get("done");
        }
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

TEST_P(Fault, BlockingCallQueuedBehindStuckWorkTimesOutWithoutRunning) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto store = ctx.store();
        std::vector<float> v(256, 1.0f);
        auto view = BufferView::of(std::span<float>(v));
        if (ctx.rank == 0) {
          auto stuck = comm->allreduce_async(view, view, ReduceOp::sum);  // rank 1 is not there
          const auto start = Clock::now();
          std::vector<float> b(8, 2.0f);
          try {
            comm->allreduce(BufferView::of(std::span<float>(b)), ReduceOp::sum,
                            {deadline_in(300ms), {}});
            ADD_FAILURE() << "the queued blocking call ran";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
            EXPECT_TRUE(contains(e.message(), "allreduce #1")) << e.what();
            EXPECT_TRUE(contains(e.message(), "could not start before its deadline")) << e.what();
            EXPECT_GE(seconds_since(start), 0.25);
            EXPECT_LT(seconds_since(start), 10.0);
          }
          EXPECT_EQ(b[0], 2.0f);  // never touched
          EXPECT_TRUE(comm->poisoned());
          // The stuck one fails too (the communicator is poisoned and its mesh aborted).
          EXPECT_THROW(stuck->wait(deadline_in(10s)), Error);
          store->set("go", "1");
        } else {
          store->get("go");
          // Rank 0's allreduce had already sent its half before it gave up, so this one may
          // complete from what is in the channel; the barrier after it cannot.
          try {
            comm->allreduce(view, ReduceOp::sum, {deadline_in(20s), {}});
          } catch (const Error&) {
          }
          EXPECT_THROW(comm->barrier({deadline_in(20s), {}}), Error);
        }
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

TEST_P(Fault, AbortFailsPeersWithTheReason) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto store = ctx.store();
        std::vector<float> v(1u << 16, 1.0f);
        auto view = BufferView::of(std::span<float>(v));
        if (ctx.rank == 0) {
          store->wait(std::vector<std::string>{"entered/1", "entered/2"});
          comm->abort("the test gives up");
          EXPECT_TRUE(comm->poisoned());
          try {
            comm->allreduce(view, ReduceOp::sum);
            ADD_FAILURE() << "allreduce succeeded after abort()";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::Aborted) << e.what();
            EXPECT_TRUE(contains(e.message(), "the test gives up")) << e.what();
          }
          return;
        }
        store->set(fmt::format("entered/{}", ctx.rank), "1");
        try {
          comm->allreduce(view, ReduceOp::sum, {deadline_in(30s), {}});
          ADD_FAILURE() << "allreduce succeeded although rank 0 aborted";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Aborted) << e.what();
          EXPECT_TRUE(contains(e.message(), "rank 0")) << e.what();
          EXPECT_TRUE(contains(e.message(), "the test gives up")) << e.what();
        }
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

TEST_P(Fault, DestroyWithPendingAsyncWorkFailsItWithAborted) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        auto store = ctx.store();
        std::vector<float> a(100, 1.0f), b(100, 1.0f);
        if (ctx.rank == 0) {
          auto w1 = comm->allreduce_async(BufferView::of(std::span<float>(a)),
                                          BufferView::of(std::span<float>(a)), ReduceOp::sum);
          auto w2 = comm->allreduce_async(BufferView::of(std::span<float>(b)),
                                          BufferView::of(std::span<float>(b)), ReduceOp::sum);
          // Once this wait gives up, the worker has long started the first one.
          EXPECT_THROW(w1->wait(deadline_in(200ms)), Error);
          const auto start = Clock::now();
          comm.reset();  // rank 1 never joins: the running one is aborted, the queued one dropped
          EXPECT_LT(seconds_since(start), 10.0);
          for (auto* w : {w1.get(), w2.get()}) {
            ASSERT_TRUE(w->test());
            try {
              w->wait(deadline_in(1s));
              ADD_FAILURE() << "pending work succeeded";
            } catch (const Error& e) {
              EXPECT_EQ(e.code(), ErrorCode::Aborted) << e.what();
            }
          }
          store->set("done", "1");
        } else {
          store->get("done");
          EXPECT_THROW(comm->barrier({deadline_in(20s), {}}), Error);
        }
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

INSTANTIATE_TEST_SUITE_P(RealTransports, Fault, ::testing::Values("shm", "tcp"), transport_name);
#if TANDEM_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, Fault, ::testing::Values("ucx", "ucx_tcp"), transport_name);
#endif

// ---- invalid arguments: thrown on the calling thread; the peers never see a message -----

void expect_invalid(const std::function<void()>& f, std::string_view needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected InvalidArgument containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    EXPECT_TRUE(contains(e.message(), needle))
        << "'" << e.message() << "' lacks '" << needle << "'";
  }
}

TEST(InvalidArguments, RejectedBeforeTouchingPeers) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        std::vector<float> f(8, 1.0f), g(4, 1.0f), big(16, 1.0f);
        std::vector<double> d(8, 1.0);
        const auto f8 = BufferView::of(std::span<float>(f));
        const auto g4 = BufferView::of(std::span<float>(g));
        const auto d8 = BufferView::of(std::span<double>(d));
        const auto b16 = BufferView::of(std::span<float>(big));
        if (ctx.rank == 0) {
          // Only rank 0 makes bad calls; rank 1 meanwhile waits in the allreduce below.
          expect_invalid([&] { comm->allreduce(f8, g4, ReduceOp::sum); },
                         "allreduce: out.count is 4 but must be 8");
          expect_invalid([&] { comm->allreduce(f8, d8, ReduceOp::sum); },
                         "allreduce: in.dtype (f32) differs from out.dtype (f64)");
          BufferView gpu = f8;
          gpu.device = Device::cuda(0);
          expect_invalid([&] { comm->allreduce(gpu, f8, ReduceOp::sum); },
                         "allreduce: in is on cuda:0 but out on cpu");
          std::vector<std::int32_t> ints(8, 1);
          BufferView gpu_ints = BufferView::of(std::span<std::int32_t>(ints));
          gpu_ints.device = Device::cuda(0);
          expect_invalid([&] { comm->allreduce(gpu_ints, ReduceOp::bxor); },
                         "the device backends have no bitwise reductions");
          gpu.device.index = -1;
          expect_invalid([&] { comm->allreduce(gpu, ReduceOp::sum); },
                         "a CUDA buffer names its device");
          expect_invalid([&] { comm->allreduce(f8, ReduceOp::band); },
                         "allreduce: ReduceOp::band is a bitwise operation and f32 is a floating "
                         "type");
          expect_invalid([&] { comm->reduce_scatter(b16, f8, ReduceOp::bor); }, "bitwise");
          expect_invalid([&] { comm->reduce(d8, d8, ReduceOp::bxor, 0); }, "f64");
          expect_invalid([&] { comm->allreduce(f8, static_cast<ReduceOp>(9)); },
                         "ReduceOp has the invalid value 9");
          expect_invalid(
              [&] { comm->allreduce(BufferView::raw(nullptr, 3, DataType::f32), ReduceOp::sum); },
              "in.data is null but in.count is 3");
          expect_invalid(
              [&] {
                comm->allreduce(f8, BufferView::of(std::span<float>(f).subspan(1, 7)).slice(0, 8),
                                ReduceOp::sum);
              },
              "overlap");
          expect_invalid([&] { comm->broadcast(f8, 2); },
                         "broadcast: root 2 is out of range [0, 2)");
          expect_invalid([&] { comm->broadcast(f8, -1); }, "root -1");
          expect_invalid([&] { comm->reduce(f8, g4, ReduceOp::sum, 0); },
                         "reduce: out.count is 4 but must be 8");
          expect_invalid([&] { comm->send(f8, 0); }, "send: peer 0 is this rank");
          expect_invalid([&] { comm->recv(f8, 0); }, "recv: peer 0 is this rank");
          expect_invalid([&] { comm->send(f8, 5); }, "send: peer 5 is out of range");
          expect_invalid([&] { comm->allgather(f8, b16.slice(0, 15)); },
                         "allgather: out.count is 15 but must be 16");
          expect_invalid([&] { comm->allgather(f8, b16.slice(0, 15)); }, "too small");
          expect_invalid([&] { comm->reduce_scatter(f8, f8, ReduceOp::sum); },
                         "reduce_scatter: in.count is 8 but must be 16");
          expect_invalid([&] { comm->alltoall(f8.slice(0, 7), b16.slice(0, 7)); },
                         "not a multiple of size()");
          const std::size_t counts3[] = {1, 2, 3};
          expect_invalid([&] { comm->allgatherv(f8, b16, counts3); },
                         "allgatherv: counts has 3 entries");
          expect_invalid([&] { comm->gather(f8, g4, 0); }, "gather: out.count is 4 but must be 16");
          expect_invalid([&] { comm->scatter(g4, f8, 0); },
                         "scatter: in.count is 4 but must be 16");
          expect_invalid(
              [&] {
                comm->allreduce(f8, f8, ReduceOp::sum, {{}, "no_such_algorithm"});
              },
              "allreduce: no algorithm named 'no_such_algorithm'");
          expect_invalid([&] { (void)comm->allreduce_async(f8, g4, ReduceOp::sum); }, "allreduce");
          expect_invalid([&] { (void)comm->broadcast_async(f8, f8, 7); }, "root 7");
          expect_invalid([&] { (void)comm->transport_to(9); }, "transport_to: peer 9");
          EXPECT_FALSE(comm->poisoned());
        }
        // None of that reached the peer or advanced the sequence: this allreduce matches.
        std::vector<std::int32_t> v{ctx.rank + 1};
        comm->allreduce(BufferView::of(std::span<std::int32_t>(v)), ReduceOp::sum);
        EXPECT_EQ(v[0], 3);
      },
      run_options("shm"));
  testing::expect_all_ok(exits);
}

TEST(InvalidArguments, CreateRejectsBadRankSizeAndAlgorithm) {
  auto store = std::make_shared<store::HashStore>();
  expect_invalid([&] { Communicator::create(store, 2, 2); }, "rank 2 is out of range [0, 2)");
  expect_invalid([&] { Communicator::create(store, -1, 2); }, "rank -1");
  expect_invalid([&] { Communicator::create(store, 0, 0); }, "size 0 must be at least 1");
  expect_invalid([&] { Communicator::create(nullptr, 0, 2); }, "store is null");
  CommOptions o;
  o.algorithm = "ringg";
  expect_invalid([&] { Communicator::create(store, 0, 1, o); },
                 "no collective has an algorithm named 'ringg'");
  o.algorithm = "allreduce=ring,nonsense=tree";
  expect_invalid([&] { Communicator::create(store, 0, 1, o); }, "nonsense");
  o.algorithm = "allreduce=ring,broadcast=tree";
  auto comm = Communicator::create(store, 0, 1, o);
  EXPECT_EQ(comm->size(), 1);
  o.timeout = std::chrono::milliseconds(0);
  expect_invalid([&] { Communicator::create(store, 0, 1, o); }, "timeout must be positive");
}

TEST(InvalidArguments, SpinTimeIsAutoOrMicroseconds) {
  auto store = std::make_shared<store::HashStore>();
  for (const char* bad : {"fast", "-1", "50us"}) {
    testing::ScopedEnv spin("TANDEM_SPIN_US", bad);
    expect_invalid([&] { Communicator::create(store, 0, 1); }, "must be auto or microseconds >= 0");
  }
  testing::ScopedEnv spin("TANDEM_SPIN_US", "0");
  EXPECT_EQ(Communicator::create(store, 0, 1)->size(), 1);
}

TEST(InvalidArguments, UnknownTransportIsNamedWithTheChoices) {
  auto store = std::make_shared<store::HashStore>();
  testing::ScopedEnv transport("TANDEM_TRANSPORT", "rdma");
  expect_invalid([&] { Communicator::create(store, 0, 1); },
                 "TANDEM_TRANSPORT=\"rdma\": use ucx, tcp or auto");
}

}  // namespace
}  // namespace tandem::mptest
