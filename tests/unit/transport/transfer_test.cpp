// Data movement over every link: sizes around every boundary (inline payload, small area,
// slot, stripe), reductions, long runs of small messages, simultaneous large exchanges and a ring.

#include "mesh_test_util.hpp"
#include "transport/shm/wire.hpp"

#include <tandem/half.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>

namespace tandem::transport::test {
namespace {

using testing::RankContext;

class Transfer : public ::testing::TestWithParam<LinkParam> {};

std::vector<std::size_t> boundary_sizes(bool with_64mib) {
  const std::size_t slot = shm::geometry_for(shm_channel_bytes(1)).slot_bytes;
  std::vector<std::size_t> sizes = {
      0, 1, 7, 40, 41, 64, 4095, slot - 1, slot, slot + 1, (3u << 20) + 5};
  for (const std::size_t n : {shm::kSmallBytes - 1, shm::kSmallBytes, shm::kSmallBytes + 1})
    sizes.push_back(n);
  if (with_64mib) sizes.push_back(64u << 20);
  return sizes;
}

// Every rank sends every size to every other rank at once and checks what it receives.
void all_to_all_sizes(const RankContext& ctx, const LinkParam& link, bool with_64mib) {
  auto m = connect(ctx, options_for(link));
  Mesh& mesh = *m.mesh;
  const auto sizes = boundary_sizes(with_64mib);
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const std::size_t n = sizes[k];
    std::vector<std::vector<std::uint8_t>> out(ctx.size), in(ctx.size);
    std::vector<Request> reqs;
    reqs.reserve(2 * ctx.size);
    for (int p = 0; p < ctx.size; ++p) {
      if (p == ctx.rank) continue;
      out[p] = make_payload(ctx.rank, p, k, n);
      in[p].assign(n, 0xEE);
      reqs.push_back(Request::make_send(p, static_cast<std::uint32_t>(k), out[p].data(), n));
      reqs.push_back(Request::make_recv(p, static_cast<std::uint32_t>(k), in[p].data(), n));
    }
    std::vector<Request*> ptrs;
    for (auto& r : reqs) {
      mesh.post(r);
      ptrs.push_back(&r);
    }
    mesh.wait(ptrs, deadline_in(std::chrono::seconds(60)));
    for (int p = 0; p < ctx.size; ++p) {
      if (p == ctx.rank) continue;
      EXPECT_EQ(first_bad(in[p], p, ctx.rank, k), -1) << n << " bytes from rank " << p;
    }
    for (const auto& r : reqs) EXPECT_EQ(r.done, n);
  }
}

TEST_P(Transfer, SendRecvEverySizeTwoRanks) {
  const auto id = unique_run_id("sizes2");
  testing::expect_all_ok(testing::run_ranks(
      2, [&](const RankContext& ctx) { all_to_all_sizes(ctx, GetParam(), true); },
      run_options(id)));
  EXPECT_TRUE(shm_leftovers(id).empty());
}

TEST_P(Transfer, SendRecvEverySizeThreeRanks) {
  const auto id = unique_run_id("sizes3");
  testing::expect_all_ok(testing::run_ranks(
      3, [&](const RankContext& ctx) { all_to_all_sizes(ctx, GetParam(), false); },
      run_options(id)));
  EXPECT_TRUE(shm_leftovers(id).empty());
}

template <class T>
T value_of(int rank, std::size_t i) {
  return static_cast<T>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13) % 101) - 50);
}

// Rank r reduces what rank r-1 sends into its own vector, for one dtype and op; `in_place`
// makes dst the local input itself.
template <class T>
void ring_reduce(Mesh& mesh, const RankContext& ctx, std::size_t count, ReduceOp op, bool in_place,
                 std::uint32_t tag) {
  const int next = (ctx.rank + 1) % ctx.size;
  const int prev = (ctx.rank + ctx.size - 1) % ctx.size;
  std::vector<T> mine(count), theirs(count), out(count, T{});
  for (std::size_t i = 0; i < count; ++i) {
    mine[i] = value_of<T>(ctx.rank, i);
    theirs[i] = value_of<T>(prev, i);
  }
  const std::vector<T> send_copy = mine;
  T* dst = in_place ? mine.data() : out.data();
  Request s = Request::make_send(next, tag, send_copy.data(), count * sizeof(T));
  Request r = Request::make_recv_reduce(prev, tag, dst, mine.data(), count, dtype_of<T>(), op);
  mesh.post(s);
  mesh.post(r);
  Request* both[] = {&s, &r};
  mesh.wait(both, deadline_in(std::chrono::seconds(60)));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const T a = value_of<T>(ctx.rank, i), b = theirs[i];
    T want{};
    switch (op) {
      case ReduceOp::sum:
        want = static_cast<T>(a + b);
        break;
      case ReduceOp::max:
        want = std::max(a, b);
        break;
      case ReduceOp::min:
        want = std::min(a, b);
        break;
      default:
        want = static_cast<T>(a * b);
        break;
    }
    if (dst[i] != want && bad++ < 3)
      ADD_FAILURE() << "element " << i << " of " << count << ": " << +dst[i] << " != " << +want;
  }
  EXPECT_EQ(bad, 0u) << count << " elements";
}

TEST_P(Transfer, RecvReduceEverySize) {
  const auto id = unique_run_id("reduce");
  testing::expect_all_ok(testing::run_ranks(
      3,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        std::uint32_t tag = 1;
        for (std::size_t bytes : boundary_sizes(false)) {
          ring_reduce<float>(*m.mesh, ctx, bytes / 4, ReduceOp::sum, false, tag++);
          ring_reduce<std::int32_t>(*m.mesh, ctx, bytes / 4, ReduceOp::max, true, tag++);
          ring_reduce<double>(*m.mesh, ctx, bytes / 8, ReduceOp::min, false, tag++);
          ring_reduce<std::int8_t>(*m.mesh, ctx, bytes, ReduceOp::sum, true, tag++);
        }
      },
      run_options(id)));
}

TEST_P(Transfer, RecvReduceLarge) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        ring_reduce<float>(*m.mesh, ctx, (64u << 20) / 4, ReduceOp::sum, true, 9);
        ring_reduce<std::int64_t>(*m.mesh, ctx, ((3u << 20) + 40) / 8, ReduceOp::prod, false, 10);
      },
      run_options(unique_run_id("reduce64"))));
}

// 10k small messages posted at once in both directions: exact order and content.
TEST_P(Transfer, ManySmallMessagesInOrder) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        constexpr int kCount = 10000;
        const int peer = 1 - ctx.rank;
        std::vector<std::vector<std::uint8_t>> out(kCount), in(kCount);
        std::vector<Request> reqs;
        reqs.reserve(2 * kCount);
        std::vector<Request*> ptrs;
        for (int i = 0; i < kCount; ++i) {
          const std::size_t n = static_cast<std::size_t>(i % 97);
          out[i] = make_payload(ctx.rank, peer, i, n);
          in[i].assign(n, 0);
          reqs.push_back(Request::make_send(peer, static_cast<std::uint32_t>(i), out[i].data(), n));
          reqs.push_back(Request::make_recv(peer, static_cast<std::uint32_t>(i), in[i].data(), n));
        }
        for (auto& r : reqs) {
          m.mesh->post(r);
          ptrs.push_back(&r);
        }
        m.mesh->wait(ptrs, deadline_in(std::chrono::seconds(60)));
        int bad = 0;
        for (int i = 0; i < kCount; ++i)
          if (first_bad(in[i], peer, ctx.rank, i) != -1) ++bad;
        EXPECT_EQ(bad, 0);
      },
      run_options(unique_run_id("small"))));
}

// Both ranks post a 64 MiB send and receive and only then wait: every buffer on the way fills
// up, and the transfer must still complete.
TEST_P(Transfer, SimultaneousLargeExchange) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        const int peer = 1 - ctx.rank;
        constexpr std::size_t n = 64u << 20;
        for (int round = 0; round < 2; ++round) {
          const auto out = make_payload(ctx.rank, peer, round, n);
          std::vector<std::uint8_t> in(n);
          Request s = Request::make_send(peer, 5, out.data(), n);
          Request r = Request::make_recv(peer, 5, in.data(), n);
          m.mesh->post(s);
          m.mesh->post(r);
          Request* both[] = {&r, &s};
          m.mesh->wait(both, deadline_in(std::chrono::seconds(60)));
          EXPECT_EQ(first_bad(in, peer, ctx.rank, round), -1);
        }
      },
      run_options(unique_run_id("bidir"))));
}

// Four ranks pass blocks around a ring (an allgather): each step waits on one send and one
// receive, with neighbours at different steps.
TEST_P(Transfer, RingOfFour) {
  testing::expect_all_ok(testing::run_ranks(
      4,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        const int n = ctx.size;
        const int next = (ctx.rank + 1) % n, prev = (ctx.rank + n - 1) % n;
        for (std::size_t block : {std::size_t{1}, std::size_t{1000}, std::size_t{300000}}) {
          std::vector<std::vector<std::uint8_t>> blocks(n);
          blocks[ctx.rank] = make_payload(ctx.rank, -1, block, block);
          for (int step = 0; step < n - 1; ++step) {
            const int send_idx = (ctx.rank - step + n) % n;
            const int recv_idx = (ctx.rank - step - 1 + n) % n;
            blocks[recv_idx].assign(block, 0);
            Request s = Request::make_send(next, step, blocks[send_idx].data(), block);
            Request r = Request::make_recv(prev, step, blocks[recv_idx].data(), block);
            m.mesh->post(r);
            m.mesh->post(s);
            Request* both[] = {&s, &r};
            m.mesh->wait(both, deadline_in(std::chrono::seconds(60)));
          }
          for (int b = 0; b < n; ++b)
            EXPECT_EQ(first_bad(blocks[b], b, -1, block), -1) << "block " << b;
        }
      },
      run_options(unique_run_id("ring"))));
}

// Requests can be completed one by one with test() and mixed with wait().
TEST_P(Transfer, TestPollsToCompletion) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        const int peer = 1 - ctx.rank;
        const auto out = make_payload(ctx.rank, peer, 0, 1 << 20);
        std::vector<std::uint8_t> in(1 << 20);
        Request s = Request::make_send(peer, 3, out.data(), out.size());
        Request r = Request::make_recv(peer, 3, in.data(), in.size());
        m.mesh->post(s);
        m.mesh->post(r);
        Request* both[] = {&s, &r};
        const auto until = Clock::now() + std::chrono::seconds(60);
        while (!m.mesh->test(both) && Clock::now() < until) {
        }
        EXPECT_TRUE(s.complete && r.complete);
        EXPECT_EQ(first_bad(in, peer, ctx.rank, 0), -1);
        EXPECT_EQ(m.mesh->link(peer), GetParam().shm_disable ? Link::tcp : Link::shm);
        EXPECT_EQ(m.mesh->link(ctx.rank), Link::self);
        EXPECT_EQ(m.mesh->peer_info(peer).rank, peer);
      },
      run_options(unique_run_id("test"))));
}

// Mesh::transfer(): every boundary size as one exchange step (the send first), and behind a
// large transfer posted earlier in both directions, which the small ones must not overtake.
// A request it refuses leaves nothing posted: the mesh goes on working.
TEST_P(Transfer, TransferEverySizeInOrderBehindPostedRequests) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const RankContext& ctx) {
        auto m = connect(ctx, options_for(GetParam()));
        Mesh& mesh = *m.mesh;
        const int peer = 1 - ctx.rank;
        const auto until = deadline_in(std::chrono::seconds(60));
        Request bad = Request::make_send(ctx.rank, 1, nullptr, 0);
        Request fine = Request::make_send(peer, 1, nullptr, 0);
        Request* refused[] = {&fine, &bad};
        EXPECT_EQ(expect_error([&] { mesh.transfer(refused, until); }).code(),
                  ErrorCode::InvalidArgument);
        const auto sizes = boundary_sizes(false);
        for (const bool behind : {false, true}) {
          const std::uint64_t base = behind ? 1000 : 0;
          const auto big_out = make_payload(ctx.rank, peer, base + 999, 1 << 20);
          std::vector<std::uint8_t> big_in(big_out.size(), 0);
          Request bs = Request::make_send(peer, 999, big_out.data(), big_out.size());
          Request br = Request::make_recv(peer, 999, big_in.data(), big_in.size());
          if (behind) {
            mesh.post(br);
            mesh.post(bs);
          }
          for (std::size_t k = 0; k < sizes.size(); ++k) {
            const std::size_t n = sizes[k];
            const auto out = make_payload(ctx.rank, peer, base + k, n);
            std::vector<std::uint8_t> in(n, 0xEE);
            Request s = Request::make_send(peer, static_cast<std::uint32_t>(k), out.data(), n);
            Request r = Request::make_recv(peer, static_cast<std::uint32_t>(k), in.data(), n);
            Request* step[] = {&s, &r};
            mesh.transfer(step, until);
            ASSERT_TRUE(s.complete && r.complete) << n;
            EXPECT_EQ(first_bad(in, peer, ctx.rank, base + k), -1) << n << " bytes";
          }
          if (behind) {
            // The first small receive completed only after the large one before it.
            EXPECT_TRUE(br.complete);
            mesh.wait(bs, until);
            EXPECT_EQ(first_bad(big_in, peer, ctx.rank, base + 999), -1);
          }
        }
      },
      run_options(unique_run_id("xfer"))));
}

INSTANTIATE_TEST_SUITE_P(Links, Transfer, ::testing::Values(kShm, kTcp, kTcpStriped), link_name);

TEST(MeshSingle, OneRankNeedsNoStore) {
  store::HashStore store;
  auto mesh = connect_mesh(store, 0, 1, MeshOptions{});
  EXPECT_EQ(mesh->size(), 1);
  EXPECT_EQ(mesh->link(0), Link::self);
  Request r = Request::make_send(0, 0, nullptr, 0);
  EXPECT_EQ(expect_error([&] { mesh->post(r); }).code(), ErrorCode::InvalidArgument);
}

}  // namespace
}  // namespace tandem::transport::test
