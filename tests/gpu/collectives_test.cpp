// Collectives on CUDA memory through the NCCL backend, against an independent reference
// (tests/mp's inputs and expected values, plain loops in double): every collective, dtype,
// operation and awkward size on one rank; across ranks (one per GPU) where the machine has
// two GPUs or more; a rank killed mid-allreduce. Skipped, with the reason, without a GPU.

#include "gpu/cuda.hpp"
#include "gpu/gpu_util.hpp"
#include "gpu/kernels.hpp"
#include "mp/mp_util.hpp"
#include "support/multiproc.hpp"

#include <tandem/communicator.hpp>
#include <tandem/store.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace tandem::gpu {
namespace {

using gputest::DeviceBuffer;
using gputest::devices_seen_by_a_child;
using gputest::expect_near;
using gputest::kAwkward;
using gputest::pattern;
using gputest::reduce_inputs;
using mptest::Buffer;

TEST(GpuOneRank, EveryCollectiveDtypeOperationAndAwkwardSize) {
  std::string why;
  if (device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  auto comm = Communicator::create(std::make_shared<store::HashStore>(), 0, 1);
  for (DataType t : kAllDataTypes) {
    for (std::size_t n : kAwkward) {
      SCOPED_TRACE(::testing::Message() << to_string(t) << " x " << n);
      DeviceBuffer in(t, n), out(t, n);
      in.fill(0, 0);
      for (ReduceOp op : kAllReduceOps) {
        comm->allreduce(in.view(0), out.view(0), op);
        const Buffer got = out.download();
        for (std::size_t i = 0; i < n; ++i) expect_near(t, got.get(i), pattern(i, 0), "allreduce");
        comm->reduce(in.view(0), out.view(0), op, 0);
        if (n > 0) expect_near(t, out.download().get(n - 1), pattern(n - 1, 0), "reduce");
      }
      for (auto kind :
           {CollectiveKind::broadcast, CollectiveKind::allgather, CollectiveKind::reduce_scatter,
            CollectiveKind::alltoall, CollectiveKind::gather, CollectiveKind::scatter}) {
        DeviceBuffer o(t, n);
        switch (kind) {
          case CollectiveKind::broadcast:
            comm->broadcast(in.view(0), o.view(0), 0);
            break;
          case CollectiveKind::allgather:
            comm->allgather(in.view(0), o.view(0));
            break;
          case CollectiveKind::reduce_scatter:
            comm->reduce_scatter(in.view(0), o.view(0), ReduceOp::sum);
            break;
          case CollectiveKind::alltoall:
            comm->alltoall(in.view(0), o.view(0));
            break;
          case CollectiveKind::gather:
            comm->gather(in.view(0), o.view(0), 0);
            break;
          default:
            comm->scatter(in.view(0), o.view(0), 0);
            break;
        }
        const Buffer got = o.download();
        for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(got.get(i), pattern(i, 0)) << to_string(kind);
      }
      comm->barrier();
    }
  }
}

// Runs `body` in one forked rank per GPU (at most 4), each on its own device with its own
// communicator, and expects every rank to succeed.
void on_every_gpu(const std::function<void(const testing::RankContext&, Communicator&)>& body) {
  std::string why;
  const int n = std::min(devices_seen_by_a_child(&why), 4);
  testing::expect_all_ok(testing::run_ranks(
      n,
      [&](const testing::RankContext& ctx) {
        check_cuda(cudaSetDevice(ctx.rank), "cudaSetDevice");
        auto comm = mptest::connect(ctx);
        body(ctx, *comm);
      },
      mptest::run_options("shm")));
}

TEST(GpuRanks, AllreduceAndReduceMatchTheReference) {
  REQUIRE_GPUS(2);
  on_every_gpu([](const testing::RankContext& ctx, Communicator& comm) {
    for (DataType t : kAllDataTypes)
      for (std::size_t count : {std::size_t{1}, std::size_t{1023}, std::size_t{65537}})
        for (ReduceOp op : kAllReduceOps) {
          const Buffer input = reduce_inputs(op, t, ctx.rank, count);
          DeviceBuffer buf(t, count);
          buf.upload(input);
          comm.allreduce(buf.view(ctx.rank), op);
          const Buffer got = buf.download();
          for (std::size_t i = 0; i < count; i += 97)
            expect_near(t, got.get(i), mptest::reduce_expected(op, t, ctx.size, i, 1), "allreduce");
          DeviceBuffer in(t, count), out(t, count);
          in.upload(input);
          comm.reduce(in.view(ctx.rank), out.view(ctx.rank), op, ctx.size - 1);
          if (ctx.rank == ctx.size - 1)
            expect_near(t, out.download().get(count - 1),
                        mptest::reduce_expected(op, t, ctx.size, count - 1, 1), "reduce");
        }
  });
}

TEST(GpuRanks, DataMovementAndSendRecvMatchTheReference) {
  REQUIRE_GPUS(2);
  on_every_gpu([](const testing::RankContext& ctx, Communicator& comm) {
    const int r = ctx.rank;
    const auto w = static_cast<std::size_t>(ctx.size);
    for (DataType t : {DataType::f32, DataType::bf16, DataType::i64, DataType::u8}) {
      const std::size_t block = 1031;
      DeviceBuffer mine(t, block), all(t, block * w);
      mine.fill(r, 0);
      comm.allgather(mine.view(r), all.view(r));
      Buffer got = all.download();
      for (std::size_t p = 0; p < w; ++p)
        EXPECT_EQ(got.get(p * block + 5), pattern(5, static_cast<int>(p))) << "allgather";
      DeviceBuffer b(t, block);
      b.fill(r, 0);
      comm.broadcast(b.view(r), 1);
      EXPECT_EQ(b.download().get(block - 1), pattern(block - 1, 1)) << "broadcast";
      DeviceBuffer big(t, block * w), part(t, block);
      big.upload(reduce_inputs(ReduceOp::max, t, r, block * w));
      comm.reduce_scatter(big.view(r), part.view(r), ReduceOp::max);
      EXPECT_EQ(part.download().get(3),
                mptest::reduce_expected(ReduceOp::max, t, ctx.size,
                                        static_cast<std::size_t>(r) * block + 3, 1))
          << "reduce_scatter";
      DeviceBuffer sent(t, block * w), received(t, block * w);
      sent.fill(r, 0);
      comm.alltoall(sent.view(r), received.view(r));
      got = received.download();
      for (std::size_t p = 0; p < w; ++p)
        EXPECT_EQ(got.get(p * block),
                  pattern(static_cast<std::size_t>(r) * block, static_cast<int>(p)))
            << "alltoall";
      DeviceBuffer msg(t, block);
      if (r == 0) {
        msg.fill(0, 0);
        comm.send(msg.view(r), 1, 7);
      } else if (r == 1) {
        comm.recv(msg.view(r), 0, 7);
        EXPECT_EQ(msg.download().get(block - 2), pattern(block - 2, 0)) << "recv";
      }
      comm.barrier();
    }
  });
}

TEST(GpuFailure, ARankKilledMidAllreduceIsPeerLostNamingIt) {
  REQUIRE_GPUS(2);
  const auto exits = testing::run_ranks(
      2,
      [](const testing::RankContext& ctx) {
        check_cuda(cudaSetDevice(ctx.rank), "cudaSetDevice");
        auto comm = mptest::connect(ctx);
        DeviceBuffer buf(DataType::f32, 1 << 24);
        buf.fill(ctx.rank, 0);
        comm->allreduce(buf.view(ctx.rank), ReduceOp::sum);  // the NCCL communicator is up on both
        auto store = ctx.store();
        mptest::allreduce_while_rank_dies(*comm, *store, buf.view(ctx.rank), 1, "gpu");
      },
      mptest::run_options("shm"));
  EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
  EXPECT_FALSE(exits[1].exited) << testing::describe(exits[1]);  // killed
}

}  // namespace
}  // namespace tandem::gpu
