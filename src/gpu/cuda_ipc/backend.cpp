#include "gpu/cuda_ipc/backend.hpp"

#include "gpu/kernels.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace tandem::gpu::cuda_ipc {
namespace {

struct Slice {
  std::size_t first = 0;
  std::size_t count = 0;
};

// Rank `rank`'s part of `n` elements: equal parts, each a multiple of 16 bytes so that the
// reduction kernels take their vector path.
Slice slice_of(std::size_t n, int size, int rank, std::size_t es) {
  const std::size_t unit = std::max<std::size_t>(1, 16 / es);
  std::size_t per = (n + static_cast<std::size_t>(size) - 1) / static_cast<std::size_t>(size);
  per = (per + unit - 1) / unit * unit;
  const std::size_t first = std::min(n, per * static_cast<std::size_t>(rank));
  return {first, std::min(n, first + per) - first};
}

std::byte* at(void* p, std::size_t bytes) {
  return static_cast<std::byte*>(p) + bytes;
}

std::string describe_call(const algorithms::Call& c, Device device) {
  const BufferView& b = c.in.count > 0 ? c.in : c.out;
  return fmt::format("CUDA IPC {} #{} ({} x {} on {})", to_string(c.kind), c.seq,
                     to_string(b.dtype), b.count, device.str());
}

}  // namespace

Backend::Backend(const comm::DeviceSetup& setup) : setup_(setup) {
  const auto start = Clock::now();
  use_device(setup_.device);
  ready_ = std::make_unique<Event>();
  WaitHooks hooks;
  hooks.aborted = &aborted_;
  hooks.check_peers = setup_.check_peers;
  hooks.timeout = setup_.timeout;
  ctx_ = std::make_unique<Context>(setup_, hooks);
  TANDEM_INFO(init,
              "{}: rank {} of {} runs collectives on CUDA memory through CUDA IPC on {} ({}): "
              "{}; staging 2 x {} MiB; ready in {:.1f} ms",
              setup_.label, setup_.rank, setup_.size, setup_.device.str(),
              describe_device(setup_.device.index), ctx_->describe(), kHalfBytes >> 20,
              std::chrono::duration<double, std::milli>(Clock::now() - start).count());
}

Backend::~Backend() = default;

void Backend::run(const algorithms::Call& c) {
  const std::string what = describe_call(c, setup_.device);
  TANDEM_CHECK_ARG(c.kind != CollectiveKind::send && c.kind != CollectiveKind::recv,
                   "{}: sends and receives of CUDA memory need NCCL (CUDA IPC runs collectives "
                   "only); pass host memory, or give every rank a GPU of its own",
                   what);
  if (broken_)
    TANDEM_THROW(ErrorCode::Aborted,
                 "{} was not run: this communicator's CUDA IPC group failed earlier", what);
  try {
    check_cuda(cudaSetDevice(setup_.device.index), "cudaSetDevice");
    // What the caller's kernels on the legacy default stream wrote comes first.
    check_cuda(cudaEventRecord(ready_->get(), cudaStreamLegacy), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(ctx_->stream(), ready_->get(), 0), "cudaStreamWaitEvent");
    switch (c.kind) {
      case CollectiveKind::allreduce:
        allreduce(c, what);
        break;
      case CollectiveKind::reduce:
        reduce(c, what);
        break;
      case CollectiveKind::reduce_scatter:
        reduce_scatter(c, what);
        break;
      case CollectiveKind::broadcast:
        broadcast(c, what);
        break;
      case CollectiveKind::allgather:
      case CollectiveKind::allgatherv:
      case CollectiveKind::gather:
        allgather(c, what);
        break;
      case CollectiveKind::scatter:
        scatter(c, what);
        break;
      case CollectiveKind::alltoall:
        alltoall(c, what);
        break;
      case CollectiveKind::barrier:
        ctx_->end_phase(c.deadline, what);
        break;
      case CollectiveKind::send:
      case CollectiveKind::recv:
        break;
    }
    ctx_->drain(c.deadline, what);
  } catch (...) {
    broken_ = true;  // the peers may be mid-phase: this group cannot be resynchronised
    throw;
  }
}

void Backend::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx_->stream()),
             "cudaMemcpyAsync");
}

void Backend::copy_rows(void* dst, const void* src, std::size_t width, std::size_t src_pitch,
                        std::size_t rows) {
  if (width == 0 || rows == 0) return;
  check_cuda(
      cudaMemcpy2DAsync(dst, width, src, src_pitch, width, rows, cudaMemcpyDefault, ctx_->stream()),
      "cudaMemcpy2DAsync");
}

void Backend::combine(void* dst, const void* a, const void* b, std::size_t count,
                      const algorithms::Call& c) {
  reduce_on_device(dst, a, b, count, c.out.dtype, c.op, ctx_->stream());
}

void Backend::reduce_staged(void* dst, std::size_t first, std::size_t count,
                            const algorithms::Call& c) {
  const std::size_t es = dtype_size(c.out.dtype);
  const int n = ctx_->size();
  if (count == 0) return;
  if (n == 1) {
    copy(dst, ctx_->self().in() + first * es, count * es);
  } else {
    combine(dst, ctx_->peer(0).in() + first * es, ctx_->peer(1).in() + first * es, count, c);
    for (int p = 2; p < n; ++p) combine(dst, dst, ctx_->peer(p).in() + first * es, count, c);
  }
  if (c.op == ReduceOp::avg && n > 1) divide_on_device(dst, count, c.out.dtype, n, ctx_->stream());
}

void Backend::allreduce(const algorithms::Call& c, const std::string& what) {
  const std::size_t es = dtype_size(c.out.dtype);
  const std::size_t n = c.out.count;
  const std::size_t chunk = kHalfBytes / es;
  const int size = ctx_->size();
  for (std::size_t off = 0; off < n; off += chunk) {
    const std::size_t m = std::min(chunk, n - off);
    copy(ctx_->self().in(), at(c.in.data, off * es), m * es);
    ctx_->end_phase(c.deadline, what);
    const Slice mine = slice_of(m, size, ctx_->rank(), es);
    reduce_staged(ctx_->self().out() + mine.first * es, mine.first, mine.count, c);
    ctx_->end_phase(c.deadline, what);
    for (int p = 0; p < size; ++p) {
      const Slice s = slice_of(m, size, p, es);
      copy(at(c.out.data, (off + s.first) * es), ctx_->peer(p).out() + s.first * es, s.count * es);
    }
  }
  // The peers read this rank's output half until here: nobody frees or rewrites it earlier.
  if (n > 0) ctx_->end_phase(c.deadline, what);
}

void Backend::reduce(const algorithms::Call& c, const std::string& what) {
  const std::size_t es = dtype_size(c.in.dtype);
  const std::size_t n = c.in.count;
  const std::size_t chunk = kHalfBytes / es;
  for (std::size_t off = 0; off < n; off += chunk) {
    const std::size_t m = std::min(chunk, n - off);
    copy(ctx_->self().in(), at(c.in.data, off * es), m * es);
    ctx_->end_phase(c.deadline, what);
    if (ctx_->rank() == c.root) reduce_staged(at(c.out.data, off * es), 0, m, c);
    ctx_->end_phase(c.deadline, what);
  }
}

void Backend::reduce_scatter(const algorithms::Call& c, const std::string& what) {
  const std::size_t es = dtype_size(c.out.dtype);
  const std::size_t n = c.out.count;
  const auto size = static_cast<std::size_t>(ctx_->size());
  const std::size_t chunk = kHalfBytes / (size * es);
  for (std::size_t off = 0; off < n; off += chunk) {
    const std::size_t m = std::min(chunk, n - off);
    // Row p of the staged input: rank p's block of this chunk.
    copy_rows(ctx_->self().in(), at(c.in.data, off * es), m * es, n * es, size);
    ctx_->end_phase(c.deadline, what);
    reduce_staged(at(c.out.data, off * es), static_cast<std::size_t>(ctx_->rank()) * m, m, c);
    ctx_->end_phase(c.deadline, what);
  }
}

void Backend::broadcast(const algorithms::Call& c, const std::string& what) {
  const std::size_t es = dtype_size(c.out.dtype);
  const std::size_t n = c.out.count;
  const std::size_t chunk = kHalfBytes / es;
  const bool root = ctx_->rank() == c.root;
  for (std::size_t off = 0; off < n; off += chunk) {
    const std::size_t m = std::min(chunk, n - off);
    if (root) copy(ctx_->self().in(), at(c.in.data, off * es), m * es);
    ctx_->end_phase(c.deadline, what);
    copy(at(c.out.data, off * es),
         root ? at(c.in.data, off * es) : static_cast<const std::byte*>(ctx_->peer(c.root).in()),
         m * es);
    ctx_->end_phase(c.deadline, what);
  }
}

void Backend::allgather(const algorithms::Call& c, const std::string& what) {
  const std::size_t es = dtype_size(c.in.dtype);
  const int size = ctx_->size();
  // allgather and gather: every rank's count is in.count; allgatherv: the call's counts.
  // A gather is an allgather whose output only the root writes.
  const bool writes = c.kind != CollectiveKind::gather || ctx_->rank() == c.root;
  std::vector<std::size_t> counts =
      c.kind == CollectiveKind::allgatherv
          ? std::vector<std::size_t>(c.counts.begin(), c.counts.end())
          : std::vector<std::size_t>(static_cast<std::size_t>(size), c.in.count);
  std::vector<std::size_t> first(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), first.begin(), std::size_t{0});
  const std::size_t longest = *std::max_element(counts.begin(), counts.end());
  const std::size_t chunk = kHalfBytes / es;
  const auto part = [&](int p, std::size_t off) {
    const std::size_t have = counts[static_cast<std::size_t>(p)];
    return off < have ? std::min(chunk, have - off) : std::size_t{0};
  };
  for (std::size_t off = 0; off < longest; off += chunk) {
    copy(ctx_->self().in(), at(c.in.data, off * es), part(ctx_->rank(), off) * es);
    ctx_->end_phase(c.deadline, what);
    for (int p = 0; writes && p < size; ++p)
      copy(at(c.out.data, (first[static_cast<std::size_t>(p)] + off) * es), ctx_->peer(p).in(),
           part(p, off) * es);
    ctx_->end_phase(c.deadline, what);
  }
}

void Backend::scatter(const algorithms::Call& c, const std::string& what) {
  const std::size_t es = dtype_size(c.out.dtype);
  const std::size_t n = c.out.count;
  const auto size = static_cast<std::size_t>(ctx_->size());
  const std::size_t chunk = kHalfBytes / (size * es);
  for (std::size_t off = 0; off < n; off += chunk) {
    const std::size_t m = std::min(chunk, n - off);
    if (ctx_->rank() == c.root)
      copy_rows(ctx_->self().in(), at(c.in.data, off * es), m * es, n * es, size);
    ctx_->end_phase(c.deadline, what);
    copy(at(c.out.data, off * es),
         ctx_->peer(c.root).in() + static_cast<std::size_t>(ctx_->rank()) * m * es, m * es);
    ctx_->end_phase(c.deadline, what);
  }
}

void Backend::alltoall(const algorithms::Call& c, const std::string& what) {
  const std::size_t es = dtype_size(c.in.dtype);
  const auto size = static_cast<std::size_t>(ctx_->size());
  const std::size_t n = c.in.count / size;
  const std::size_t chunk = kHalfBytes / (size * es);
  const auto me = static_cast<std::size_t>(ctx_->rank());
  for (std::size_t off = 0; off < n; off += chunk) {
    const std::size_t m = std::min(chunk, n - off);
    copy_rows(ctx_->self().in(), at(c.in.data, off * es), m * es, n * es, size);
    ctx_->end_phase(c.deadline, what);
    for (std::size_t p = 0; p < size; ++p)
      copy(at(c.out.data, (p * n + off) * es), ctx_->peer(static_cast<int>(p)).in() + me * m * es,
           m * es);
    ctx_->end_phase(c.deadline, what);
  }
}

}  // namespace tandem::gpu::cuda_ipc

namespace tandem::gpu {

std::unique_ptr<comm::DeviceBackend> make_cuda_ipc_backend(const comm::DeviceSetup& setup) {
  return std::make_unique<cuda_ipc::Backend>(setup);
}

}  // namespace tandem::gpu
