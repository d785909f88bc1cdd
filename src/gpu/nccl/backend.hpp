#pragma once
// The NCCL backend: a communicator's collectives on CUDA memory. One nonblocking NCCL
// communicator per tandem communicator (its unique id through tandem's store); every call is
// enqueued on the backend's stream behind the work already on the caller's stream. A call
// without a stream is waited for by polling its event and ncclCommGetAsyncError against
// tandem's deadline and tandem's liveness checks, so that a dead or stuck peer ends the call
// with PeerLost or Timeout naming it, after which ncclCommAbort frees the device. A call with
// a stream is ordered on it and left in flight: the watchdog thread polls its event the same
// way (with the liveness checks that are safe off the mesh's thread) and on failure aborts
// the NCCL communicator and reports through DeviceSetup::on_failure.

#include "comm/device/backend.hpp"
#include "gpu/cuda.hpp"
#include "gpu/wait.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nccl.h>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace tandem::gpu {

class NcclBackend final : public comm::DeviceBackend {
 public:
  /// Collective: every rank of the communicator makes one. Throws as run() does.
  explicit NcclBackend(const comm::DeviceSetup& setup);
  ~NcclBackend() override;

  std::string_view name() const noexcept override { return "nccl"; }
  Device device() const noexcept override { return setup_.device; }
  void run(const algorithms::Call& call) override;
  void abort() noexcept override { abort_requested_.store(true, std::memory_order_release); }

 private:
  /// The NCCL calls of one collective, grouped where it takes several.
  void enqueue(const algorithms::Call& call);
  /// Returns once `finished()`; throws Aborted when abort() was called, the NCCL error the
  /// communicator reports, what check_peers throws, or Timeout at `deadline`. `what` names
  /// the call in messages.
  void wait_until(const std::function<bool()>& finished, Deadline deadline, std::string_view what);
  /// How a wait of this backend polls: abort(), NCCL's asynchronous error (named after
  /// `what`, which must outlive the hooks), the deadline, and `check_peers` every
  /// `peer_check_every`.
  WaitHooks wait_hooks(std::function<void()> check_peers,
                       std::chrono::milliseconds peer_check_every,
                       const std::string_view& what) const;
  /// Waits until the communicator has no NCCL call in progress (nonblocking mode).
  void settle(Deadline deadline, std::string_view what);
  /// Throws nccl_error(r, what) unless `r` is ncclSuccess or ncclInProgress.
  void check(ncclResult_t r, std::string_view what) const;
  /// Aborts the NCCL communicator (after a failure; from any thread, once); the backend is
  /// unusable afterwards.
  void abort_communicator() noexcept;
  /// Leaves the call enqueued on stream_ so far in the watchdog's care, its end recorded on
  /// `caller` too (which waits for it).
  void leave_in_flight(cudaStream_t caller, Deadline deadline, std::string what);
  /// The watchdog thread: polls the oldest call in flight until none is left and stopping_.
  void watch();
  /// Stops the watchdog once the calls in flight finished or failed.
  void stop_watchdog() noexcept;

  comm::DeviceSetup setup_;
  ncclComm_t comm_ = nullptr;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Event> ready_;  ///< recorded on the caller's stream before a call
  std::unique_ptr<Event> done_;   ///< recorded on stream_ after it
  DeviceMemory barrier_word_;     ///< what a barrier reduces
  std::atomic<bool> abort_requested_{false};
  std::atomic<bool> broken_{false};
  std::atomic<bool> comm_aborted_{false};  ///< ncclCommAbort was called (by one thread)

  /// A call left in flight on its stream: its end event, deadline and name.
  struct InFlight {
    std::unique_ptr<Event> end;
    Deadline deadline;
    std::string what;
  };
  std::mutex watch_mutex_;  ///< guards in_flight_, spare_events_, stopping_
  std::condition_variable watch_cv_;
  std::deque<InFlight> in_flight_;  ///< in stream order: the oldest ends first
  std::vector<std::unique_ptr<Event>> spare_events_;
  bool stopping_ = false;
  std::thread watchdog_;  ///< started by the first call left in flight
};

/// The factory registered for CUDA devices.
std::unique_ptr<comm::DeviceBackend> make_nccl_backend(const comm::DeviceSetup& setup);

}  // namespace tandem::gpu
