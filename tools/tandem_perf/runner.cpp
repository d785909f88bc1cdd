#include "runner.hpp"

#include "pattern.hpp"

#include <tandem/error.hpp>

#include <algorithm>
#include <cstring>
#include <new>
#include <span>

namespace tandem::tools::perf {
namespace {

constexpr std::size_t kAlign = 4096;

bool has_in_place(Bench b) noexcept {
  return b != Bench::alltoall && b != Bench::sendrecv && b != Bench::barrier;
}

}  // namespace

CollectiveKind kind_of(Bench b) noexcept {
  switch (b) {
    case Bench::allreduce:
      return CollectiveKind::allreduce;
    case Bench::broadcast:
      return CollectiveKind::broadcast;
    case Bench::reduce:
      return CollectiveKind::reduce;
    case Bench::allgather:
      return CollectiveKind::allgather;
    case Bench::reduce_scatter:
      return CollectiveKind::reduce_scatter;
    case Bench::alltoall:
      return CollectiveKind::alltoall;
    case Bench::sendrecv:
      return CollectiveKind::send;
    case Bench::barrier:
      return CollectiveKind::barrier;
  }
  return CollectiveKind::barrier;
}

double bus_factor(Bench b, int world) noexcept {
  const double n = world;
  switch (b) {
    case Bench::allreduce:
      return 2 * (n - 1) / n;
    case Bench::allgather:
    case Bench::reduce_scatter:
    case Bench::alltoall:
      return (n - 1) / n;
    default:
      return 1;
  }
}

Runner::Runner(Communicator& comm, const PerfOptions& options)
    : comm_(comm), options_(options), rank_(comm.rank()), world_(comm.size()) {
  set_algorithm(options_.algorithm);
  capacity_ = (std::max<std::size_t>(options_.max_bytes, 64) + kAlign - 1) / kAlign * kAlign;
  if (options_.device != "cpu") {
    device_ = tools_api::open_device(options_.device, comm.local_rank());
    a_ = static_cast<std::byte*>(device_->allocate(capacity_));
    b_ = static_cast<std::byte*>(device_->allocate(capacity_));
    zero(a_, capacity_);
    zero(b_, capacity_);
    for (auto* p : {&a_host_, &b_host_}) {
      p->reset(static_cast<std::byte*>(std::aligned_alloc(kAlign, capacity_)));
      if (!*p)
        TANDEM_THROW(ErrorCode::InvalidArgument,
                     "tandem-perf: cannot allocate host mirrors of {} bytes", capacity_);
    }
    return;
  }
  if (options_.registered) {
    // Zero-filled and mapped by the peers already: no page faults in the timed loop.
    a_reg_ = comm.allocate(capacity_);
    b_reg_ = comm.allocate(capacity_);
    a_ = static_cast<std::byte*>(a_reg_.data());
    b_ = static_cast<std::byte*>(b_reg_.data());
    return;
  }
  for (auto* p : {&a_own_, &b_own_}) {
    p->reset(static_cast<std::byte*>(std::aligned_alloc(kAlign, capacity_)));
    if (!*p) {
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "tandem-perf: cannot allocate two buffers of {} bytes (-e too large for "
                   "this host's memory?)",
                   capacity_);
    }
    std::memset(p->get(), 0, capacity_);  // page faults here, not in the timed loop
  }
  a_ = a_own_.get();
  b_ = b_own_.get();
}

void Runner::set_algorithm(std::string name) {
  algorithm_ = std::move(name);
  call_.algorithm = algorithm_;
}

std::size_t Runner::call_bytes(std::size_t size, DataType dtype) const {
  const Shape s = shape(size, dtype);
  return s.per == 0 ? 0 : std::max(s.in, s.out) * dtype_size(dtype);
}

Runner::Shape Runner::shape(std::size_t size, DataType t) const {
  const std::size_t elem = dtype_size(t);
  const auto w = static_cast<std::size_t>(world_);
  Shape s;
  switch (options_.bench) {
    case Bench::allgather:
      s.per = size / (w * elem);
      s.in = s.per;
      s.out = s.per * w;
      break;
    case Bench::reduce_scatter:
      s.per = size / (w * elem);
      s.in = s.per * w;
      s.out = s.per;
      break;
    case Bench::alltoall:
      s.per = size / (w * elem);
      s.in = s.out = s.per * w;
      break;
    case Bench::barrier:
      break;
    default:
      s.per = s.in = s.out = size / elem;
      break;
  }
  return s;
}

Runner::Views Runner::views(const Shape& s, DataType t, bool in_place) const {
  const Device where = device_ ? device_->device() : Device::cpu();
  const BufferView a{a_, s.in, t, where};
  const BufferView b{b_, s.out, t, where};
  if (!in_place) return {a, b};
  const auto r = static_cast<std::size_t>(rank_);
  switch (options_.bench) {
    case Bench::allgather:
      return {b.slice(r * s.per, s.per), b};
    case Bench::reduce_scatter: {
      const BufferView in{b_, s.in, t, where};
      return {in, in.slice(r * s.per, s.per)};
    }
    default:
      return {b, b};
  }
}

void Runner::run_once(const Views& v, ReduceOp op) {
  switch (options_.bench) {
    case Bench::allreduce:
      comm_.allreduce(v.in, v.out, op, call_);
      return;
    case Bench::broadcast:
      comm_.broadcast(v.in, v.out, options_.root, call_);
      return;
    case Bench::reduce:
      comm_.reduce(v.in, v.out, op, options_.root, call_);
      return;
    case Bench::allgather:
      comm_.allgather(v.in, v.out, call_);
      return;
    case Bench::reduce_scatter:
      comm_.reduce_scatter(v.in, v.out, op, call_);
      return;
    case Bench::alltoall:
      comm_.alltoall(v.in, v.out, call_);
      return;
    case Bench::sendrecv: {
      // A ring: both transfers are posted before either is waited for.
      const int next = (rank_ + 1) % world_, prev = (rank_ + world_ - 1) % world_;
      auto send = comm_.send_async(v.in, next, 0, call_);
      auto recv = comm_.recv_async(v.out, prev, 0, call_);
      send->wait();
      recv->wait();
      return;
    }
    case Bench::barrier:
      comm_.barrier(call_);
      return;
  }
}

void Runner::zero(std::byte* p, std::size_t bytes) {
  if (device_)
    device_->zero(p, bytes);
  else
    std::memset(p, 0, bytes);
}

BufferView Runner::host_view(const BufferView& v) const {
  if (!device_) return v;
  const auto* p = static_cast<const std::byte*>(v.data);
  std::byte* mirror =
      p >= b_ && p < b_ + capacity_ ? b_host_.get() + (p - b_) : a_host_.get() + (p - a_);
  return {mirror, v.count, v.dtype, Device::cpu()};
}

void Runner::run_checked(const Views& v, ReduceOp op) {
  if (device_) {
    device_->upload(a_, a_host_.get(), capacity_);
    device_->upload(b_, b_host_.get(), capacity_);
  }
  run_once(v, op);
  if (device_) {
    device_->download(a_host_.get(), a_, capacity_);
    device_->download(b_host_.get(), b_, capacity_);
  }
}

Measurement Runner::measure(const Shape& s, DataType t, ReduceOp op, bool in_place,
                            std::size_t row_bytes) {
  Measurement m;
  const Views v = views(s, t, in_place);
  zero(a_, v.in.data == a_ ? v.in.bytes() : 0);
  zero(b_, std::max(s.in, s.out) * dtype_size(t));
  for (int i = 0; i < options_.warmup; ++i) run_once(v, op);
  // Twice: a rank that waited in the first barrier longer than TANDEM_SPIN_US (while another
  // printed or zeroed its buffers) sleeps, and the first timed call would measure waking it,
  // not the collective. The second finds every rank awake.
  comm_.barrier();
  comm_.barrier();

  // One clock read per iteration: each iteration ends where the next begins, so the loop
  // costs what a call costs back to back (as nccl-tests measures) and no more than one read.
  const auto iters = static_cast<std::size_t>(options_.iters);
  std::vector<Clock::time_point> stamps(iters + 1);
  stamps[0] = Clock::now();
  for (std::size_t i = 0; i < iters; ++i) {
    run_once(v, op);
    stamps[i + 1] = Clock::now();
  }
  m.algorithm = comm_.last_algorithm();
  std::vector<double> times(iters);
  for (std::size_t i = 0; i < iters; ++i)
    times[i] = std::chrono::duration<double, std::micro>(stamps[i + 1] - stamps[i]).count();
  // Once per size, outside the timed loop: the slowest rank defines each iteration.
  std::vector<double> all(iters * static_cast<std::size_t>(world_));
  comm_.allgather(BufferView::of(std::span<double>(times)), BufferView::of(std::span<double>(all)));
  std::vector<double> slowest(iters, 0.0);
  double slowest_loop = 0;  // a rank's timed loop is the sum of its iterations
  for (std::size_t r = 0; r < static_cast<std::size_t>(world_); ++r) {
    double loop = 0;
    for (std::size_t i = 0; i < iters; ++i) {
      slowest[i] = std::max(slowest[i], all[r * iters + i]);
      loop += all[r * iters + i];
    }
    slowest_loop = std::max(slowest_loop, loop);
  }
  double sum = 0;
  for (double x : slowest) sum += x;
  m.mean_us = sum / static_cast<double>(iters);
  m.calls_us = slowest;
  std::sort(slowest.begin(), slowest.end());
  m.p50_us = slowest[(iters - 1) / 2];
  m.p99_us = slowest[(iters * 99 + 99) / 100 - 1];
  m.max_us = slowest.back();
  m.loop_us = slowest_loop / static_cast<double>(iters);
  m.algbw = m.mean_us > 0 ? static_cast<double>(row_bytes) / (m.mean_us * 1e3) : 0;
  m.busbw = m.algbw * bus_factor(options_.bench, world_);
  m.valid = true;

  if (options_.check) {
    std::int64_t wrong = static_cast<std::int64_t>(check(s, t, op, in_place));
    comm_.allreduce(BufferView::of(std::span<std::int64_t>(&wrong, 1)), ReduceOp::sum);
    m.wrong = static_cast<std::size_t>(wrong);
    m.checked = true;
  }
  return m;
}

std::size_t Runner::check(const Shape& s, DataType t, ReduceOp op, bool in_place) {
  const Views v = views(s, t, in_place);
  const Views h{host_view(v.in), host_view(v.out)};  // where the checks read and write
  const int rank = rank_, world = world_;
  const auto w = static_cast<std::size_t>(world_);
  const std::size_t per = std::max<std::size_t>(s.per, 1);
  const auto sentinel = [](std::size_t) { return kSentinel; };
  const auto input = [&](std::size_t g) { return reduce_input(op, t, rank, world, g); };
  const auto expected = [&](std::size_t g) { return reduce_expected(op, t, world, g); };
  const bool approx = op == ReduceOp::avg && is_floating(t);
  switch (options_.bench) {
    case Bench::allreduce:
      if (!in_place) fill(h.out, 0, sentinel);
      fill(h.in, 0, input);
      run_checked(v, op);
      return count_wrong(h.out, 0, expected, approx);
    case Bench::broadcast: {
      const auto root = static_cast<std::size_t>(options_.root);
      const auto payload = [root](std::size_t i) { return data_value(root, i); };
      fill(h.out, 0, sentinel);
      if (rank == options_.root) fill(h.in, 0, payload);
      run_checked(v, op);
      return count_wrong(h.out, 0, payload, false);
    }
    case Bench::reduce:
      if (!in_place) fill(h.out, 0, sentinel);
      fill(h.in, 0, input);
      run_checked(v, op);
      return rank == options_.root ? count_wrong(h.out, 0, expected, approx) : 0;
    case Bench::allgather:
      fill(h.out, 0, sentinel);
      fill(h.in, 0, [rank](std::size_t i) { return data_value(rank, i); });
      run_checked(v, op);
      return count_wrong(
          h.out, 0, [per](std::size_t g) { return data_value(g / per, g % per); }, false);
    case Bench::reduce_scatter:
      if (!in_place) fill(h.out, 0, sentinel);
      fill(h.in, 0, input);
      run_checked(v, op);
      return count_wrong(h.out, static_cast<std::size_t>(rank) * s.per, expected, approx);
    case Bench::alltoall: {
      const auto me = static_cast<std::size_t>(rank);
      fill(h.out, 0, sentinel);
      fill(h.in, 0, [&](std::size_t g) { return data_value(me * w + g / per, g % per); });
      run_checked(v, op);
      return count_wrong(
          h.out, 0, [&](std::size_t g) { return data_value((g / per) * w + me, g % per); }, false);
    }
    case Bench::sendrecv: {
      const auto prev = static_cast<std::size_t>((rank + world - 1) % world);
      fill(h.out, 0, sentinel);
      fill(h.in, 0, [rank](std::size_t i) { return data_value(rank, i); });
      run_checked(v, op);
      return count_wrong(
          h.out, 0, [prev](std::size_t i) { return data_value(prev, i); }, false);
    }
    case Bench::barrier:
      run_checked(v, op);
      return 0;
  }
  return 0;
}

Row Runner::run(std::size_t size, DataType dtype, ReduceOp op) {
  Row row;
  const Shape s = shape(size, dtype);
  row.dtype = dtype;
  row.op = op;
  row.root = has_root(options_.bench) ? options_.root : -1;
  row.count = s.per;
  const std::size_t elem = dtype_size(dtype);
  row.bytes = std::max(s.in, s.out) * elem;
  if (options_.bench != Bench::barrier && s.per == 0) return row;
  if (options_.out_of_place) row.out_of_place = measure(s, dtype, op, false, row.bytes);
  if (options_.in_place && has_in_place(options_.bench))
    row.in_place = measure(s, dtype, op, true, row.bytes);
  // What ran, which is not always what was chosen: a direct algorithm runs the ring over
  // buffers that are not registered.
  row.algorithm = row.out_of_place.valid ? row.out_of_place.algorithm : row.in_place.algorithm;
  if (row.out_of_place.valid && row.in_place.valid && row.in_place.algorithm != row.algorithm)
    row.algorithm += "|" + row.in_place.algorithm;
  return row;
}

double Runner::device_copy_gbps() {
  if (!device_) return 0.0;
  comm_.barrier();
  const double gbps = comm_.rank() == 0 ? device_->copy_gbps(b_, a_, options_.max_bytes, 20) : 0.0;
  comm_.barrier();
  return gbps;
}

}  // namespace tandem::tools::perf
