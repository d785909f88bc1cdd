// send/recv, barrier, failures that must surface as errors (never hangs), and the fake
// mesh's own contract.

#include "algorithms/algorithm.hpp"
#include "fake_mesh.hpp"
#include "values.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::testing {
namespace {

using algorithms::Call;
using algorithms::Registry;
using transport::Request;

const algorithms::Algorithm& algo(CollectiveKind k, std::string_view name) {
  const auto* a = Registry::builtin().find(k, name);
  if (a == nullptr) throw std::runtime_error("missing algorithm");
  return *a;
}

Call p2p(CollectiveKind kind, BufferView buf, int peer, std::uint32_t user_tag,
         std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  Call c;
  c.kind = kind;
  c.in = c.out = buf;
  c.root = peer;
  c.tag = algorithms::fingerprint(kind, buf.dtype, buf.count, peer, user_tag);
  c.deadline = deadline_in(timeout);
  return c;
}

TEST(SendRecv, PairsExchangeData) {
  for (int n : {2, 3, 5}) {
    FakeWorld world(n, FakeOptions{.seed = static_cast<std::uint64_t>(n)});
    std::mutex mu;
    std::vector<std::string> failures;
    const auto errors = world.run([&](int r, transport::Mesh& mesh) {
      const int peer = r % 2 == 0 ? r + 1 : r - 1;
      if (peer >= n) return;  // the odd one out
      algorithms::Scratch scratch;
      algorithms::Context ctx{mesh, scratch};
      std::uint32_t user_tag = 0;
      for (DataType dt : kAllDataTypes) {
        for (std::size_t count :
             {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{65537}}) {
          ++user_tag;
          Buffer mine(count * dtype_size(dt));
          Buffer theirs(count * dtype_size(dt));
          for (std::size_t i = 0; i < count; ++i) put(dt, mine.data(), i, move_input(dt, r, i));
          const Call send =
              p2p(CollectiveKind::send, BufferView::raw(mine.data(), count, dt), peer, user_tag);
          const Call recv =
              p2p(CollectiveKind::recv, BufferView::raw(theirs.data(), count, dt), peer, user_tag);
          // Even ranks send first, odd ranks receive first: no deadlock on small buffers.
          if (r % 2 == 0) {
            algo(CollectiveKind::send, "direct").run(send, ctx);
            algo(CollectiveKind::recv, "direct").run(recv, ctx);
          } else {
            algo(CollectiveKind::recv, "direct").run(recv, ctx);
            algo(CollectiveKind::send, "direct").run(send, ctx);
          }
          std::string err = compare(dt, theirs.data(), count,
                                    [&](std::size_t i) { return move_input(dt, peer, i); });
          if (!theirs.guards_intact()) err += " overrun";
          if (!err.empty()) {
            std::lock_guard lk(mu);
            failures.push_back(fmt::format("rank {} {} x {}: {}", r, to_string(dt), count, err));
          }
        }
      }
    });
    for (const auto& e : errors) EXPECT_EQ(e, nullptr) << describe(e);
    for (const auto& f : failures) ADD_FAILURE() << f;
    EXPECT_TRUE(world.idle());
  }
}

TEST(SendRecv, WrongTagIsMismatch) {
  FakeWorld world(2);
  const auto errors = world.run([&](int r, transport::Mesh& mesh) {
    algorithms::Scratch scratch;
    algorithms::Context ctx{mesh, scratch};
    std::uint32_t v = 7;
    const BufferView buf = BufferView::raw(&v, 1, DataType::i32);
    if (r == 0) {
      algo(CollectiveKind::send, "direct").run(p2p(CollectiveKind::send, buf, 1, 5), ctx);
    } else {
      algo(CollectiveKind::recv, "direct").run(p2p(CollectiveKind::recv, buf, 0, 6), ctx);
    }
  });
  ASSERT_NE(errors[1], nullptr);
  try {
    std::rethrow_exception(errors[1]);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
  }
}

TEST(Barrier, NobodyLeavesEarly) {
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8}) {
    FakeWorld world(n, FakeOptions{.seed = static_cast<std::uint64_t>(n) + 100});
    std::atomic<int> arrived{0};
    std::atomic<int> early{0};
    constexpr int kRounds = 30;
    const auto errors = world.run([&](int r, transport::Mesh& mesh) {
      algorithms::Scratch scratch;
      algorithms::Context ctx{mesh, scratch};
      for (int round = 0; round < kRounds; ++round) {
        arrived.fetch_add(1);
        Call c;
        c.kind = CollectiveKind::barrier;
        c.seq = static_cast<std::uint64_t>(round);
        c.tag = algorithms::fingerprint(c.kind, DataType::u8, 0, 0, c.seq);
        c.deadline = deadline_in(std::chrono::seconds(20));
        algo(CollectiveKind::barrier, "dissemination").run(c, ctx);
        if (arrived.load() < n * (round + 1)) early.fetch_add(1);
        (void)r;
      }
    });
    for (const auto& e : errors) EXPECT_EQ(e, nullptr) << describe(e);
    EXPECT_EQ(early.load(), 0) << n << " ranks";
    EXPECT_EQ(arrived.load(), n * kRounds);
    EXPECT_TRUE(world.idle());
  }
}

// Ranks that disagree on the count must fail (Mismatch where the sizes meet, Aborted
// elsewhere), not hang, whatever the algorithm.
TEST(Failures, CountMismatchFailsEveryRank) {
  for (const auto* alg : Registry::builtin().of(CollectiveKind::allreduce)) {
    const int n = 4;
    FakeWorld world(n);
    const auto errors = world.run([&](int r, transport::Mesh& mesh) {
      algorithms::Scratch scratch;
      algorithms::Context ctx{mesh, scratch, 256};
      const std::size_t count = r == 2 ? 1001 : 1000;
      std::vector<float> buf(count, 1.0f);
      Call c;
      c.kind = CollectiveKind::allreduce;
      c.in = c.out = BufferView::raw(buf.data(), count, DataType::f32);
      c.tag = algorithms::fingerprint(c.kind, DataType::f32, 1000, 0, 0);
      c.deadline = deadline_in(std::chrono::seconds(20));
      alg->run(c, ctx);
    });
    int mismatches = 0;
    for (const auto& e : errors) {
      ASSERT_NE(e, nullptr) << alg->name() << ": a rank finished a mismatched allreduce";
      try {
        std::rethrow_exception(e);
      } catch (const Error& x) {
        EXPECT_TRUE(x.code() == ErrorCode::Mismatch || x.code() == ErrorCode::Aborted) << x.what();
        mismatches += x.code() == ErrorCode::Mismatch;
      }
    }
    EXPECT_GE(mismatches, 1) << alg->name();
  }
}

TEST(Failures, MissingRankTimesOut) {
  const int n = 3;
  FakeWorld world(n);
  const auto start = Clock::now();
  const auto errors = world.run([&](int r, transport::Mesh& mesh) {
    if (r == 1) return;  // never joins
    algorithms::Scratch scratch;
    algorithms::Context ctx{mesh, scratch};
    float v = 1;
    Call c;
    c.kind = CollectiveKind::allreduce;
    c.in = c.out = BufferView::raw(&v, 1, DataType::f32);
    c.deadline = deadline_in(std::chrono::milliseconds(300));
    algo(CollectiveKind::allreduce, "ring").run(c, ctx);
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));  // never-hang bound
  int timeouts = 0;
  for (int r : {0, 2}) {
    ASSERT_NE(errors[static_cast<std::size_t>(r)], nullptr);
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const Error& e) {
      timeouts += e.code() == ErrorCode::Timeout;
      EXPECT_TRUE(e.code() == ErrorCode::Timeout || e.code() == ErrorCode::Aborted) << e.what();
    }
  }
  EXPECT_GE(timeouts, 1);
}

// The fake itself: FIFO per direction, lazy piecewise delivery, recv_reduce, size checks.
TEST(FakeMesh, FifoAndReduce) {
  FakeWorld world(2, FakeOptions{.min_capacity = 8, .max_capacity = 64, .max_piece = 5});
  std::vector<std::int32_t> got(200, 0);
  std::vector<std::int32_t> acc(100, 1);
  const auto errors = world.run([&](int r, transport::Mesh& mesh) {
    const auto deadline = deadline_in(std::chrono::seconds(20));
    if (r == 0) {
      std::vector<std::int32_t> data(200);
      for (int i = 0; i < 200; ++i) data[static_cast<std::size_t>(i)] = i;
      std::vector<Request> reqs;
      reqs.reserve(3);
      reqs.push_back(Request::make_send(1, 1, data.data(), 100 * sizeof(std::int32_t)));
      reqs.push_back(Request::make_send(1, 2, data.data() + 100, 100 * sizeof(std::int32_t)));
      reqs.push_back(Request::make_send(1, 3, data.data(), 100 * sizeof(std::int32_t)));
      for (auto& q : reqs) mesh.post(q);
      std::vector<Request*> ps{&reqs[0], &reqs[1], &reqs[2]};
      mesh.wait(ps, deadline);
    } else {
      Request a = Request::make_recv(0, 1, got.data(), 100 * sizeof(std::int32_t));
      Request b = Request::make_recv(0, 2, got.data() + 100, 100 * sizeof(std::int32_t));
      Request c = Request::make_recv_reduce(0, 3, acc.data(), acc.data(), 100, DataType::i32,
                                            ReduceOp::sum);
      mesh.post(a);
      mesh.post(b);
      mesh.post(c);
      std::vector<Request*> ps{&c, &b, &a};
      mesh.wait(ps, deadline);
    }
  });
  for (const auto& e : errors) EXPECT_EQ(e, nullptr) << describe(e);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], i);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(acc[static_cast<std::size_t>(i)], i + 1);
  EXPECT_TRUE(world.idle());
  EXPECT_EQ(world.pending(0), 0u);
  EXPECT_EQ(world.pending(1), 0u);
}

TEST(FakeMesh, SizeMismatchAndSelf) {
  FakeWorld world(2);
  const auto errors = world.run([&](int r, transport::Mesh& mesh) {
    std::uint64_t v = 0;
    const auto deadline = deadline_in(std::chrono::seconds(20));
    Request q = r == 0 ? Request::make_send(1, 9, &v, 8) : Request::make_recv(0, 9, &v, 4);
    mesh.post(q);
    mesh.wait(q, deadline);
  });
  ASSERT_NE(errors[1], nullptr);
  try {
    std::rethrow_exception(errors[1]);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Mismatch);
  }
  world.reset();
  std::uint8_t b = 0;
  Request self = Request::make_send(0, 0, &b, 1);
  EXPECT_THROW(world.mesh(0).post(self), Error);
}

}  // namespace
}  // namespace tandem::testing
