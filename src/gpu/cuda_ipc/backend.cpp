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

// Which of a rank's buffers a collective reads (in) and writes (out).
struct Uses {
  bool in = true;
  bool out = true;
};

Uses uses_of(const algorithms::Call& c, int rank) {
  const bool root = rank == c.root;
  switch (c.kind) {
    case CollectiveKind::broadcast:
    case CollectiveKind::scatter:
      return {root, true};
    case CollectiveKind::reduce:
    case CollectiveKind::gather:
      return {true, root};
    default:
      return {};
  }
}

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

// The staged collectives' loop: `n` elements in chunks of `chunk`; stage(off, m) fills this
// rank's staging with chunk [off, off + m), a phase ends (every rank's staging is ready),
// use(off, m) reads the peers' staging, and a phase ends (no staging is rewritten before every
// peer has read it).
template <class Stage, class Use>
void in_chunks(Context& ctx, const algorithms::Call& c, const std::string& what, std::size_t n,
               std::size_t chunk, Stage&& stage, Use&& use) {
  for (std::size_t off = 0; off < n; off += chunk) {
    const std::size_t m = std::min(chunk, n - off);
    stage(off, m);
    ctx.end_phase(c.deadline, what);
    use(off, m);
    ctx.end_phase(c.deadline, what);
  }
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
    // What the caller's kernels on its stream wrote comes first. The host waits for the
    // last phase, so the caller's later work on that stream comes after.
    check_cuda(cudaEventRecord(ready_->get(), caller_stream(c.stream)), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(ctx_->stream(), ready_->get(), 0), "cudaStreamWaitEvent");
    if (mappable(c) && run_mapped(c, what)) return;  // its last phase drained the stream
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

bool Backend::mappable(const algorithms::Call& c) const {
  const int size = ctx_->size();
  if (size < 2 || size > kMaxFused) return false;
  switch (c.kind) {
    case CollectiveKind::allreduce:
      return c.out.count > 0;  // on GPUs joined by peer access too (reduce_slices)
    case CollectiveKind::barrier:
    case CollectiveKind::send:
    case CollectiveKind::recv:
      return false;
    default:
      return ctx_->one_device();
  }
}

bool Backend::run_mapped(const algorithms::Call& c, const std::string& what) {
  const int size = ctx_->size();
  const int me = ctx_->rank();
  const Uses mine = uses_of(c, me);
  ctx_->publish_buffers(mine.in ? c.in.data : nullptr, mine.out ? c.out.data : nullptr);
  // Every rank's input is ready (the caller's work before the call has run) and its records
  // are out.
  ctx_->end_phase_after(ready_->get(), c.deadline, what);
  for (int p = 0; p < size; ++p) {
    const Uses u = uses_of(c, p);
    const ControlBlock& b = ctx_->peer(p).block();
    if ((u.in && b.in.usable == 0) || (u.out && b.out.usable == 0)) return false;
  }
  const bool lead = ctx_->one_device();
  if (!lead || me == 0) {
    Views v;
    for (int p = 0; p < size; ++p) {
      const Uses u = uses_of(c, p);
      const ControlBlock& b = ctx_->peer(p).block();
      if (u.in)
        v.in[p] = p == me ? static_cast<const std::byte*>(c.in.data) : ctx_->peer_buffer(p, b.in);
      if (u.out)
        v.out[p] = p == me ? static_cast<std::byte*>(c.out.data) : ctx_->peer_buffer(p, b.out);
    }
    if (lead)
      this->lead(c, v);
    else
      reduce_slices(c, v);
  }
  // Every output is complete, and nobody reads this rank's buffers any more (on one GPU only
  // rank 0 put work on its device).
  if (lead && me != 0)
    ctx_->end_phase_after(nullptr, c.deadline, what);
  else
    ctx_->end_phase(c.deadline, what);
  return true;
}

void Backend::lead(const algorithms::Call& c, const Views& v) {
  const auto size = static_cast<std::size_t>(ctx_->size());
  const int n = ctx_->size();
  const DataType dtype = c.kind == CollectiveKind::reduce ? c.in.dtype : c.out.dtype;
  const std::size_t es = dtype_size(dtype);
  const int divisor = c.op == ReduceOp::avg ? n : 1;
  cudaStream_t stream = ctx_->stream();
  Fused f;
  switch (c.kind) {
    case CollectiveKind::allreduce:
    case CollectiveKind::reduce: {
      int outputs = 0;
      for (std::size_t p = 0; p < size; ++p) {
        f.in[p] = v.in[p];
        if (v.out[p] != nullptr) f.out[outputs++] = v.out[p];
      }
      reduce_all_on_device(f, n, outputs, c.in.count, dtype, c.op, divisor, stream);
      break;
    }
    case CollectiveKind::reduce_scatter: {
      const std::size_t m = c.out.count;
      for (std::size_t p = 0; p < size; ++p) {
        for (std::size_t q = 0; q < size; ++q) f.in[q] = v.in[q] + p * m * es;
        f.out[0] = v.out[p];
        reduce_all_on_device(f, n, 1, m, dtype, c.op, divisor, stream);
      }
      break;
    }
    case CollectiveKind::broadcast:
      for (std::size_t p = 0; p < size; ++p)
        copy(v.out[p], v.in[static_cast<std::size_t>(c.root)], c.out.count * es);
      break;
    case CollectiveKind::allgather:
    case CollectiveKind::allgatherv:
    case CollectiveKind::gather: {
      std::size_t first = 0;
      for (std::size_t q = 0; q < size; ++q) {
        const std::size_t count = c.kind == CollectiveKind::allgatherv ? c.counts[q] : c.in.count;
        for (std::size_t p = 0; p < size; ++p)
          if (v.out[p] != nullptr) copy(v.out[p] + first * es, v.in[q], count * es);
        first += count;
      }
      break;
    }
    case CollectiveKind::scatter:
      for (std::size_t p = 0; p < size; ++p)
        copy(v.out[p], v.in[static_cast<std::size_t>(c.root)] + p * c.out.count * es,
             c.out.count * es);
      break;
    case CollectiveKind::alltoall: {
      const std::size_t m = c.in.count / size;
      for (std::size_t p = 0; p < size; ++p)
        for (std::size_t q = 0; q < size; ++q)
          copy(v.out[p] + q * m * es, v.in[q] + p * m * es, m * es);
      break;
    }
    case CollectiveKind::barrier:
    case CollectiveKind::send:
    case CollectiveKind::recv:
      break;
  }
}

void Backend::reduce_slices(const algorithms::Call& c, const Views& v) {
  const std::size_t es = dtype_size(c.out.dtype);
  const int size = ctx_->size();
  const int me = ctx_->rank();
  const Slice mine = slice_of(c.out.count, size, me, es);
  if (mine.count == 0) return;
  // Its own input first: in place, its output slice is that input.
  const std::size_t first = mine.first * es;
  std::byte* dst = v.out[static_cast<std::size_t>(me)] + first;
  const auto input = [&](int k) { return v.in[static_cast<std::size_t>((me + k) % size)] + first; };
  combine(dst, input(0), input(1), mine.count, c);
  for (int k = 2; k < size; ++k) combine(dst, dst, input(k), mine.count, c);
  if (c.op == ReduceOp::avg) divide_on_device(dst, mine.count, c.out.dtype, size, ctx_->stream());
  for (int p = 0; p < size; ++p)
    if (p != me) copy(v.out[static_cast<std::size_t>(p)] + first, dst, mine.count * es);
}

void Backend::allreduce(const algorithms::Call& c, const std::string& what) {
  const std::size_t es = dtype_size(c.out.dtype);
  const std::size_t n = c.out.count;
  const std::size_t chunk = kHalfBytes / es;
  const int size = ctx_->size();
  // Three steps a chunk (stage, reduce a slice, copy every slice) in two phases: a chunk's
  // staging may be refilled while the peers copy the previous chunk's output slices.
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
  in_chunks(
      *ctx_, c, what, n, kHalfBytes / es,
      [&](std::size_t off, std::size_t m) {
        copy(ctx_->self().in(), at(c.in.data, off * es), m * es);
      },
      [&](std::size_t off, std::size_t m) {
        if (ctx_->rank() == c.root) reduce_staged(at(c.out.data, off * es), 0, m, c);
      });
}

void Backend::reduce_scatter(const algorithms::Call& c, const std::string& what) {
  const std::size_t es = dtype_size(c.out.dtype);
  const std::size_t n = c.out.count;
  const auto size = static_cast<std::size_t>(ctx_->size());
  in_chunks(
      *ctx_, c, what, n, kHalfBytes / (size * es),
      [&](std::size_t off, std::size_t m) {
        // Row p of the staged input: rank p's block of this chunk.
        copy_rows(ctx_->self().in(), at(c.in.data, off * es), m * es, n * es, size);
      },
      [&](std::size_t off, std::size_t m) {
        reduce_staged(at(c.out.data, off * es), static_cast<std::size_t>(ctx_->rank()) * m, m, c);
      });
}

void Backend::broadcast(const algorithms::Call& c, const std::string& what) {
  const std::size_t es = dtype_size(c.out.dtype);
  const std::size_t n = c.out.count;
  const bool root = ctx_->rank() == c.root;
  in_chunks(
      *ctx_, c, what, n, kHalfBytes / es,
      [&](std::size_t off, std::size_t m) {
        if (root) copy(ctx_->self().in(), at(c.in.data, off * es), m * es);
      },
      [&](std::size_t off, std::size_t m) {
        copy(
            at(c.out.data, off * es),
            root ? at(c.in.data, off * es) : static_cast<const std::byte*>(ctx_->peer(c.root).in()),
            m * es);
      });
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
  in_chunks(
      *ctx_, c, what, longest, chunk,
      [&](std::size_t off, std::size_t) {
        copy(ctx_->self().in(), at(c.in.data, off * es), part(ctx_->rank(), off) * es);
      },
      [&](std::size_t off, std::size_t) {
        for (int p = 0; writes && p < size; ++p)
          copy(at(c.out.data, (first[static_cast<std::size_t>(p)] + off) * es), ctx_->peer(p).in(),
               part(p, off) * es);
      });
}

void Backend::scatter(const algorithms::Call& c, const std::string& what) {
  const std::size_t es = dtype_size(c.out.dtype);
  const std::size_t n = c.out.count;
  const auto size = static_cast<std::size_t>(ctx_->size());
  in_chunks(
      *ctx_, c, what, n, kHalfBytes / (size * es),
      [&](std::size_t off, std::size_t m) {
        if (ctx_->rank() == c.root)
          copy_rows(ctx_->self().in(), at(c.in.data, off * es), m * es, n * es, size);
      },
      [&](std::size_t off, std::size_t m) {
        copy(at(c.out.data, off * es),
             ctx_->peer(c.root).in() + static_cast<std::size_t>(ctx_->rank()) * m * es, m * es);
      });
}

void Backend::alltoall(const algorithms::Call& c, const std::string& what) {
  const std::size_t es = dtype_size(c.in.dtype);
  const auto size = static_cast<std::size_t>(ctx_->size());
  const std::size_t n = c.in.count / size;
  const auto me = static_cast<std::size_t>(ctx_->rank());
  in_chunks(
      *ctx_, c, what, n, kHalfBytes / (size * es),
      [&](std::size_t off, std::size_t m) {
        copy_rows(ctx_->self().in(), at(c.in.data, off * es), m * es, n * es, size);
      },
      [&](std::size_t off, std::size_t m) {
        for (std::size_t p = 0; p < size; ++p)
          copy(at(c.out.data, (p * n + off) * es),
               ctx_->peer(static_cast<int>(p)).in() + me * m * es, m * es);
      });
}

}  // namespace tandem::gpu::cuda_ipc

namespace tandem::gpu {

std::unique_ptr<comm::DeviceBackend> make_cuda_ipc_backend(const comm::DeviceSetup& setup) {
  return std::make_unique<cuda_ipc::Backend>(setup);
}

}  // namespace tandem::gpu
