#pragma once
// The last operations of a communicator (kind, shape, algorithm, start, outcome), kept in a
// fixed ring and written to the log when an operation fails, so the failure report shows
// what ran just before it and when. Successful operations record no end time: a clock read
// costs a tenth of a small allreduce over shared memory; failed ones do. Only the thread that
// owns the mesh writes it: operations run one at a time, and the executor's state word hands
// the mesh over (acquire on claiming it, release on giving it up), so no lock is needed.

#include <tandem/communicator.hpp>
#include <tandem/types.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::comm {

class FlightRecorder {
 public:
  enum class Outcome : std::uint8_t { running, ok, failed };

  struct Entry {
    CollectiveKind kind = CollectiveKind::barrier;
    DataType dtype = DataType::f32;
    Outcome outcome = Outcome::running;
    int root = 0;
    std::uint64_t seq = 0;
    std::size_t count = 0;
    std::string_view algorithm;  // names of registered algorithms live as long as the process
    Clock::time_point start{};
    Clock::time_point end{};  ///< failed operations only
  };

  static constexpr std::size_t kCapacity = 32;

  /// Starts a record; returns its ticket for finish().
  std::uint64_t start(CollectiveKind kind, DataType dtype, std::size_t count, int root,
                      std::uint64_t seq, std::string_view algorithm,
                      Clock::time_point now) noexcept {
    entries_[recorded_ % kCapacity] =
        Entry{kind, dtype, Outcome::running, root, seq, count, algorithm, now, {}};
    return recorded_++;
  }
  /// Ends the record of `ticket` (unless newer records overwrote it); a non-empty `ran`
  /// names the algorithm that ran it when the chosen one handed it on (a direct one's ring).
  void finish(std::uint64_t ticket, bool ok, std::string_view ran = {}) noexcept {
    if (ticket + kCapacity <= recorded_) return;
    Entry& e = entries_[ticket % kCapacity];
    e.outcome = ok ? Outcome::ok : Outcome::failed;
    if (!ran.empty()) e.algorithm = ran;
    if (!ok) e.end = Clock::now();
  }

  /// "last 3 of 3 operations (start relative to now): #0 allreduce f32 x 8 ring -2.1 ms ok |
  /// ... | #2 allreduce f32 x 8 ring -1.0 ms FAILED after 1000.2 ms".
  std::string dump(std::size_t max_entries = 12) const;
  /// The last operations, oldest first, one line each with wall-clock start times:
  /// "#12 allreduce f32 x 1024 ring 12:00:01.250 FAILED after 1000.2 ms".
  std::vector<std::string> lines(std::size_t max_entries = 16) const;

 private:
  std::array<Entry, kCapacity> entries_{};
  std::uint64_t recorded_ = 0;
};

}  // namespace tandem::comm
