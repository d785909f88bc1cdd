#pragma once
// How the CUDA backends wait, on the host, for the device and for their peers: a bounded
// poll that only yields for its first milliseconds (a phase on one GPU ends within
// microseconds) and then sleeps a little per poll, asks the peers' liveness every millisecond
// (PeerLost naming a rank that died), honours abort(), and throws Timeout at the call's
// deadline. No wait of tandem's runs on the device: a kernel never spins on a flag that a dead
// process would have written.

#include <tandem/types.hpp>

#include <atomic>
#include <chrono>
#include <cuda_runtime_api.h>
#include <functional>
#include <string_view>

namespace tandem::gpu {

struct WaitHooks {
  /// Set by DeviceBackend::abort(): the wait throws Aborted.
  const std::atomic<bool>* aborted = nullptr;
  /// DeviceSetup::check_peers (may be empty).
  std::function<void()> check_peers;
  /// Asked after every poll (NCCL's asynchronous error); may throw.
  std::function<void()> after_poll;
  /// The communicator's timeout (as it is when a wait times out) and what the Timeout
  /// message adds ("the NCCL communicator is aborted").
  SharedTimeout timeout;
  std::string_view on_timeout;
  /// How often check_peers is asked (the mesh's control connections, a poll() of a few
  /// sockets, by the thread that waits: every millisecond).
  std::chrono::milliseconds peer_check_every{1};
};

/// One look, without waiting: true once `finished()` is; otherwise throws what the hooks
/// throw, Aborted after abort(), or Timeout at `deadline`, and returns false. Asks
/// check_peers when `next_check` has passed (and moves it on).
bool poll_once(const std::function<bool()>& finished, Deadline deadline, std::string_view what,
               const WaitHooks& hooks, Clock::time_point& next_check);

/// Whether the work before `event` (recorded earlier) finished; throws its CUDA error.
bool event_done(cudaEvent_t event, std::string_view what);

/// Returns once `finished()` is true; throws what the hooks throw, Aborted after abort(), or
/// Timeout at `deadline`. `what` names the call in messages.
void poll_until(const std::function<bool()>& finished, Deadline deadline, std::string_view what,
                const WaitHooks& hooks);

/// poll_until() for `event`, recorded earlier.
void wait_for_event(cudaEvent_t event, Deadline deadline, std::string_view what,
                    const WaitHooks& hooks);

/// poll_until() for the work enqueued on `stream` so far (an event recorded on it now).
/// `event` is the backend's own, reused.
void wait_for_stream(cudaStream_t stream, cudaEvent_t event, Deadline deadline,
                     std::string_view what, const WaitHooks& hooks);

}  // namespace tandem::gpu
