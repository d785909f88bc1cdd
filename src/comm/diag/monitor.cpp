#include "comm/diag/monitor.hpp"

#include "comm/diag/flight_recorder.hpp"
#include "core/net.hpp"
#include "transport/bootstrap.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unistd.h>
#include <vector>

namespace tandem::comm {
namespace {

std::int64_t wall_ms_of(Clock::rep steady) {
  const auto age = Clock::now() - Clock::time_point(Clock::duration(steady));
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             (std::chrono::system_clock::now() - age).time_since_epoch())
      .count();
}

std::chrono::milliseconds interval_for(std::chrono::nanoseconds stall_warn) {
  // Often enough that the mismatch probe (after Monitor::kFirstProbe) and the stall report
  // see fresh records; never busier than 20 Hz.
  const std::chrono::milliseconds most(500);
  if (stall_warn.count() <= 0) return most;
  return std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(stall_warn / 4),
                    std::chrono::milliseconds(50), most);
}

}  // namespace

std::shared_ptr<Monitor> Monitor::start(std::shared_ptr<store::Store> store, int rank, int size,
                                        std::string name, std::chrono::nanoseconds stall_warn,
                                        SharedTimeout timeout) {
  auto m = std::make_shared<Monitor>(std::move(store), rank, size, std::move(name), stall_warn,
                                     std::move(timeout));
  // No first record is published: until a rank has one, its address record stands for it
  // (read_records()), which says the same (its host and pid, no collective yet) at no store
  // request of its own.
  const ProgressRecord first = m->snapshot();
  m->thread_ = std::thread([self = m, first] { self->run(first); });
  return m;
}

Monitor::Monitor(std::shared_ptr<store::Store> store, int rank, int size, std::string name,
                 std::chrono::nanoseconds stall_warn, SharedTimeout timeout)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      name_(std::move(name)),
      host_(net::local_host_name()),
      stall_warn_(stall_warn),
      timeout_(std::move(timeout)),
      interval_(interval_for(stall_warn)) {}

Monitor::~Monitor() {
  // The last owner is either stop()'s caller after a join, or the detached thread itself.
  if (thread_.joinable()) thread_.detach();
}

void Monitor::stop() noexcept {
  std::unique_lock lock(mutex_);
  stop_ = true;
  cv_.notify_all();
  if (!thread_.joinable()) return;
  if (cv_.wait_for(lock, kStopWait, [this] { return exited_; })) {
    lock.unlock();
    thread_.join();
  } else {
    TANDEM_DETAIL(coll, "communicator '{}': the monitor is inside a store call; leaving it", name_);
    thread_.detach();
  }
}

std::string Monitor::progress_key(int rank) {
  return fmt::format("progress/{}", rank);
}
std::string Monitor::flight_key(int rank) {
  return fmt::format("flight/{}", rank);
}
std::string Monitor::address_key(int rank) {
  return fmt::format("{}{}", transport::kAddressPrefix, rank);
}

ProgressRecord Monitor::snapshot() const {
  ProgressRecord r;
  r.rank = rank_;
  r.host = host_;
  r.pid = static_cast<int>(::getpid());
  Clock::rep start = 0;
  for (;;) {
    const auto v1 = version_.load(std::memory_order_acquire);
    if ((v1 & 1) != 0) {  // a write is in progress (a few nanoseconds, unless preempted)
      std::this_thread::yield();
      continue;
    }
    r.entered = entered_.load(std::memory_order_relaxed);
    const auto k = kind_.load(std::memory_order_relaxed);
    r.kind = static_cast<CollectiveKind>(k & 0xff);
    r.dtype = static_cast<DataType>((k >> 8) & 0xff);
    r.root = root_.load(std::memory_order_relaxed);
    r.count = count_.load(std::memory_order_relaxed);
    start = start_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (version_.load(std::memory_order_relaxed) == v1) break;
  }
  r.done = std::min(done_.load(std::memory_order_acquire), r.entered);
  r.since_ms = start != 0 ? wall_ms_of(start) : 0;
  return r;
}

void Monitor::publish(const std::string& key, const std::string& text) noexcept {
  try {
    store_->set(key, text);
  } catch (const std::exception& e) {
    TANDEM_DETAIL(coll, "communicator '{}': could not publish {}: {}", name_, key, e.what());
  }
}

void Monitor::publish_failure(const std::string& error, const FlightRecorder* recorder) noexcept {
  try {
    ProgressRecord r = snapshot();
    r.error = error;
    if (recorder != nullptr) r.recent = recorder->lines();
    std::unique_lock lock(mutex_);
    if (stop_) return;
    failure_ = r.encode();
    cv_.notify_all();
    cv_.wait_for(lock, kPublishWait, [this] { return failure_published_ || exited_; });
  } catch (...) {
    // Out of memory while failing: the error itself still reaches the caller.
  }
}

void Monitor::run(const ProgressRecord& published) {
  std::uint64_t published_entered = published.entered, published_done = published.done;
  std::uint64_t seen_entered = published.entered, seen_done = published.done;
  const auto called = [this] { return stop_ || !failure_.empty() || diagnosis_until_.has_value(); };
  std::unique_lock lock(mutex_);
  // The address record stands for the first record: the first turn waits an interval.
  cv_.wait_for(lock, interval_, called);
  while (!stop_) {
    std::string failure = std::move(failure_);
    failure_.clear();
    lock.unlock();
    if (!failure.empty()) {
      publish(flight_key(rank_), failure);
      lock.lock();
      failure_published_ = true;
      cv_.notify_all();
      lock.unlock();
    }
    lock.lock();
    const auto until = diagnosis_until_;
    diagnosis_until_.reset();
    lock.unlock();
    if (until) {
      auto what = diagnose_now(*until);
      lock.lock();
      diagnosis_ = std::move(what);
      diagnosis_done_ = true;
      cv_.notify_all();
      lock.unlock();
    }
    // What diagnoses read is where a rank stopped: a record is published once it held for a
    // whole interval, or at once for a collective in progress for half an interval. A rank
    // that moves on between two looks is not reported on every look: each store round trip
    // (and the store server answering it) takes a CPU from a rank on a machine with as many
    // ranks as cores (docs/benchmarks-small.md).
    const ProgressRecord mine = snapshot();
    const bool held = mine.entered == seen_entered && mine.done == seen_done;
    seen_entered = mine.entered;
    seen_done = mine.done;
    const bool settled = held || (mine.inside() && age() >= interval_ / 2);
    if (settled && (mine.entered != published_entered || mine.done != published_done)) {
      publish(progress_key(rank_), mine.encode());
      published_entered = mine.entered;
      published_done = mine.done;
    }
    if (mine.inside() && reads_every_record()) probe_mismatch(mine);
    if (stall_warn_.count() > 0 && mine.inside() && mine.entered != warned_) {
      if (age() >= stall_warn_) {
        warned_ = mine.entered;
        try {
          report_stall(mine);
        } catch (const std::exception& e) {
          TANDEM_WARN(coll, "communicator '{}': {} has not completed after {:g} s ({})", name_,
                      mine.current(), std::chrono::duration<double>(stall_warn_).count(), e.what());
        }
      }
    }
    lock.lock();
    cv_.wait_for(lock, interval_, called);
  }
  exited_ = true;
  cv_.notify_all();
}

std::optional<std::string> Monitor::diagnose_failure(Deadline deadline) {
  std::unique_lock lock(mutex_);
  if (stop_ || exited_) return std::nullopt;
  diagnosis_until_ = deadline;
  diagnosis_done_ = false;
  cv_.notify_all();
  // The store may be out of reach (behind the link that failed): never wait on it for long.
  cv_.wait_until(lock, std::max(deadline, Clock::now()) + kPublishWait,
                 [this] { return diagnosis_done_ || exited_; });
  if (!diagnosis_done_) return std::nullopt;
  diagnosis_done_ = false;
  return std::move(diagnosis_);
}

std::optional<std::string> Monitor::diagnose_now(Deadline deadline) {
  if (!reads_every_record()) return std::nullopt;
  try {
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(flight_key(r));
    try {
      store_->wait(keys, deadline);
    } catch (const Error&) {
      // Ranks outside the collective never fail on their own: use their progress.
    }
    const auto records = read_records(snapshot(), std::max(deadline, deadline_in(kStopWait)));
    return diagnose(records);
  } catch (const std::exception& e) {
    TANDEM_DETAIL(coll, "communicator '{}': no diagnosis: {}", name_, e.what());
    return std::nullopt;
  }
}

std::vector<std::optional<ProgressRecord>> Monitor::read_records(const ProgressRecord& mine,
                                                                 Deadline deadline) {
  std::vector<std::optional<ProgressRecord>> records(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) {
      records[static_cast<std::size_t>(r)] = mine;
      continue;
    }
    for (const std::string& key : {flight_key(r), progress_key(r)}) {
      const std::string one[] = {key};
      if (!store_->check(one)) continue;
      records[static_cast<std::size_t>(r)] = ProgressRecord::decode(store_->get(key, deadline));
      break;
    }
    if (records[static_cast<std::size_t>(r)]) continue;
    // No record of its own yet: the rank stands for none entered, if it got as far as setup.
    const std::string address[] = {address_key(r)};
    if (store_->check(address))
      records[static_cast<std::size_t>(r)] =
          ProgressRecord::from_address(store_->get(address[0], deadline), r);
  }
  return records;
}

void Monitor::probe_mismatch(const ProgressRecord& mine) {
  if (mine.entered != probed_entered_) {
    probed_entered_ = mine.entered;
    next_probe_ = kFirstProbe;
  }
  if (age() < next_probe_) return;
  next_probe_ *= 2;
  {
    std::lock_guard lock(mutex_);
    if (!on_mismatch_ || stop_) return;
  }
  try {
    bool disagree = false;
    const auto what =
        diagnose(read_records(mine, deadline_in(std::chrono::seconds(5))), {}, &disagree);
    if (!disagree || !what) return;
    std::lock_guard lock(mutex_);
    if (on_mismatch_ && !stop_) on_mismatch_(*what);
  } catch (const std::exception& e) {
    TANDEM_DETAIL(coll, "communicator '{}': could not compare the ranks' calls: {}", name_,
                  e.what());
  }
}

void Monitor::report_stall(const ProgressRecord& mine) {
  std::string what = "ranks 0 and 1 say which ranks are missing";
  if (reads_every_record()) {
    const auto records = read_records(mine, deadline_in(std::chrono::seconds(5)));
    what = diagnose(records).value_or("no rank reported being inside it");
  }
  // diagnose() names the collective first; this line already has.
  if (const std::string head = mine.current() + ": "; what.starts_with(head))
    what.erase(0, head.size());
  TANDEM_WARN(coll,
              "communicator '{}': {} has not completed after {:g} s (TANDEM_STALL_WARN): {}. It "
              "fails at TANDEM_TIMEOUT ({:g} s after it started) unless the missing ranks arrive",
              name_, mine.current(), std::chrono::duration<double>(stall_warn_).count(), what,
              std::chrono::duration<double>(timeout_.get()).count());
}

}  // namespace tandem::comm
