#pragma once
// The state behind a Communicator, in one part per concern (comm::Identity, Rendezvous,
// Config, Queue, Failure, Diagnostics), and the operations the executor runs. comm/ is
// grouped the same way: setup/ (create, from_env, split: fills identity, rendezvous and
// config, connects the mesh), exec/ (ordering, the worker thread, poisoning, Work), choice/
// (the algorithm policy and tuning files), diag/ (monitor, progress, flight recorder,
// verification, validation, timeline); communicator.cpp and allocate.cpp are the API.

#include "algorithms/algorithm.hpp"
#include "comm/choice/policy.hpp"
#include "comm/device/backend.hpp"
#include "comm/diag/flight_recorder.hpp"
#include "comm/diag/monitor.hpp"
#include "core/trace.hpp"
#include "transport/mesh.hpp"

#include <tandem/communicator.hpp>
#include <tandem/store.hpp>
#include <tandem/work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace tandem::comm {

/// One operation as submitted: the algorithm call plus what the executor needs around it.
struct Op {
  algorithms::Call call;
  /// nullptr on a one-rank communicator: the call is a local copy.
  const algorithms::Algorithm* algorithm = nullptr;
  /// send/recv: the user's tag (the call's tag is a fingerprint of it).
  std::uint32_t user_tag = 0;
  /// When the call was made, to the coarse clock's tick (core/coarse_clock.hpp): its
  /// deadline counts from here.
  Clock::time_point issued{};
  /// Where the buffers are: a device call runs on the communicator's device backend.
  Device device{};
  /// What the call's messages describe (shape_dtype()/shape_count() of `call`) and the part
  /// of their fingerprint that stays from call to call (algorithms::fingerprint_shape()):
  /// make_op() fills them once for the calls it repeats.
  DataType shape_dtype = DataType::u8;
  std::size_t shape_count = 0;
  std::uint64_t shape_print = 0;
};

inline bool is_p2p(CollectiveKind k) noexcept {
  return k == CollectiveKind::send || k == CollectiveKind::recv;
}

/// "allreduce #12 (f32 x 1048576, ring)".
std::string describe(const Op& op);

/// Records `op` on the timeline (trace.cpp): it ran from `start` to `end` after waiting in
/// the queue since op.issued; a non-empty `error` marks it failed.
void trace_op(core::trace::Ring& ring, const Op& op, Clock::time_point start, Clock::time_point end,
              std::string_view error = {});
/// Starts `op`'s event (running since `start`); ring.close() or trace_end() ends it.
void trace_begin(core::trace::Ring& ring, const Op& op, Clock::time_point start);
/// Ends the event trace_begin() opened for `op`, which succeeded at `end` run by `ran`: an
/// algorithm other than the chosen one (a direct algorithm's ring) is added as "fallback".
void trace_end(core::trace::Ring& ring, const Op& op, const algorithms::Algorithm* ran,
               Clock::time_point end);

/// Lets a thread that waits for a queued operation run it itself (Work::wait): the
/// communicator it belongs to, or null once that is shut down. OpWorks share it, so that a
/// Work that outlives its communicator never touches it.
struct WaitHelper {
  std::mutex mutex;
  Communicator::Impl* impl = nullptr;
};

/// The Work of an asynchronous (or queued blocking) operation; owns a copy of its arguments.
class OpWork final : public Work {
 public:
  OpWork(const Op& op, std::span<const std::size_t> counts, Clock::duration timeout);
  Op op;
  /// allgatherv: the counts, owned here because the caller's span may not outlive the call.
  std::vector<std::size_t> counts;

  /// Waits without throwing: true when the operation finished by `deadline`.
  bool finished_by(Deadline deadline);

  // Point to point on the worker: the posted request and its flight-recorder ticket.
  transport::Request request;
  std::uint64_t ticket = 0;
  /// Timeline only: when a send/recv was posted.
  Clock::time_point posted_at{};
  /// Timeline only: records when the operation completed (Work::completed_at(), read by the
  /// DDP Reducer after wait() to draw when a bucket's allreduce really ended).
  void set_completed_at(Clock::time_point t) noexcept { completed_at_ = t; }
  /// Work::sequence(), once the executor assigned op.call.seq.
  void set_sequence(std::int64_t seq) noexcept { sequence_ = seq; }
  /// Work::source(), before the work completes.
  void set_source(int rank) noexcept { source_ = rank; }
  /// A receive from kAnySource that has not matched a message yet (its request is posted
  /// to no peer).
  bool unmatched() const noexcept {
    return op.call.kind == CollectiveKind::recv && op.call.root == kAnySource &&
           request.peer == kAnySource;
  }
  std::shared_ptr<WaitHelper> helper;

 protected:
  std::string describe() const override;
  void run_if_next(Deadline deadline) override;
  void start_now() override;
};

}  // namespace tandem::comm

namespace tandem::comm {

/// Who this rank is in the group.
struct Identity {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  bool is_world = true;  ///< not made by split(): sets the rank shown in log lines
};

/// The store side of the group (setup/): where its keys live and how setup waits notice a
/// rank that died.
struct Rendezvous {
  std::string prefix;                        ///< this communicator's key namespace in the store
  std::shared_ptr<store::Store> base_store;  ///< the store the caller gave
  std::shared_ptr<store::Store> store;       ///< base_store under `prefix`
  /// Key on base_store that the store server sets when a rank of this group (or of the group
  /// it was split from) disconnects without closing its communicator: setup waits watch it.
  std::string lost_key;
  bool registered_lost = false;  ///< this communicator asked the store to set lost_key
  /// Throws PeerLost once lost_key is set (store waits after setup: allocate()).
  std::function<void()> check_peers;
  /// from_env on rank 0: the store server, kept alive as long as the communicator.
  /// Declared before the mesh so that it is destroyed after it.
  std::unique_ptr<store::TcpStoreServer> server;
  std::uint64_t split_count = 0;
};

/// What the settings and options chose (setup/), read by the executor.
struct Config {
  CommOptions options;
  /// The deadline of the calls made from now on (Communicator::set_timeout() may change it
  /// while calls run on other threads).
  std::chrono::milliseconds timeout() const noexcept {
    return timeout_.load(std::memory_order_relaxed);
  }
  void set_timeout(std::chrono::milliseconds t) noexcept {
    timeout_.store(t, std::memory_order_relaxed);
  }
  AlgoPolicy policy;
  /// Which host each rank runs on (one host when size == 1).
  algorithms::HostLayout hosts;
  std::size_t chunk_bytes = 1u << 20;
  /// TANDEM_SPIN_US: how long the worker polls posted sends/recvs before it sleeps.
  std::chrono::nanoseconds spin_time{std::chrono::microseconds(50)};
  /// TANDEM_DEBUG=DETAIL: the ranks compare every collective call before running it.
  bool verify_calls = false;
  /// CommOptions::lazy_start: submit() wakes the worker only while it sleeps without a
  /// timeout; otherwise it polls every lazy_start.
  std::chrono::microseconds lazy_start{0};

 private:
  std::atomic<std::chrono::milliseconds> timeout_{std::chrono::minutes(10)};
};

/// The executor's queue and worker (exec/): every operation runs in call order, one thread
/// owning the mesh.
struct Queue {
  /// The executor's state in one word: kOwned (a thread owns the mesh: an inline call or the
  /// worker), kQueued (the queue is not empty) and, above them, the next collective sequence
  /// number. A blocking call claims the mesh and its sequence number with one
  /// compare-exchange when neither bit is set, so the inline path takes no lock; the queue
  /// itself is guarded by `mutex`, and kQueued changes only under it.
  static constexpr std::uint64_t kOwned = 1;
  static constexpr std::uint64_t kQueued = 2;
  static constexpr std::uint64_t kSeqOne = 4;
  std::atomic<std::uint64_t> state{0};
  std::mutex mutex;
  std::condition_variable worker_cv;
  std::deque<std::shared_ptr<OpWork>> queue;
  std::atomic<bool> stopping{false};  ///< the destructor runs: the worker exits
  /// Lazy start (Config::lazy_start): the worker sleeps without a timeout (guarded by
  /// `mutex`).
  bool worker_asleep = false;
  /// Lazy start adapts to the caller: a thread that waits for an operation still pending
  /// sets it, the worker taking one from the queue (nobody was there to run it) clears it,
  /// and while it is clear submit() wakes the worker at once (DDP's buckets, whose futures
  /// are not waited for through Work::wait).
  bool lazy_now = true;
  /// Operations taken from the queue so far (guarded by `mutex`): a polling worker takes
  /// an operation only when it is the one it saw at the front a whole period earlier.
  std::uint64_t dequeued = 0;
  /// Operations queued so far (guarded by `mutex`): a polling worker sleeps once a whole
  /// longest period passed without one.
  std::uint64_t submitted = 0;
  /// Someone wants the worker to take the queued operations now rather than at its next
  /// lazy poll (guarded by `mutex`; a state, so that a notification sent before the worker
  /// waits is not lost): set with every such notification, cleared when the queue empties.
  bool wanted = false;
  std::size_t active = 0;  ///< operations taken by the worker, not yet completed
  std::thread worker;
  /// Ownership biased to the thread that created the communicator (executor.cpp). A locked
  /// instruction waits for every store before it, and the last store of a small call is a
  /// slot line the peer is polling: the claim and release of the mesh are a noticeable share
  /// of a small call (docs/benchmarks-small.md). While `biased_to` names a thread, kOwned
  /// stays set on its behalf, and that thread claims the mesh by setting `bias_busy` and
  /// checking `bias_revoked` with a compiler barrier only; any other use of the state word
  /// first revokes the bias for good (unbias(): sets `bias_revoked`, an asymmetric fence,
  /// waits for `bias_busy` to clear, gives kOwned up). Null where there are no asymmetric
  /// fences or one rank.
  std::atomic<const void*> biased_to{nullptr};
  std::atomic<bool> bias_busy{false};
  std::atomic<bool> bias_revoked{false};
  std::mutex bias_mutex;  ///< one revocation at a time
  /// Point-to-point operations the worker posted that are not complete (worker only), in
  /// call order; receives from kAnySource among them wait here, unposted, until a peer's
  /// message matches them (OpWork::unmatched()).
  std::vector<std::shared_ptr<OpWork>> in_flight;
  /// Where the next receive from kAnySource starts looking: after the rank the last one
  /// matched, so that one busy sender cannot starve the others (worker only).
  int any_source_from = 0;
};

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

}  // namespace tandem::comm

namespace tandem {

/// A communicator's state, one part per concern: setup/ fills identity, rendezvous and
/// config and connects the mesh; exec/ owns the queue; the failure and the diagnostics are
/// written by whichever thread owns the mesh.
struct Communicator::Impl {
  /// Unique among this process's communicators, past and present (the API's memo of the last
  /// checked call is keyed by it, not by an address a later communicator may reuse).
  const std::uint64_t serial = next_serial();
  comm::Identity id;
  comm::Rendezvous rendezvous;  ///< before the mesh: its store server outlives it
  comm::Config config;
  std::unique_ptr<transport::Mesh> mesh;  ///< null when size == 1
  algorithms::Scratch scratch;
  /// What algorithms run against (set up with the mesh; `ran` is reset by each call): made
  /// once, not per call.
  std::optional<algorithms::Context> context;
  /// Runs the calls on device memory (device/backend.hpp); made at the first one, by the
  /// thread that owns the mesh. `device_live` lets poison() on another thread abort it.
  std::unique_ptr<comm::DeviceBackend> device_backend;
  std::atomic<comm::DeviceBackend*> device_live{nullptr};
  comm::Queue exec;
  comm::Failure failure;
  comm::Diagnostics diag;

  Impl() { wait_helper->impl = this; }
  static std::uint64_t next_serial() noexcept {
    static std::atomic<std::uint64_t> last{0};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  /// Stops the monitor, whose mismatch handler points here, if shutdown() did not.
  ~Impl() {
    if (diag.monitor) diag.monitor->stop();
  }

  // executor.cpp
  /// Runs the call inline when nothing is queued or running, else behind the queued
  /// operations, and returns when it finished. Throws its Error.
  void run_blocking(comm::Op& op, std::span<const std::size_t> counts);
  /// Queues the call for the worker thread and returns its Work.
  std::shared_ptr<Work> submit(const comm::Op& op, std::span<const std::size_t> counts);
  /// Biases the mesh's ownership to the calling thread (Queue::biased_to). Only while no
  /// other thread can reach the communicator: at the end of its setup.
  void bias_to_caller();
  /// Revokes the bias, if any, waiting for the biased thread's call in progress to end;
  /// afterwards every thread claims the mesh through the state word. Must not be called
  /// with exec.mutex held (the call waited for may be long).
  void unbias();
  /// Runs one operation on this thread (the caller owns the mesh). Throws its Error.
  /// `seq`: op.call.seq as the caller has it (read back from `op` just after it was written,
  /// wider loads that cover it wait for every store before them). `now`: the current time,
  /// when the caller just read it.
  void execute(const comm::Op& op, std::uint64_t seq, Clock::time_point now = {});
  /// execute()'s failure, from its catch block: records, reports and poisons, then throws
  /// the error that says what happened.
  [[noreturn, gnu::cold]] void failed(const comm::Op& op, std::uint64_t ticket);
  /// "<op> failed: <what>": records the first failure as the poison (aborting the mesh
  /// unless the mesh failed by itself) and returns the message. `owns_mesh`: the calling
  /// thread owns the mesh and makes it forget the requests posted when the failure struck.
  std::string fail(const comm::Op& op, ErrorCode code, std::string_view what,
                   bool owns_mesh = true);
  /// Records the first failure, aborts the mesh unless the mesh failed by itself.
  void poison(ErrorCode code, const std::string& message) noexcept;
  /// The Error every operation after the first failure gets.
  [[noreturn]] void throw_poisoned(const comm::Op& op) const;
  /// Fails queued work with Aborted, stops the worker, closes the mesh.
  void shutdown() noexcept;
  /// Appends the call to the queue behind everything queued or running, with its sequence
  /// number and tag, and returns its Work. The caller holds `mutex`.
  std::shared_ptr<comm::OpWork> enqueue(const comm::Op& op, std::span<const std::size_t> counts);
  /// Starts the worker thread unless it runs (caller holds `mutex`); Error(Io) on failure.
  void start_worker();
  /// Gives the mesh up; wakes the worker when operations were queued meanwhile.
  void release_mesh() noexcept;
  /// The device backend for `device`, made at the first call on a device (every rank makes
  /// it at the same call). InvalidArgument for a second device.
  comm::DeviceBackend& device_for(Device device);

  // worker.cpp
  void worker_loop();
  /// Runs a collective taken from the queue and completes its Work.
  void run_collective(const std::shared_ptr<comm::OpWork>& work);
  /// A thread waiting for `work`: when it is a collective at the front of the queue and no
  /// thread owns the mesh, takes it from the queue and runs it on this thread.
  void run_if_next(const comm::OpWork* work);
  /// Work::start(): the caller will not wait for its operations; the worker takes them now.
  void start_soon();
  std::shared_ptr<comm::WaitHelper> wait_helper = std::make_shared<comm::WaitHelper>();
  /// Posts a send/recv taken from the queue (it completes later, in progress_p2p()).
  void start_p2p(const std::shared_ptr<comm::OpWork>& work);
  /// Advances the posted point-to-point operations; completes those that finished or
  /// failed. True when any completed.
  bool progress_p2p();
  /// Posts the receives from kAnySource that now match a peer's message, in call order
  /// (worker only; throws as the mesh does).
  void match_any_source();
  /// A receive from kAnySource is unmatched: the next queued operation, unless a send,
  /// must wait for it (worker only).
  bool any_source_unmatched() const noexcept;
  /// Fails every posted point-to-point operation (the first with "<op> failed: <what>"
  /// unless the communicator is poisoned already, then each with the poison).
  void fail_in_flight(ErrorCode code, std::string_view what);
  /// Completes `work` after it left `active`, so that whoever sees it done may destroy the
  /// communicator without it counting as running.
  void complete(const std::shared_ptr<comm::OpWork>& work, std::exception_ptr thrown);
};

}  // namespace tandem
