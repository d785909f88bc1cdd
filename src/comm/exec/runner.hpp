#pragma once
// The runner: executes operations for the thread that owns the mesh (the queue decides
// which: queue.hpp) and records what happened: the flight recorder, the monitor, the
// timeline, and the first failure, which poisons the communicator (the mesh is aborted so
// that the peers learn of it, and every later operation fails at once with the same code).

#include "algorithms/algorithm.hpp"
#include "comm/device/backend.hpp"
#include "comm/diag/flight_recorder.hpp"
#include "comm/diag/monitor.hpp"
#include "comm/exec/queue.hpp"
#include "comm/group.hpp"
#include "core/trace.hpp"
#include "transport/mesh.hpp"

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::comm {

/// The first failure, which poisons the communicator: every later operation gets it.
struct Failure {
  std::atomic<bool> poisoned{false};
  mutable std::mutex mutex;
  std::exception_ptr error;
  ErrorCode code = ErrorCode::Internal;
  std::string message;
  /// The first failure was logged with the flight recorder and published for the reports.
  std::atomic<bool> reported{false};
};

/// What the communicator tells about itself (diag/).
struct Diagnostics {
  FlightRecorder recorder;
  /// The algorithm that ran the last operation that succeeded (null: none yet, or a
  /// one-rank communicator's local copy); read by Communicator::last_algorithm().
  std::atomic<const algorithms::Algorithm*> last_algorithm{nullptr};
  /// The last operation that succeeded ran on the device backend (last_algorithm() names it).
  std::atomic<bool> last_on_device{false};
  /// TANDEM_TRACE: this communicator's timeline track (null when off). Written by the thread
  /// that owns the mesh, like the recorder.
  std::unique_ptr<core::trace::Ring> trace;
  /// Publishes progress, reports stalls and mismatches that left every rank waiting (size > 1).
  std::shared_ptr<Monitor> monitor;
};

/// Every method but poison(), throw_poisoned() and fail(..., owns_mesh = false) is for the
/// thread that owns the mesh; in_flight() and any_source_unmatched() read what only the
/// worker thread changes, and the worker may read them at any time.
class Runner {
 public:
  Runner(const Identity& id, const Config& config, const Rendezvous& rendezvous) noexcept
      : id_(id), config_(config), rendezvous_(rendezvous) {}
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // What setup makes (setup/bootstrap.cpp).
  std::unique_ptr<transport::Mesh> mesh;  ///< null when size == 1
  algorithms::Scratch scratch;
  /// What algorithms run against (made with the mesh; `ran` is reset by each call).
  std::optional<algorithms::Context> context;
  /// Runs the calls on device memory (device/backend.hpp); made at the first one.
  /// `device_live` lets poison() on another thread abort it.
  std::unique_ptr<DeviceBackend> device_backend;
  std::atomic<DeviceBackend*> device_live{nullptr};
  Failure failure;
  Diagnostics diag;

  /// Runs one operation on this thread. Throws its Error. `seq`: op.call.seq as the caller
  /// has it (read back from `op` just after it was written, wider loads that cover it wait
  /// for every store before them). `now`: the current time, when the caller just read it.
  void execute(const Op& op, std::uint64_t seq, Clock::time_point now = {});
  /// An operation taken from the queue: a send or receive of host memory is posted (it
  /// completes in progress()), anything else runs to its end. Appends what finished.
  void start(const std::shared_ptr<OpWork>& work, Completions& done);
  /// Advances the posted sends/recvs; appends those that finished or failed. True when any
  /// did.
  bool progress(Completions& done);
  /// Sends/recvs are posted and not complete.
  bool in_flight() const noexcept { return !in_flight_.empty(); }
  /// A receive from kAnySource is unmatched: the next queued operation, unless a send,
  /// must wait for it.
  bool any_source_unmatched() const noexcept;
  /// Fails every posted send/recv (the first with "<op> failed: <what>" unless the
  /// communicator is poisoned already, then each with the poison); appends them.
  void fail_in_flight(ErrorCode code, std::string_view what, Completions& done);

  /// "<op> failed: <what>": records the first failure as the poison (aborting the mesh
  /// unless the mesh failed by itself) and returns the message. `owns_mesh`: the calling
  /// thread owns the mesh and makes it forget the requests posted when the failure struck.
  std::string fail(const Op& op, ErrorCode code, std::string_view what, bool owns_mesh = true);
  /// Records the first failure, aborts the mesh unless the mesh failed by itself. Any thread.
  void poison(ErrorCode code, const std::string& message) noexcept;
  /// The Error every operation after the first failure gets.
  [[noreturn]] void throw_poisoned(const Op& op) const;
  /// Shutdown, after the queue stopped: closes the device backend, then the mesh.
  void close() noexcept;

 private:
  /// execute()'s failure, from its catch block: records, reports and poisons, then throws
  /// the error that says what happened.
  [[noreturn, gnu::cold]] void failed(const Op& op, std::uint64_t ticket);
  /// The device backend for `device`, made at the first call on a device (every rank makes
  /// it at the same call). InvalidArgument for a second device.
  DeviceBackend& device_for(Device device);
  /// Posts a send/recv taken from the queue.
  void post(const std::shared_ptr<OpWork>& work, Completions& done);
  /// Posts the receives from kAnySource that now match a peer's message, in call order
  /// (throws as the mesh does).
  void match_any_source();
  /// Appends `work`'s completion, with its completion time and a receive's sender.
  void finished(std::shared_ptr<OpWork> work, std::exception_ptr error, Completions& done);

  const Identity& id_;
  const Config& config_;
  const Rendezvous& rendezvous_;
  /// Posted sends/recvs that are not complete, in call order; receives from kAnySource among
  /// them wait here, unposted, until a peer's message matches them (OpWork::unmatched()).
  std::vector<std::shared_ptr<OpWork>> in_flight_;
  /// Where the next receive from kAnySource starts looking: after the rank the last one
  /// matched, so that one busy sender cannot starve the others.
  int any_source_from_ = 0;
};

}  // namespace tandem::comm
