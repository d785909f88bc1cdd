#include "gpu/nccl/backend.hpp"

#include "gpu/kernels.hpp"
#include "gpu/nccl/types.hpp"
#include "gpu/nccl/unique_id.hpp"
#include "gpu/wait.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>

#include <chrono>
#include <optional>

namespace tandem::gpu {
namespace {

using namespace std::chrono_literals;

// Finalizing the NCCL communicator at destruction, after which it is aborted instead.
constexpr auto kFinalizeTimeout = 10s;
// How often the watchdog polls the oldest call in flight, and asks the store about the peers.
constexpr auto kWatchPoll = 200us;
constexpr auto kWatchPeerCheck = 250ms;

std::string describe_call(const algorithms::Call& c, Device device) {
  const BufferView& b = c.in.count > 0 ? c.in : c.out;
  switch (c.kind) {
    case CollectiveKind::send:
      return fmt::format("NCCL send to rank {} ({} x {} on {})", c.root, to_string(b.dtype),
                         b.count, device.str());
    case CollectiveKind::recv:
      return fmt::format("NCCL recv from rank {} ({} x {} on {})", c.root, to_string(b.dtype),
                         b.count, device.str());
    default:
      return fmt::format("NCCL {} #{} ({} x {} on {})", to_string(c.kind), c.seq,
                         to_string(b.dtype), b.count, device.str());
  }
}

}  // namespace

NcclBackend::NcclBackend(const comm::DeviceSetup& setup) : setup_(setup) {
  const auto start = Clock::now();
  const Deadline deadline = deadline_in(setup_.timeout.get());
  use_device(setup_.device);
  stream_ = std::make_unique<Stream>();
  ready_ = std::make_unique<Event>();
  done_ = std::make_unique<Event>();
  barrier_word_ = DeviceMemory(sizeof(float));
  const ncclUniqueId id =
      exchange_unique_id(*setup_.store, "nccl/id", setup_.rank, deadline, setup_.check_peers);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait is tandem's, with its deadline and liveness checks
  config.commName = setup_.label.c_str();
  try {
    check(ncclCommInitRankConfig(&comm_, setup_.size, id, setup_.rank, &config),
          "ncclCommInitRankConfig");
    settle(deadline, fmt::format("creating the NCCL communicator of {} ranks", setup_.size));
  } catch (...) {
    abort_communicator();
    throw;
  }
  int version = 0;
  (void)ncclGetVersion(&version);
  TANDEM_INFO(init,
              "{}: rank {} of {} runs collectives on CUDA memory through NCCL {} on {} ({}), "
              "nonblocking, ready in {:.1f} ms; NCCL chooses the path to each peer (NVLink, "
              "PCIe, shared memory, network): NCCL_DEBUG=INFO lists them",
              setup_.label, setup_.rank, setup_.size, nccl_version_text(version),
              setup_.device.str(), describe_device(setup_.device.index),
              std::chrono::duration<double, std::milli>(Clock::now() - start).count());
}

NcclBackend::~NcclBackend() {
  stop_watchdog();
  if (comm_ == nullptr || comm_aborted_.load(std::memory_order_acquire)) return;
  if (abort_requested_.load(std::memory_order_acquire)) {
    // The communicator failed: its peers may never finalize with this one.
    abort_communicator();
    return;
  }
  try {
    check_cuda(cudaSetDevice(setup_.device.index), "cudaSetDevice");
    check(ncclCommFinalize(comm_), "ncclCommFinalize");
    setup_.check_peers = nullptr;  // the peers may be gone already: that is no failure now
    settle(deadline_in(kFinalizeTimeout), "finalizing the NCCL communicator");
    (void)ncclCommDestroy(comm_);
    comm_aborted_.store(true, std::memory_order_release);  // gone: nothing more to abort
  } catch (const Error& e) {
    TANDEM_DETAIL(init, "{}: NCCL communicator aborted at destruction: {}", setup_.label,
                  e.message());
    abort_communicator();
  }
}

void NcclBackend::check(ncclResult_t r, std::string_view what) const {
  if (r == ncclSuccess || r == ncclInProgress) [[likely]]
    return;
  throw nccl_error(r, what, comm_ != nullptr ? ncclGetLastError(comm_) : "");
}

void NcclBackend::abort_communicator() noexcept {
  broken_.store(true, std::memory_order_release);
  if (comm_ == nullptr || comm_aborted_.exchange(true, std::memory_order_acq_rel)) return;
  (void)ncclCommAbort(comm_);
}

void NcclBackend::run(const algorithms::Call& call) {
  const std::string what = describe_call(call, setup_.device);
  if (broken_.load(std::memory_order_acquire))
    TANDEM_THROW(ErrorCode::Aborted,
                 "{} was not run: this communicator's NCCL communicator was aborted after an "
                 "earlier failure",
                 what);
  try {
    check_cuda(cudaSetDevice(setup_.device.index), "cudaSetDevice");
    // What the caller's kernels on its stream wrote comes first; its later work comes after
    // (the stream waits for the collective's end).
    const cudaStream_t caller = caller_stream(call.stream);
    check_cuda(cudaEventRecord(ready_->get(), caller), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_->get(), ready_->get(), 0), "cudaStreamWaitEvent");
    enqueue(call);
    settle(call.deadline, what);
    if (divides_after(call.op, call.out.dtype) && setup_.size > 1 &&
        (call.kind == CollectiveKind::allreduce || call.kind == CollectiveKind::reduce_scatter ||
         (call.kind == CollectiveKind::reduce && setup_.rank == call.root)))
      divide_on_device(call.out.data, call.out.count, call.out.dtype, setup_.size, stream_->get());
    if (call.stream != nullptr) {
      leave_in_flight(caller, call.deadline, what);
      return;
    }
    check_cuda(cudaEventRecord(done_->get(), stream_->get()), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(caller, done_->get(), 0), "cudaStreamWaitEvent");
    wait_until(
        [&] {
          const cudaError_t e = cudaEventQuery(done_->get());
          if (e == cudaErrorNotReady) return false;
          check_cuda(e, fmt::format("{} on the device", what));
          return true;
        },
        call.deadline, what);
  } catch (...) {
    abort_communicator();
    throw;
  }
}

void NcclBackend::leave_in_flight(cudaStream_t caller, Deadline deadline, std::string what) {
  std::unique_ptr<Event> end;
  {
    std::lock_guard lock(watch_mutex_);
    if (!spare_events_.empty()) {
      end = std::move(spare_events_.back());
      spare_events_.pop_back();
    }
  }
  if (!end) end = std::make_unique<Event>();
  check_cuda(cudaEventRecord(end->get(), stream_->get()), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(caller, end->get(), 0), "cudaStreamWaitEvent");
  {
    std::lock_guard lock(watch_mutex_);
    in_flight_.push_back({std::move(end), deadline, std::move(what)});
    if (!watchdog_.joinable()) watchdog_ = std::thread([this] { watch(); });
  }
  watch_cv_.notify_one();
}

void NcclBackend::watch() {
  (void)cudaSetDevice(setup_.device.index);
  // Off the mesh's thread: only the store's watch of the peers, every kWatchPeerCheck.
  std::string what;          // the call watched now
  std::string_view watched;  // what the hooks' messages name: `what`
  const WaitHooks hooks = wait_hooks(setup_.check_peers_async, kWatchPeerCheck, watched);
  Clock::time_point next_peer_check{};
  std::unique_lock lock(watch_mutex_);
  for (;;) {
    watch_cv_.wait(lock, [&] { return stopping_ || !in_flight_.empty(); });
    if (in_flight_.empty()) return;  // stopping, and nothing left to watch
    const cudaEvent_t end = in_flight_.front().end->get();
    const Deadline deadline = in_flight_.front().deadline;
    what = in_flight_.front().what;
    watched = what;
    lock.unlock();
    bool finished = false;
    std::optional<Error> failure;
    try {
      finished =
          poll_once([&] { return event_done(end, what); }, deadline, what, hooks, next_peer_check);
    } catch (const Error& e) {
      failure = e;
    } catch (const std::exception& e) {
      failure = Error(ErrorCode::Internal,
                      fmt::format("{}: unexpected exception while watching it (a bug in tandem; "
                                  "please report it): {}",
                                  what, e.what()));
    }
    if (failure) {
      abort_communicator();  // the kernels stop: the caller's stream moves on
      lock.lock();
      for (auto& c : in_flight_) spare_events_.push_back(std::move(c.end));
      in_flight_.clear();
      lock.unlock();
      if (setup_.on_failure) setup_.on_failure(*failure);
      lock.lock();
      continue;
    }
    lock.lock();
    if (finished) {
      spare_events_.push_back(std::move(in_flight_.front().end));
      in_flight_.pop_front();
    } else {
      watch_cv_.wait_for(lock, kWatchPoll);
    }
  }
}

void NcclBackend::stop_watchdog() noexcept {
  {
    std::lock_guard lock(watch_mutex_);
    stopping_ = true;
  }
  watch_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void NcclBackend::enqueue(const algorithms::Call& c) {
  const cudaStream_t s = stream_->get();
  const DataType dtype = c.in.count > 0 ? c.in.dtype : c.out.dtype;
  const ncclDataType_t t = nccl_type(dtype);
  const ncclRedOp_t op = nccl_op(c.op, dtype);
  const std::size_t n = static_cast<std::size_t>(setup_.size);
  check(ncclGroupStart(), "ncclGroupStart");
  ncclResult_t r = ncclSuccess;
  switch (c.kind) {
    case CollectiveKind::allreduce:
      r = ncclAllReduce(c.in.data, c.out.data, c.out.count, t, op, comm_, s);
      break;
    case CollectiveKind::broadcast:
      r = ncclBroadcast(c.in.data, c.out.data, c.out.count, t, c.root, comm_, s);
      break;
    case CollectiveKind::reduce:
      r = ncclReduce(c.in.data, c.out.data, c.in.count, t, op, c.root, comm_, s);
      break;
    case CollectiveKind::allgather:
      r = ncclAllGather(c.in.data, c.out.data, c.in.count, t, comm_, s);
      break;
    case CollectiveKind::allgatherv: {
      // One broadcast per rank into its place in `out`, grouped into one launch.
      const std::size_t es = dtype_size(dtype);
      std::size_t offset = 0;
      for (std::size_t p = 0; p < c.counts.size() && r == ncclSuccess; ++p) {
        auto* place = static_cast<std::byte*>(c.out.data) + offset * es;
        const void* from = static_cast<int>(p) == setup_.rank ? c.in.data : place;
        r = ncclBroadcast(from, place, c.counts[p], t, static_cast<int>(p), comm_, s);
        offset += c.counts[p];
      }
      break;
    }
    case CollectiveKind::reduce_scatter:
      r = ncclReduceScatter(c.in.data, c.out.data, c.out.count, t, op, comm_, s);
      break;
    case CollectiveKind::alltoall:
      r = ncclAlltoAll(c.in.data, c.out.data, c.in.count / n, t, comm_, s);
      break;
    case CollectiveKind::gather:
      r = ncclGather(c.in.data, c.out.data, c.in.count, t, c.root, comm_, s);
      break;
    case CollectiveKind::scatter:
      r = ncclScatter(c.in.data, c.out.data, c.out.count, t, c.root, comm_, s);
      break;
    case CollectiveKind::send:
      r = ncclSend(c.in.data, c.in.count, t, c.root, comm_, s);
      break;
    case CollectiveKind::recv:
      r = ncclRecv(c.out.data, c.out.count, t, c.root, comm_, s);
      break;
    case CollectiveKind::barrier:
      r = ncclAllReduce(barrier_word_.get(), barrier_word_.get(), 1, ncclFloat32, ncclSum, comm_,
                        s);
      break;
  }
  const ncclResult_t end = ncclGroupEnd();
  check(r, fmt::format("enqueueing the {}", to_string(c.kind)));
  check(end, "ncclGroupEnd");
}

void NcclBackend::settle(Deadline deadline, std::string_view what) {
  wait_until(
      [&] {
        ncclResult_t state = ncclSuccess;
        check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
        return state != ncclInProgress;
      },
      deadline, what);
}

WaitHooks NcclBackend::wait_hooks(std::function<void()> check_peers,
                                  std::chrono::milliseconds peer_check_every,
                                  const std::string_view& what) const {
  WaitHooks hooks;
  hooks.aborted = &abort_requested_;
  hooks.check_peers = std::move(check_peers);
  hooks.peer_check_every = peer_check_every;
  hooks.after_poll = [this, &what] {
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress)
      throw nccl_error(state, what, ncclGetLastError(comm_));
  };
  hooks.timeout = setup_.timeout;
  hooks.on_timeout = "the NCCL communicator is aborted";
  return hooks;
}

void NcclBackend::wait_until(const std::function<bool()>& finished, Deadline deadline,
                             std::string_view what) {
  poll_until(finished, deadline, what, wait_hooks(setup_.check_peers, 1ms, what));
}

std::unique_ptr<comm::DeviceBackend> make_nccl_backend(const comm::DeviceSetup& setup) {
  return std::make_unique<NcclBackend>(setup);
}

}  // namespace tandem::gpu
