#pragma once
// The monitor of one communicator: a thread that wakes twice a second, publishes this
// rank's progress to the store while it changes, and, when a collective has run longer than
// TANDEM_STALL_WARN, reads every rank's progress and logs who has not entered it. It never
// touches the mesh: the executor hands it the progress through a sequence lock (two stores
// per collective), so the collectives' hot path pays a few nanoseconds for it.
//
// Every store call happens on the monitor's thread, and nobody waits for that thread longer
// than a few seconds: the store may sit behind the same cut link that failed the collective.
// The thread shares ownership of the monitor, so when stop() gives up on it, it finishes
// alone and the monitor goes with it.

#include "comm/diag/progress.hpp"

#include <tandem/communicator.hpp>
#include <tandem/store.hpp>
#include <tandem/types.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace tandem::comm {

class FlightRecorder;

class Monitor : public std::enable_shared_from_this<Monitor> {
 public:
  /// Starts the monitor thread. `store`: the communicator's (prefixed) store. `stall_warn`
  /// zero: no stall report.
  static std::shared_ptr<Monitor> start(std::shared_ptr<store::Store> store, int rank, int size,
                                        std::string name, std::chrono::nanoseconds stall_warn,
                                        SharedTimeout timeout);
  /// Called (on the monitor's thread, never after stop() returned) when the ranks' progress
  /// shows that they are inside the same collective with different calls: a mismatch that
  /// left every rank waiting, which the fingerprints cannot see because no message met a
  /// receive. The communicator poisons itself with it.
  using MismatchHandler = std::function<void(const std::string& what)>;
  void on_mismatch(MismatchHandler handler) {
    std::lock_guard lock(mutex_);
    on_mismatch_ = std::move(handler);
  }
  /// A collective that runs this long makes the monitor compare the ranks' calls (then after
  /// twice as long, and so on).
  static constexpr auto kFirstProbe = std::chrono::seconds(1);
  /// Up to this many ranks every rank reads every rank's record to compare calls, report a
  /// stall or explain a failure. Beyond, ranks 0 and 1 only (N reads each instead of N^2 in
  /// all): a mismatch they find poisons their communicator, and the abort reaches every rank.
  static constexpr int kEveryRankReadsUpTo = 64;
  bool reads_every_record() const noexcept { return size_ <= kEveryRankReadsUpTo || rank_ < 2; }

  /// Use start().
  Monitor(std::shared_ptr<store::Store> store, int rank, int size, std::string name,
          std::chrono::nanoseconds stall_warn, SharedTimeout timeout);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  /// Stops the thread: waits for it up to kStopWait (it may be inside a store call), then
  /// leaves it to finish on its own. Idempotent.
  void stop() noexcept;

  static constexpr auto kStopWait = std::chrono::seconds(2);
  static constexpr auto kPublishWait = std::chrono::seconds(2);

  /// The owner of the mesh enters collective `seq` (started at `start`).
  void entered(CollectiveKind kind, DataType dtype, std::size_t count, int root, std::uint64_t seq,
               Clock::time_point start) noexcept {
    // A repeated call changes only the sequence number (and the coarse start time every few
    // milliseconds): the fields it leaves as they were are not written again (each store
    // costs a small collective, whose last store waits for a line the peer polls), and where
    // the sequence number is all that changes it is stored alone, without the version's two
    // stores: a reader that sees either number sees the fields that describe it.
    const std::uint32_t kind_dtype =
        static_cast<std::uint32_t>(kind) | static_cast<std::uint32_t>(dtype) << 8;
    const Clock::rep since = start.time_since_epoch().count();
    if (kind_.load(std::memory_order_relaxed) == kind_dtype &&
        root_.load(std::memory_order_relaxed) == root &&
        count_.load(std::memory_order_relaxed) == count &&
        start_.load(std::memory_order_relaxed) == since) {
      entered_.store(seq + 1, std::memory_order_relaxed);
      return;
    }
    begin_write();
    update(kind_, kind_dtype);
    update(root_, root);
    update(count_, count);
    update(start_, since);
    entered_.store(seq + 1, std::memory_order_relaxed);
    end_write();
  }
  /// Collective `seq` completed. One store: snapshot() reads it after the sequence-locked
  /// fields and caps it at `entered`.
  void completed(std::uint64_t seq) noexcept { done_.store(seq + 1, std::memory_order_release); }

  /// The communicator failed: has the record with `error` and the flight recorder (null when
  /// the caller does not own it) published, waiting up to kPublishWait for it: the caller is
  /// about to report the error, and the process may exit soon after.
  void publish_failure(const std::string& error, const FlightRecorder* recorder) noexcept;

  /// After a failure: has the monitor thread wait until `deadline` for every rank's failure
  /// record (falling back on its progress record) and diagnose() them; waits for the answer
  /// until `deadline` + kPublishWait, then gives up (nullopt).
  std::optional<std::string> diagnose_failure(Deadline deadline);

  /// This rank's record as of now.
  ProgressRecord snapshot() const;

  /// Store keys (under the communicator's prefix). A rank publishes no progress record until
  /// its progress changes; its address record (setup's) stands for it until then
  /// (ProgressRecord::from_address()).
  static std::string progress_key(int rank);
  static std::string flight_key(int rank);
  static std::string address_key(int rank);

 private:
  // One writer at a time (the thread that owns the mesh; ownership passes with acquire and
  // release), so plain stores suffice: no read-modify-write on the collectives' path.
  void begin_write() noexcept {
    version_.store(written_ + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  void end_write() noexcept {
    written_ += 2;
    version_.store(written_, std::memory_order_release);
  }
  template <class T, class V>
  static void update(std::atomic<T>& field, V value) noexcept {
    if (field.load(std::memory_order_relaxed) != static_cast<T>(value))
      field.store(static_cast<T>(value), std::memory_order_relaxed);
  }

  void run(const ProgressRecord& published);
  /// How long the collective last entered has been running (meaningful while inside it).
  Clock::duration age() const noexcept {
    return Clock::now() - Clock::time_point(Clock::duration(start_.load()));
  }
  void publish(const std::string& key, const std::string& text) noexcept;
  void report_stall(const ProgressRecord& mine);
  /// Every rank's record: its failure record if it published one, else its progress.
  std::vector<std::optional<ProgressRecord>> read_records(const ProgressRecord& mine,
                                                          Deadline deadline);
  void probe_mismatch(const ProgressRecord& mine);
  std::optional<std::string> diagnose_now(Deadline deadline);

  std::shared_ptr<store::Store> store_;
  const int rank_;
  const int size_;
  const std::string name_;
  const std::string host_;
  const std::chrono::nanoseconds stall_warn_;
  const SharedTimeout timeout_;  ///< the communicator's (set_timeout() changes it)
  const std::chrono::milliseconds interval_;

  std::uint64_t written_ = 0;  ///< the writer's copy of version_
  std::atomic<std::uint64_t> version_{0};
  std::atomic<std::uint64_t> entered_{0};
  std::atomic<std::uint64_t> done_{0};
  std::atomic<std::uint32_t> kind_{0};
  std::atomic<int> root_{0};
  std::atomic<std::uint64_t> count_{0};
  std::atomic<Clock::rep> start_{0};

  std::uint64_t warned_ = 0;  ///< the collective (entered) last reported as stalled
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool exited_ = false;
  std::string failure_;                      ///< encoded failure record waiting for the thread
  std::optional<Deadline> diagnosis_until_;  ///< a diagnosis asked of the thread
  std::optional<std::string> diagnosis_;     ///< its answer
  bool diagnosis_done_ = false;
  MismatchHandler on_mismatch_;
  std::uint64_t probed_entered_ = 0;          ///< the collective the probe times refer to
  Clock::duration next_probe_ = kFirstProbe;  ///< age of that collective at the next probe
  bool failure_published_ = false;
  std::thread thread_;
};

}  // namespace tandem::comm
