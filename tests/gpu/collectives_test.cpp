// Collectives on CUDA memory through the NCCL backend, against an independent reference
// (tests/mp's inputs and expected values, plain loops in double): every collective, dtype,
// operation and awkward size on one rank; across ranks (one per GPU) where the machine has
// two GPUs or more; a rank killed mid-allreduce. Skipped, with the reason, without a GPU.

#include "gpu/cuda.hpp"
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

using mptest::Buffer;

// The CUDA devices, counted in a child: a parent that initialised CUDA could not fork ranks
// that use it.
int devices_seen_by_a_child(std::string* why) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return 0;
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::string reason;
    const int n = device_count(&reason);
    const std::string line = std::to_string(n) + " " + reason;
    (void)!::write(pipefd[1], line.data(), line.size());
    ::_exit(0);
  }
  ::close(pipefd[1]);
  std::string text;
  char buf[256];
  for (ssize_t got; (got = ::read(pipefd[0], buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<std::size_t>(got));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const auto space = text.find(' ');
  if (why != nullptr && space != std::string::npos) *why = text.substr(space + 1);
  return text.empty() ? 0 : std::stoi(text.substr(0, space));
}

#define REQUIRE_GPUS(n)                                                               \
  do {                                                                                \
    std::string why;                                                                  \
    const int have = devices_seen_by_a_child(&why);                                   \
    if (have < (n))                                                                   \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), this machine has " << have \
                   << (have == 0 ? " (" + why + ")"                                   \
                                 : std::string(" (NCCL 2.28 refuses two ranks on "    \
                                               "one GPU)"));                          \
  } while (0)

/// `count` elements of `dtype` on the current device.
struct DeviceBuffer {
  DeviceBuffer(DataType t, std::size_t n) : dtype(t), count(n), memory(n * dtype_size(t)) {}
  BufferView view(int device) const { return {memory.get(), count, dtype, Device::cuda(device)}; }
  void fill(int rank, std::uint32_t seed) const {
    fill_pattern(memory.get(), count, dtype, rank, seed, nullptr);
    check_cuda(cudaDeviceSynchronize(), "fill");
  }
  /// `host` (of this dtype and count) copied to the device.
  void upload(const Buffer& host) const {
    if (count > 0)
      check_cuda(cudaMemcpy(memory.get(), host.data(), host.bytes(), cudaMemcpyHostToDevice),
                 "copy");
  }
  Buffer download() const {
    Buffer b(dtype, count);
    if (count > 0)
      check_cuda(cudaMemcpy(b.data(), memory.get(), b.bytes(), cudaMemcpyDeviceToHost), "copy");
    return b;
  }
  DataType dtype;
  std::size_t count;
  DeviceMemory memory;
};

double pattern(std::size_t i, int rank) {
  return pattern_value(i, rank, 0);
}

void expect_near(DataType dtype, double got, double want, std::string_view what) {
  const double tolerance =
      dtype == DataType::f16 || dtype == DataType::bf16 ? 1e-2 * std::abs(want) : 1e-6;
  EXPECT_NEAR(got, want, tolerance) << what << " (" << to_string(dtype) << ")";
}

constexpr std::size_t kAwkward[] = {0, 1, 7, 1023, 65537};

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

// Inputs of a reduction with `op` on `rank`, as tests/mp makes them.
Buffer reduce_inputs(ReduceOp op, DataType t, int rank, std::size_t count) {
  Buffer b(t, count);
  for (std::size_t i = 0; i < count; ++i) b.set(i, mptest::reduce_input(op, t, rank, i, 1));
  return b;
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
