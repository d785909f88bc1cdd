#include "gpu/wait.hpp"

#include "gpu/cuda.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <thread>

namespace tandem::gpu {
namespace {

using namespace std::chrono_literals;

// For this long a wait only yields between polls (a collective's phase on one GPU or over
// NVLink ends within microseconds to a few milliseconds: a sleep there would add its own
// length, as Linux rounds it up, to every phase); after it each poll sleeps.
constexpr auto kSpinFor = 5ms;
constexpr auto kPollSleep = 20us;

}  // namespace

bool poll_once(const std::function<bool()>& finished, Deadline deadline, std::string_view what,
               const WaitHooks& hooks, Clock::time_point& next_check) {
  // A call that failed asynchronously also "finishes": after_poll's error is the answer.
  const bool done = finished();
  if (hooks.after_poll) hooks.after_poll();
  if (done) return true;
  if (hooks.aborted != nullptr && hooks.aborted->load(std::memory_order_acquire))
    TANDEM_THROW(ErrorCode::Aborted,
                 "{} was stopped: the communicator was aborted (another operation failed or a "
                 "peer reported a failure)",
                 what);
  const auto now = Clock::now();
  if (now >= deadline)
    TANDEM_THROW(ErrorCode::Timeout,
                 "{} did not complete within its deadline (timeout {} ms): a peer never joined "
                 "it or is stuck{}. Raise TANDEM_TIMEOUT if the work legitimately takes longer",
                 what, hooks.timeout.get().count(),
                 hooks.on_timeout.empty() ? std::string() : fmt::format("; {}", hooks.on_timeout));
  if (hooks.check_peers && now >= next_check) {
    hooks.check_peers();  // PeerLost naming a rank that died
    next_check = now + hooks.peer_check_every;
  }
  return false;
}

void poll_until(const std::function<bool()>& finished, Deadline deadline, std::string_view what,
                const WaitHooks& hooks) {
  Clock::time_point next_check{};
  const Clock::time_point spin_until = Clock::now() + kSpinFor;
  while (!poll_once(finished, deadline, what, hooks, next_check)) {
    if (Clock::now() < spin_until)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(kPollSleep);
  }
}

bool event_done(cudaEvent_t event, std::string_view what) {
  const cudaError_t e = cudaEventQuery(event);
  if (e == cudaErrorNotReady) return false;
  check_cuda(e, fmt::format("{} on the device", what));
  return true;
}

void wait_for_stream(cudaStream_t stream, cudaEvent_t event, Deadline deadline,
                     std::string_view what, const WaitHooks& hooks) {
  check_cuda(cudaEventRecord(event, stream), "cudaEventRecord");
  wait_for_event(event, deadline, what, hooks);
}

void wait_for_event(cudaEvent_t event, Deadline deadline, std::string_view what,
                    const WaitHooks& hooks) {
  poll_until([&] { return event_done(event, what); }, deadline, what, hooks);
}

}  // namespace tandem::gpu
