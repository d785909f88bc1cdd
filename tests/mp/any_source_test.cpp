// Receives from any rank (kAnySource): each message matched once, each peer's messages in the
// order it sent them; later receives and collectives wait for the match; a peer that dies
// fails the wait; a message with another tag is never taken.

#include "mp_util.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <map>
#include <string>
#include <vector>

namespace tandem::mptest {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

// Message k of rank `from`: every element says who sent it and which one it was.
std::vector<float> message(int from, int k, std::size_t n) {
  return std::vector<float>(n, static_cast<float>(from * 100 + k));
}

class AnySource : public ::testing::TestWithParam<std::string> {};

TEST_P(AnySource, EachMessageMatchedOnceAndEachPeerInItsOrder) {
  constexpr int kPerPeer = 3;
  const auto exits = testing::run_ranks(
      4,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        // Small (in a slot header), one chunk, and many chunks (12 MiB: more than an shm
        // ring or a socket buffer holds).
        for (const std::size_t n : {std::size_t{3}, std::size_t{1000}, std::size_t{3} << 20}) {
          if (ctx.rank != 0) {
            for (int k = 0; k < kPerPeer; ++k) {
              auto m = message(ctx.rank, k, n);
              comm->send(BufferView::of(std::span<float>(m)), 0, 11);
            }
            continue;
          }
          std::map<int, int> next;  // per sender: the message it must deliver next
          for (int i = 0; i < kPerPeer * (ctx.size - 1); ++i) {
            std::vector<float> in(n, -1.0f);
            const int from = comm->recv(BufferView::of(std::span<float>(in)), kAnySource, 11);
            ASSERT_GE(from, 1) << "receive " << i;
            ASSERT_LT(from, ctx.size) << "receive " << i;
            const auto want = message(from, next[from]++, n);
            ASSERT_EQ(in, want) << "receive " << i << " from rank " << from << ", n=" << n;
          }
          for (int r = 1; r < ctx.size; ++r) EXPECT_EQ(next[r], kPerPeer) << "rank " << r;
        }
        comm->barrier();
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

TEST_P(AnySource, LaterReceiveWaitsUntilItMatched) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        if (ctx.rank == 2) {
          // Rank 1 sends nothing: the receive from any rank can only take this rank's first
          // message, and the receive named after it must get the second.
          for (int k = 0; k < 2; ++k) {
            auto m = message(2, k, 64);
            comm->send(BufferView::of(std::span<float>(m)), 0, 4);
          }
        } else if (ctx.rank == 0) {
          std::vector<float> first(64), second(64);
          auto any = comm->recv_async(BufferView::of(std::span<float>(first)), kAnySource, 4);
          auto named = comm->recv_async(BufferView::of(std::span<float>(second)), 2, 4);
          any->wait();
          named->wait();
          EXPECT_EQ(any->source(), 2);
          EXPECT_EQ(named->source(), 2);
          EXPECT_EQ(first, message(2, 0, 64));
          EXPECT_EQ(second, message(2, 1, 64));
        }
        comm->barrier();
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

TEST_P(AnySource, CollectiveAfterItWaitsForTheSendBeforeIt) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        std::vector<float> v(1000, static_cast<float>(ctx.rank + 1));
        const auto view = BufferView::of(std::span<float>(v));
        std::vector<float> m(1000, 7.0f);
        if (ctx.rank == 1) {
          comm->send(BufferView::of(std::span<float>(m)), 0, 9);
          comm->allreduce(view, ReduceOp::sum);
        } else {
          // Without the wait, the allreduce's receive from rank 1 would take the message
          // meant for this receive and fail with Mismatch.
          std::vector<float> in(1000, 0.0f);
          auto any = comm->recv_async(BufferView::of(std::span<float>(in)), kAnySource, 9);
          comm->allreduce(view, ReduceOp::sum);
          any->wait();
          EXPECT_EQ(any->source(), 1);
          EXPECT_EQ(in, m);
        }
        EXPECT_EQ(v, std::vector<float>(1000, 3.0f));
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

TEST_P(AnySource, MessageWithAnotherTagIsNotTakenAndTheDeadlineSaysSo) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        std::vector<float> m(8, 1.0f);
        if (ctx.rank == 1) {
          comm->send(BufferView::of(std::span<float>(m)), 0, 5);
          return;
        }
        std::vector<float> in(8, 0.0f);
        try {
          comm->recv(BufferView::of(std::span<float>(in)), kAnySource, 6,
                     CallOptions{deadline_in(300ms), {}});
          ADD_FAILURE() << "a receive with tag 6 took a message sent with tag 5";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
          EXPECT_TRUE(contains(e.message(), "recv from any rank")) << e.what();
          EXPECT_TRUE(contains(e.message(), "no rank sent a message it matches")) << e.what();
        }
        EXPECT_EQ(in, std::vector<float>(8, 0.0f));
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

TEST_P(AnySource, PeerThatDiesFailsTheWaitNamingIt) {
  const auto exits = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        comm->barrier();
        // Rank 2 dies only once every rank is past the barrier: leaving it first, it could
        // otherwise fail another rank's barrier instead of the receive under test.
        auto store = ctx.store();
        store->set(fmt::format("past/{}", ctx.rank), "1");
        store->wait(std::vector<std::string>{"past/0", "past/1", "past/2"});
        if (ctx.rank == 2) std::raise(SIGKILL);
        if (ctx.rank == 1) return;  // leaves normally, sending nothing
        std::vector<float> in(8);
        try {
          comm->recv(BufferView::of(std::span<float>(in)), kAnySource, 1);
          ADD_FAILURE() << "a receive from any rank completed although nobody sent";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
          EXPECT_TRUE(contains(e.message(), "rank 2")) << e.what();
          EXPECT_TRUE(contains(e.message(), "recv from any rank")) << e.what();
        }
      },
      run_options(GetParam()));
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
  EXPECT_TRUE(exits[1].ok()) << testing::describe(exits[1]);
  EXPECT_EQ(exits[2].signal, SIGKILL) << testing::describe(exits[2]);
}

TEST_P(AnySource, RefusedWhereItCannotRun) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = connect(ctx);
        std::vector<float> in(4);
        auto view = BufferView::of(std::span<float>(in));
        view.device = Device::cuda(0);
        try {
          comm->recv_async(view, kAnySource, 0);
          ADD_FAILURE() << "a receive from any rank into device memory was accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
          EXPECT_TRUE(contains(e.message(), "host buffer")) << e.what();
        }
        EXPECT_FALSE(comm->poisoned());
      },
      run_options(GetParam()));
  testing::expect_all_ok(exits);
}

INSTANTIATE_TEST_SUITE_P(RealTransports, AnySource, ::testing::Values("shm", "tcp"),
                         transport_name);
#if TANDEM_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, AnySource, ::testing::Values("ucx", "ucx_tcp"), transport_name);
#endif

}  // namespace
}  // namespace tandem::mptest
