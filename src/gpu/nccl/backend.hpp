#pragma once
// The NCCL backend: a communicator's collectives on CUDA memory. One nonblocking NCCL
// communicator per tandem communicator (its unique id through tandem's store); every call is
// enqueued on the backend's stream behind the work already on the legacy default stream, and
// waited for by polling its event and ncclCommGetAsyncError against tandem's deadline and
// tandem's liveness checks, so that a dead or stuck peer ends the call with PeerLost or
// Timeout naming it, after which ncclCommAbort frees the device.

#include "comm/device/backend.hpp"
#include "gpu/cuda.hpp"

#include <atomic>
#include <functional>
#include <memory>
#include <nccl.h>
#include <string>
#include <string_view>

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
  /// Waits until the communicator has no NCCL call in progress (nonblocking mode).
  void settle(Deadline deadline, std::string_view what);
  /// Throws nccl_error(r, what) unless `r` is ncclSuccess or ncclInProgress.
  void check(ncclResult_t r, std::string_view what) const;
  /// Aborts the NCCL communicator (after a failure); the backend is unusable afterwards.
  void abort_communicator() noexcept;

  comm::DeviceSetup setup_;
  ncclComm_t comm_ = nullptr;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Event> ready_;  ///< recorded on the legacy default stream before a call
  std::unique_ptr<Event> done_;   ///< recorded on stream_ after it
  DeviceMemory barrier_word_;     ///< what a barrier reduces
  std::atomic<bool> abort_requested_{false};
  bool broken_ = false;
};

/// The factory registered for CUDA devices.
std::unique_ptr<comm::DeviceBackend> make_nccl_backend(const comm::DeviceSetup& setup);

}  // namespace tandem::gpu
