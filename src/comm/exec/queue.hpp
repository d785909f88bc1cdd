#pragma once
// The queue: call order, and which thread owns the mesh. Every operation enters through
// admit(), blocking and asynchronous alike: it runs at once on the calling thread when the
// call may and nothing is queued or running, else it is queued. A queued operation is run
// by the first thread that finds it next with the mesh free: a thread waiting for it
// (help()) or the worker thread the queue keeps. Whoever runs it hands it to the Runner
// (runner.hpp), which executes; the queue never looks inside an operation.

#include "comm/exec/op.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

namespace tandem::comm {

class Runner;

namespace detail {
/// Each thread's own address: what Queue::biased_to_ names.
inline thread_local const char this_thread_token = 0;
}  // namespace detail

/// How an operation enters the queue.
enum class Start : std::uint8_t {
  now_if_free,  ///< a blocking call: runs on the calling thread when nothing is ahead of it
  queued,       ///< an asynchronous call: queued; the caller returns at once
};

/// An operation that finished, and its error (null: it succeeded).
struct Completion {
  std::shared_ptr<OpWork> work;
  std::exception_ptr error;
};
using Completions = std::vector<Completion>;

class Queue;

/// What Queue::admit() decided: the calling thread owns the mesh and runs the operation now
/// (runs_here(); the mesh is given up when the Admission is destroyed), or the operation was
/// queued and work() completes when it ran.
class [[nodiscard]] Admission {
 public:
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  ~Admission() {
    if (claim_ != Claim::none) release();
  }
  bool runs_here() const noexcept { return claim_ != Claim::none; }
  /// The operation's sequence number (runs_here() only), as the queue assigned it.
  std::uint64_t seq() const noexcept { return seq_; }
  /// The queued operation's Work (not runs_here()).
  const std::shared_ptr<OpWork>& work() const& noexcept { return work_; }
  std::shared_ptr<OpWork> work() && noexcept { return std::move(work_); }

 private:
  friend class Queue;
  enum class Claim : std::uint8_t { none, biased, owned };
  Admission(Queue* queue, Claim claim, std::uint64_t seq) noexcept
      : queue_(queue), claim_(claim), seq_(seq) {}
  explicit Admission(std::shared_ptr<OpWork> work) noexcept : work_(std::move(work)) {}
  void release() noexcept;

  Queue* queue_ = nullptr;
  Claim claim_ = Claim::none;
  std::uint64_t seq_ = 0;
  std::shared_ptr<OpWork> work_;
};

/// Shared by the communicator and every OpWork it made, so that a Work that outlives the
/// communicator may still ask it (and be refused).
class Queue : public std::enable_shared_from_this<Queue> {
 public:
  Queue() = default;
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  /// At the end of setup, before any operation: who executes, how the worker waits.
  /// `runner` outlives every operation the queue runs (close() and join() see to that).
  void attach(Runner& runner, std::chrono::microseconds lazy_start,
              std::chrono::nanoseconds spin_time) noexcept;
  /// The one way in. Assigns the operation's sequence number and tag (in `op`, and in the
  /// Work's copy when queued). Throws Error(Io) when the worker thread cannot start; nothing
  /// is queued then. Inline: a blocking call's path when nothing is ahead of it.
  Admission admit(Op& op, std::span<const std::size_t> counts, Start start,
                  Clock::duration timeout);
  /// A queued blocking call whose deadline passed: takes it out of the queue if it has not
  /// started. True when it was taken out (it will never run).
  bool withdraw(const std::shared_ptr<OpWork>& work);
  /// Work::wait() for `work` until `deadline`: when `work` is next, the mesh is free and the
  /// wait is no shorter than the operation's own deadline, runs it on the calling thread.
  /// Otherwise makes sure the worker takes what is ahead of it. Never blocks for long.
  void help(OpWork& work, Deadline deadline);
  /// Work::start(): the caller will not wait for its operations; the worker takes them now.
  void start_soon();

  /// Biases the mesh's ownership to the calling thread (see `biased_to_`). Only while no
  /// other thread can reach the communicator: at the end of its setup.
  void bias_to_caller(int size);
  /// Revokes the bias, if any, waiting for the biased thread's call in progress to end;
  /// afterwards every thread claims the mesh through the state word. Must not be called
  /// with mutex_ held (the call waited for may be long).
  void unbias();

  /// Shutdown, first step: refuses every later operation and help(), and returns what was
  /// queued and never started. `running`: an operation is running now.
  std::deque<std::shared_ptr<OpWork>> close(bool& running);
  /// Shutdown, second step: waits for the running operations (the caller made them end, by
  /// poisoning) and stops the worker thread.
  void join() noexcept;

 private:
  friend class Admission;
  /// The state word: kOwned (a thread owns the mesh: an inline call, a helping waiter or the
  /// worker), kQueued (the queue is not empty) and, above them, the next collective sequence
  /// number. A blocking call claims the mesh and its sequence number with one
  /// compare-exchange when neither bit is set, so the inline path takes no lock; the queue
  /// itself is guarded by `mutex_`, and kQueued changes only under it.
  static constexpr std::uint64_t kOwned = 1;
  static constexpr std::uint64_t kQueued = 2;
  static constexpr std::uint64_t kSeqOne = 4;

  /// admit() for an operation that is queued.
  Admission admit_queued(Op& op, std::span<const std::size_t> counts, Start start,
                         Clock::duration timeout);
  /// Sets the call's sequence number and tag from the state word it was taken from.
  static void assign_sequence(Op& op, std::uint64_t state);
  /// How far `op` advances the state word: a collective takes a sequence number, a send or
  /// receive none.
  static std::uint64_t sequence_step(const Op& op) noexcept {
    return is_p2p(op.call.kind) ? 0 : kSeqOne;
  }
  /// Appends the operation behind everything queued or running, with its sequence number
  /// and tag. The caller holds mutex_.
  std::shared_ptr<OpWork> enqueue(const Op& op, std::span<const std::size_t> counts,
                                  Clock::duration timeout);
  /// Starts the worker thread unless it runs (caller holds mutex_); Error(Io) on failure.
  void start_worker();
  /// Takes the mesh unless another thread owns it.
  bool claim_mesh() noexcept;
  /// Gives the mesh up; wakes the worker when operations were queued meanwhile.
  void release_mesh() noexcept;
  /// Pops the front operation for the thread that just claimed the mesh (mutex_ held).
  std::shared_ptr<OpWork> pop_front();
  /// Completes what the runner finished (done_), counting it out of active_ first, so that
  /// whoever sees it done may destroy the communicator without it counting as running.
  void complete();

  // The worker thread (worker.cpp).
  void worker_loop();
  /// Waits, with nothing in flight, until an operation can be taken: lazy polls, then
  /// sleep. True when this thread owns the mesh and the queue is not empty, or stopping.
  bool wait_for_work(std::unique_lock<std::mutex>& lock);
  /// Lazy start's polls (lazy_start_ > 0): true when an operation was claimed.
  bool lazy_polls(std::unique_lock<std::mutex>& lock);
  /// Advances the posted sends/recvs while nothing can be taken from the queue.
  void progress_in_flight(std::unique_lock<std::mutex>& lock);
  /// The next queued operation waits for an unmatched receive from any rank (mutex_ held).
  bool held_back() const;
  bool p2p_first() const;

  /// Gives the mesh up without waking the worker (the worker itself).
  void give_up_mesh() noexcept { state_.fetch_and(~kOwned, std::memory_order_release); }

  Runner* runner_ = nullptr;
  std::chrono::microseconds lazy_start_{0};
  std::chrono::nanoseconds spin_time_{0};
  /// The worker's waits (worker only): the period of its lazy polls, and its pause between
  /// polls of the posted sends/recvs.
  std::chrono::microseconds period_{0};
  std::chrono::microseconds pause_{0};

  std::atomic<std::uint64_t> state_{0};
  std::mutex mutex_;
  std::condition_variable worker_cv_;
  /// Signalled when active_ drops to 0 during shutdown.
  std::condition_variable idle_cv_;
  std::deque<std::shared_ptr<OpWork>> queue_;
  std::atomic<bool> stopping_{false};  ///< close() ran: nothing more runs; the worker exits
  /// Lazy start (lazy_start_ > 0): the worker sleeps without a timeout (guarded by mutex_).
  bool worker_asleep_ = false;
  /// Lazy start adapts to the caller: a thread that waits for an operation still pending
  /// sets it, the worker taking one from the queue (nobody was there to run it) clears it,
  /// and while it is clear admit() wakes the worker at once (DDP's buckets, whose futures
  /// are not waited for through Work::wait).
  bool lazy_now_ = true;
  /// Operations taken from the queue so far (guarded by mutex_): a polling worker takes
  /// an operation only when it is the one it saw at the front a whole period earlier.
  std::uint64_t dequeued_ = 0;
  /// Operations queued so far (guarded by mutex_): a polling worker sleeps once a whole
  /// longest period passed without one.
  std::uint64_t submitted_ = 0;
  /// Someone wants the worker to take the queued operations now rather than at its next
  /// lazy poll (guarded by mutex_; a state, so that a notification sent before the worker
  /// waits is not lost): set with every such notification, cleared when the queue empties.
  bool wanted_ = false;
  /// Operations taken from the queue, not yet completed (guarded by mutex_).
  std::size_t active_ = 0;
  /// What the runner finished and complete() has not completed yet: the mesh owner's only.
  Completions done_;
  std::thread worker_;
  /// Ownership biased to the thread that created the communicator. A locked instruction
  /// waits for every store before it, and the last store of a small call is a slot line the
  /// peer is polling: the claim and release of the mesh are a noticeable share of a small
  /// call (docs/benchmarks-small.md). While `biased_to_` names a thread, kOwned stays set on
  /// its behalf, and that thread claims the mesh by setting `bias_busy_` and checking
  /// `bias_revoked_` with a compiler barrier only; any other use of the state word first
  /// revokes the bias for good (unbias(): sets `bias_revoked_`, an asymmetric fence, waits
  /// for `bias_busy_` to clear, gives kOwned up). Null where there are no asymmetric fences
  /// or one rank.
  std::atomic<const void*> biased_to_{nullptr};
  std::atomic<bool> bias_busy_{false};
  std::atomic<bool> bias_revoked_{false};
  std::mutex bias_mutex_;  ///< one revocation at a time
};

inline void Queue::assign_sequence(Op& op, std::uint64_t state) {
  auto& c = op.call;
  c.seq = state / kSeqOne;
  // Point to point does not advance the collective sequence; sender and receiver derive
  // the same tag from the user's tag and the message shape.
  c.tag = algorithms::fingerprint_with(op.shape_print, is_p2p(c.kind) ? op.user_tag : c.seq);
}

inline Admission Queue::admit(Op& op, std::span<const std::size_t> counts, Start start,
                              Clock::duration timeout) {
  if (start == Start::now_if_free) {
    const std::uint64_t step = sequence_step(op);
    if (biased_to_.load(std::memory_order_relaxed) == &detail::this_thread_token) {
      // The mesh is biased to this thread: nothing else touches the state word until it is
      // revoked, and a revocation waits for bias_busy_ to clear.
      bias_busy_.store(true, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      if (!bias_revoked_.load(std::memory_order_relaxed)) {
        const std::uint64_t s = state_.load(std::memory_order_relaxed);
        state_.store(s + step, std::memory_order_relaxed);
        assign_sequence(op, s);
        return Admission(this, Admission::Claim::biased, s / kSeqOne);
      }
      bias_busy_.store(false, std::memory_order_release);
    }
    // Another thread's bias, or this one's being revoked.
    if (biased_to_.load(std::memory_order_acquire) != nullptr) unbias();
    // Nothing queued or running: claim the mesh and the sequence number in one step, without
    // a lock.
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while ((s & (kOwned | kQueued)) == 0) {
      if (state_.compare_exchange_weak(s, (s + step) | kOwned, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        assign_sequence(op, s);
        return Admission(this, Admission::Claim::owned, s / kSeqOne);
      }
    }
  }
  return admit_queued(op, counts, start, timeout);
}

inline void Admission::release() noexcept {
  if (claim_ == Claim::biased) {
    queue_->bias_busy_.store(false, std::memory_order_release);
  } else {
    queue_->release_mesh();
  }
}

}  // namespace tandem::comm
