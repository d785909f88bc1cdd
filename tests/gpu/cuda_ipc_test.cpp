// The CUDA IPC backend: what needs no device runs on every machine (the choice between NCCL
// and CUDA IPC from every rank's record, the records' bounds); with a GPU, 2 and 4 ranks
// share GPU 0 and run every collective x dtype x operation x awkward size (one size past a
// staging chunk) against tests/mp's independent reference, and a rank killed mid-allreduce
// is PeerLost naming it. Skipped, with the reason, without a GPU.

#include "gpu/choice.hpp"
#include "gpu/cuda_ipc/wire.hpp"
#include "gpu/gpu_util.hpp"
#include "support/multiproc.hpp"

#include <tandem/communicator.hpp>
#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

namespace tandem::gpu {
namespace {

using gputest::DeviceBuffer;
using gputest::expect_near;
using gputest::pattern;
using gputest::reduce_inputs;
using mptest::Buffer;

GpuRecord record(std::string host, char gpu, std::string requested = "auto") {
  return {std::move(host), std::string(32, gpu), 0, std::move(requested)};
}

std::string choice_error(const std::vector<GpuRecord>& ranks, bool nccl) {
  try {
    (void)choose_transport(ranks, nccl);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    return e.message();
  }
  ADD_FAILURE() << "choose_transport accepted what it should refuse";
  return {};
}

TEST(GpuChoice, OneRankPerGpuTakesNcclAndSharedGpusTakeCudaIpc) {
  const std::vector<GpuRecord> own{record("h", 'a'), record("h", 'b')};
  EXPECT_EQ(choose_transport(own, true).transport, GpuTransport::nccl);
  EXPECT_EQ(choose_transport(own, false).transport, GpuTransport::cuda_ipc);
  EXPECT_NE(choose_transport(own, false).why.find("no NCCL"), std::string::npos);
  const std::vector<GpuRecord> shared{record("h", 'a'), record("h", 'b'), record("h", 'a')};
  const GpuChoice c = choose_transport(shared, true);
  EXPECT_EQ(c.transport, GpuTransport::cuda_ipc);
  EXPECT_NE(c.why.find("ranks 0 and 2 share GPU"), std::string::npos) << c.why;
  // Two hosts, one GPU each: NCCL; the same UUID on two hosts is two GPUs.
  const std::vector<GpuRecord> hosts{record("h1", 'a'), record("h2", 'a')};
  EXPECT_EQ(choose_transport(hosts, true).transport, GpuTransport::nccl);
}

TEST(GpuChoice, TheSettingForcesEitherAndImpossibleChoicesSayWhy) {
  EXPECT_EQ(choose_transport(
                std::vector{record("h", 'a', "cuda_ipc"), record("h", 'b', "cuda_ipc")}, true)
                .transport,
            GpuTransport::cuda_ipc);
  EXPECT_EQ(choose_transport(std::vector{record("h", 'a', "nccl"), record("h", 'b', "nccl")}, true)
                .transport,
            GpuTransport::nccl);
  EXPECT_NE(choice_error({record("h", 'a', "nccl"), record("h", 'a', "nccl")}, true)
                .find("refuses two ranks on one GPU"),
            std::string::npos);
  EXPECT_NE(
      choice_error({record("h", 'a', "nccl"), record("h", 'b', "nccl")}, false).find("has no NCCL"),
      std::string::npos);
  EXPECT_NE(choice_error({record("h1", 'a', "cuda_ipc"), record("h2", 'b', "cuda_ipc")}, true)
                .find("different hosts"),
            std::string::npos);
  // Sharing a GPU on one host while another rank is elsewhere: nothing serves.
  const std::string both =
      choice_error({record("h1", 'a'), record("h1", 'a'), record("h2", 'b')}, true);
  EXPECT_NE(both.find("ranks 0 and 1 share GPU"), std::string::npos) << both;
  EXPECT_NE(both.find("ranks 0 and 2 are on different hosts"), std::string::npos) << both;
  const std::string differ = choice_error({record("h", 'a'), record("h", 'b', "nccl")}, true);
  EXPECT_NE(differ.find("rank 1 for 'nccl'"), std::string::npos) << differ;
}

TEST(GpuChoice, RecordsRoundTripAndMalformedOnesNameTheRank) {
  const GpuRecord r{"host-1 boot ns", "0123456789abcdef0123456789abcdef", 3, "cuda_ipc"};
  const GpuRecord back = decode_gpu_record(encode(r), 1);
  EXPECT_EQ(back.host_id, r.host_id);
  EXPECT_EQ(back.uuid, r.uuid);
  EXPECT_EQ(back.device, 3);
  EXPECT_EQ(back.requested, "cuda_ipc");
  for (const std::string& bad :
       {std::string("h\nshort\n0\nauto"), std::string("h\n0123456789abcdef0123456789abcdef\n0"),
        std::string("h\n0123456789abcdef0123456789abcdef\nx\nauto"),
        std::string("h\n0123456789abcdef0123456789abcdef\n0\nrdma"),
        std::string(600, 'h') + "\n0123456789abcdef0123456789abcdef\n0\nauto"}) {
    try {
      (void)decode_gpu_record(bad, 5);
      ADD_FAILURE() << "accepted: " << bad.substr(0, 60);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Io);
      EXPECT_NE(e.message().find("rank 5"), std::string::npos) << e.message();
    }
  }
}

TEST(GpuCudaIpcWire, StagingRecordsRoundTripAndAreBounded) {
  cuda_ipc::StagingRecord r;
  for (std::size_t i = 0; i < sizeof r.handle.reserved; ++i)
    r.handle.reserved[i] = static_cast<char>(i * 7);
  r.bytes = 2 * cuda_ipc::kHalfBytes;
  r.pid = 4242;
  const std::string text = encode(r);
  const auto back = cuda_ipc::decode_staging_record(text, 1);
  EXPECT_EQ(0, std::memcmp(&back.handle, &r.handle, sizeof r.handle));
  EXPECT_EQ(back.pid, 4242);
  std::string wrong_size = text;
  wrong_size.pop_back();
  std::string wrong_magic = text;
  wrong_magic[0] = wrong_magic[0] == '0' ? '1' : '0';
  cuda_ipc::StagingRecord small = r;
  small.bytes = 4096;
  for (const std::string& bad :
       {wrong_size, wrong_magic, encode(small), std::string(text.size(), 'z')}) {
    try {
      (void)cuda_ipc::decode_staging_record(bad, 3);
      ADD_FAILURE() << "accepted a malformed record";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Io);
      EXPECT_NE(e.message().find("rank 3"), std::string::npos) << e.message();
    }
  }
}

// Runs `body` in `n` forked ranks that all use GPU 0 (CUDA IPC: NCCL refuses them).
void on_one_gpu(int n,
                const std::function<void(const testing::RankContext&, Communicator&)>& body) {
  testing::expect_all_ok(testing::run_ranks(
      n,
      [&](const testing::RankContext& ctx) {
        check_cuda(cudaSetDevice(0), "cudaSetDevice");
        auto comm = mptest::connect(ctx);
        body(ctx, *comm);
      },
      mptest::run_options("shm")));
}

void expect_exact(const Buffer& got, std::size_t first,
                  const std::function<double(std::size_t)>& want, std::size_t count,
                  std::string_view what) {
  for (std::size_t i = 0; i < count; ++i)
    if (got.get(first + i) != want(i)) {
      ADD_FAILURE() << what << ": element " << first + i << " is " << got.get(first + i)
                    << ", expected " << want(i);
      return;
    }
}

void every_collective(const testing::RankContext& ctx, Communicator& comm) {
  const int r = ctx.rank;
  const int w = ctx.size;
  const auto uw = static_cast<std::size_t>(w);
  const int root = w - 1;
  for (DataType t : kAllDataTypes) {
    for (std::size_t n : gputest::kAwkward) {
      SCOPED_TRACE(::testing::Message() << to_string(t) << " x " << n << ", " << w << " ranks");
      for (ReduceOp op : kAllReduceOps) {
        const Buffer input = reduce_inputs(op, t, r, n * uw);
        const auto want = [&](std::size_t i) { return mptest::reduce_expected(op, t, w, i, 1); };
        DeviceBuffer buf(t, n * uw);
        buf.upload(input);
        comm.allreduce(buf.view(0), op);
        Buffer got = buf.download();
        for (std::size_t i = 0; i < n * uw; ++i) expect_near(t, got.get(i), want(i), "allreduce");
        DeviceBuffer in(t, n * uw), out(t, n * uw), part(t, n);
        in.upload(input);
        comm.reduce(in.view(0), out.view(0), op, root);
        if (r == root) {
          got = out.download();
          for (std::size_t i = 0; i < n * uw; ++i) expect_near(t, got.get(i), want(i), "reduce");
        }
        comm.reduce_scatter(in.view(0), part.view(0), op);
        got = part.download();
        for (std::size_t i = 0; i < n; ++i)
          expect_near(t, got.get(i), want(static_cast<std::size_t>(r) * n + i), "reduce_scatter");
      }
      DeviceBuffer mine(t, n), all(t, n * uw);
      mine.fill(r, 0);
      comm.allgather(mine.view(0), all.view(0));
      Buffer got = all.download();
      for (int p = 0; p < w; ++p)
        expect_exact(
            got, static_cast<std::size_t>(p) * n, [&](std::size_t i) { return pattern(i, p); }, n,
            "allgather");
      DeviceBuffer b(t, n);
      b.fill(r, 0);
      comm.broadcast(b.view(0), root);
      expect_exact(
          b.download(), 0, [&](std::size_t i) { return pattern(i, root); }, n, "broadcast");
      DeviceBuffer gathered(t, n * uw);
      comm.gather(mine.view(0), gathered.view(0), root);
      if (r == root) {
        got = gathered.download();
        for (int p = 0; p < w; ++p)
          expect_exact(
              got, static_cast<std::size_t>(p) * n, [&](std::size_t i) { return pattern(i, p); }, n,
              "gather");
      }
      DeviceBuffer source(t, n * uw), piece(t, n);
      source.fill(r, 0);
      comm.scatter(source.view(0), piece.view(0), root);
      expect_exact(
          piece.download(), 0,
          [&](std::size_t i) { return pattern(static_cast<std::size_t>(r) * n + i, root); }, n,
          "scatter");
      DeviceBuffer sent(t, n * uw), received(t, n * uw);
      sent.fill(r, 0);
      comm.alltoall(sent.view(0), received.view(0));
      got = received.download();
      for (int p = 0; p < w; ++p)
        expect_exact(
            got, static_cast<std::size_t>(p) * n,
            [&](std::size_t i) { return pattern(static_cast<std::size_t>(r) * n + i, p); }, n,
            "alltoall");
      // allgatherv: rank p contributes n + p elements.
      std::vector<std::size_t> counts(uw);
      for (std::size_t p = 0; p < uw; ++p) counts[p] = n + p;
      DeviceBuffer v(t, counts[static_cast<std::size_t>(r)]);
      v.fill(r, 0);
      DeviceBuffer vall(t, std::accumulate(counts.begin(), counts.end(), std::size_t{0}));
      comm.allgatherv(v.view(0), vall.view(0), counts);
      got = vall.download();
      std::size_t first = 0;
      for (int p = 0; p < w; ++p) {
        expect_exact(
            got, first, [&](std::size_t i) { return pattern(i, p); },
            counts[static_cast<std::size_t>(p)], "allgatherv");
        first += counts[static_cast<std::size_t>(p)];
      }
      comm.barrier();
    }
  }
  // Past one staging chunk (16 MiB): f32 x (4 Mi + 5) in chunks.
  const std::size_t big = (std::size_t{4} << 20) + 5;
  DeviceBuffer buf(DataType::f32, big);
  buf.upload(reduce_inputs(ReduceOp::sum, DataType::f32, r, big));
  comm.allreduce(buf.view(0), ReduceOp::sum);
  const Buffer got = buf.download();
  for (std::size_t i = 0; i < big; i += 4093)
    expect_near(DataType::f32, got.get(i),
                mptest::reduce_expected(ReduceOp::sum, DataType::f32, w, i, 1),
                "allreduce past a chunk");
  expect_near(DataType::f32, got.get(big - 1),
              mptest::reduce_expected(ReduceOp::sum, DataType::f32, w, big - 1, 1), "last element");
}

// allreduce out of place (and in place) on every dtype and op, on buffers the peers map
// (cudaMalloc, at an offset inside a larger allocation, allocations freed and replaced, more
// allocations than a peer keeps mapped) and on buffers they cannot (managed memory on one
// rank: every rank stages the call), past a staging chunk too.
void allreduce_wherever_the_buffers_are(const testing::RankContext& ctx, Communicator& comm) {
  const int r = ctx.rank;
  const int w = ctx.size;
  const auto check = [&](const Buffer& got, ReduceOp op, DataType t, std::size_t n,
                         std::string_view what) {
    for (std::size_t i = 0; i < n; ++i)
      expect_near(t, got.get(i), mptest::reduce_expected(op, t, w, i, 1), what);
  };
  for (DataType t : kAllDataTypes)
    for (ReduceOp op : kAllReduceOps)
      for (std::size_t n : {std::size_t{1}, std::size_t{1023}, std::size_t{65537}}) {
        SCOPED_TRACE(::testing::Message() << to_string(t) << " x " << n << ", " << w << " ranks");
        DeviceBuffer in(t, n), out(t, n);
        in.upload(reduce_inputs(op, t, r, n));
        comm.allreduce(in.view(0), out.view(0), op);
        check(out.download(), op, t, n, "allreduce out of place");
        EXPECT_EQ(in.download().get(n - 1), reduce_inputs(op, t, r, n).get(n - 1)) << "input kept";
      }
  const DataType t = DataType::f32;
  const std::size_t n = 4099;
  const std::size_t es = dtype_size(t);
  // Views at odd offsets inside one allocation (as a framework's caching allocator gives).
  DeviceBuffer arena(t, 4 * n + 64);
  auto* base = static_cast<std::byte*>(arena.data());
  const BufferView in{base + 3 * es, n, t, Device::cuda(0)};
  const BufferView out{base + (2 * n + 5) * es, n, t, Device::cuda(0)};
  const Buffer input = reduce_inputs(ReduceOp::sum, t, r, n);
  check_cuda(cudaMemcpy(in.data, input.data(), n * es, cudaMemcpyHostToDevice), "copy");
  comm.allreduce(in, out, ReduceOp::sum);
  Buffer got(t, n);
  check_cuda(cudaMemcpy(got.data(), out.data, n * es, cudaMemcpyDeviceToHost), "copy");
  check(got, ReduceOp::sum, t, n, "allreduce at an offset");
  // Allocations freed and made again (often at the same address), and more of them alive at
  // once than a peer keeps mapped.
  for (int round = 0; round < 3; ++round) {
    DeviceBuffer b(t, n);
    b.upload(input);
    comm.allreduce(b.view(0), ReduceOp::sum);
    check(b.download(), ReduceOp::sum, t, n, "allreduce on a new allocation");
  }
  std::vector<DeviceBuffer> many;
  for (int i = 0; i < 20; ++i) many.emplace_back(t, n);
  const Buffer max_input = reduce_inputs(ReduceOp::max, t, r, n);
  for (int pass = 0; pass < 2; ++pass)
    for (DeviceBuffer& b : many) {
      b.upload(max_input);
      comm.allreduce(b.view(0), ReduceOp::max);
      check(b.download(), ReduceOp::max, t, n, "allreduce on many allocations");
    }
  // Managed memory on rank 0 (no IPC handle): every rank stages, past one chunk too.
  for (const std::size_t count : {n, (std::size_t{4} << 20) + 5}) {
    void* managed = nullptr;
    DeviceBuffer plain(t, count);
    if (r == 0) check_cuda(cudaMallocManaged(&managed, count * es), "cudaMallocManaged");
    const BufferView v = r == 0 ? BufferView{managed, count, t, Device::cuda(0)} : plain.view(0);
    const Buffer big = reduce_inputs(ReduceOp::sum, t, r, count);
    check_cuda(cudaMemcpy(v.data, big.data(), count * es, cudaMemcpyHostToDevice), "copy");
    comm.allreduce(v, ReduceOp::sum);
    Buffer back(t, count);
    check_cuda(cudaMemcpy(back.data(), v.data, count * es, cudaMemcpyDeviceToHost), "copy");
    for (std::size_t i = 0; i < count; i += 997)
      expect_near(t, back.get(i), mptest::reduce_expected(ReduceOp::sum, t, w, i, 1),
                  "allreduce staged from managed memory");
    if (managed != nullptr) check_cuda(cudaFree(managed), "cudaFree");
  }
}

TEST(GpuCudaIpc, AllreduceMapsThePeersBuffersOrStagesWhereItCannot) {
  REQUIRE_GPUS(1);
  on_one_gpu(2, allreduce_wherever_the_buffers_are);
  on_one_gpu(3, allreduce_wherever_the_buffers_are);
}

TEST(GpuCudaIpc, TwoRanksOnOneGpuMatchTheReferenceForEveryCollective) {
  REQUIRE_GPUS(1);
  on_one_gpu(2, every_collective);
}

TEST(GpuCudaIpc, FourRanksOnOneGpuMatchTheReferenceForEveryCollective) {
  REQUIRE_GPUS(1);
  on_one_gpu(4, every_collective);
}

// Rank 1's buffers come from CUDA's stream-ordered pool, which legacy CUDA IPC cannot map:
// every rank stages every collective (the path of allocators without IPC handles).
TEST(GpuCudaIpc, FourRanksStageEveryCollectiveWhenABufferCannotBeMapped) {
  REQUIRE_GPUS(1);
  on_one_gpu(4, [](const testing::RankContext& ctx, Communicator& comm) {
    gputest::pool_memory = ctx.rank == 1;
    every_collective(ctx, comm);
  });
}

TEST(GpuCudaIpc, ARankKilledMidAllreduceIsPeerLostNamingIt) {
  REQUIRE_GPUS(1);
  const auto exits = testing::run_ranks(
      2,
      [](const testing::RankContext& ctx) {
        check_cuda(cudaSetDevice(0), "cudaSetDevice");
        auto comm = mptest::connect(ctx);
        DeviceBuffer buf(DataType::f32, 1 << 24);
        buf.fill(ctx.rank, 0);
        comm->allreduce(buf.view(0), ReduceOp::sum);  // the CUDA IPC group is up on both
        auto store = ctx.store();
        mptest::allreduce_while_rank_dies(*comm, *store, buf.view(0), 1, "gpu");
      },
      mptest::run_options("shm"));
  EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
  EXPECT_FALSE(exits[1].exited) << testing::describe(exits[1]);  // killed
}

}  // namespace
}  // namespace tandem::gpu
