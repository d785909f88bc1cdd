#pragma once
// The timeline (TANDEM_TRACE=file.json): events in the Chrome Trace Event Format, one process
// track per rank. Each recorder (a communicator, a DDP Reducer) owns a Ring: a preallocated
// array of fixed-size events written by one thread at a time (the thread that owns the
// communicator's mesh, or the one holding the Reducer's lock), so recording takes no lock and
// no allocation: a slot is filled and the head published with one release store. Names and
// string arguments are string_views of text that lives as long as the process (collective,
// dtype, op and algorithm names); they are formatted only when the file is written.
//
// The process's Sink owns the output: it lists the live rings, keeps the rendered events of
// rings already destroyed (bounded) and writes "<file>.rank<N>.json" atomically (temp file +
// rename) when a ring is destroyed, on the first failure of a communicator, at exit and when
// the process is stopped by SIGTERM/SIGINT.
// merge_parts() joins every rank's part into <file> (tandemrun does it when the job ends).

#include <tandem/types.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

namespace tandem::core::trace {

struct Arg {
  enum class Type : std::uint8_t { integer, text, boolean };
  const char* key;
  std::string_view text;  ///< Type::text: must outlive the process's last flush
  std::int64_t number;
  Type type;
};

struct Event {
  static constexpr std::size_t kMaxArgs = 8;
  enum class Shape : std::uint8_t {
    complete,  ///< a span on its lane's thread track ("X")
    async,     ///< a span that may overlap others (posted send/recv): "b"/"e" pair
  };

  /// Rendered "label #number", or "label" when number < 0.
  std::string_view label;
  std::int64_t number;
  const char* category;
  Clock::time_point start;
  Clock::time_point end;
  /// Before `start`: the operation waited in a queue from here (drawn as its own span).
  Clock::time_point queued;
  std::uint32_t error;  ///< 1 + index of the ring's error text; 0: none
  std::uint16_t lane;   ///< thread track within the ring's block
  Shape shape;
  std::uint8_t nargs;
  std::array<Arg, kMaxArgs> args;

  void add(const char* key, std::int64_t v) noexcept {
    if (nargs < kMaxArgs) args[nargs++] = Arg{key, {}, v, Arg::Type::integer};
  }
  void add(const char* key, std::string_view v) noexcept {
    if (nargs < kMaxArgs) args[nargs++] = Arg{key, v, 0, Arg::Type::text};
  }
  void add_flag(const char* key, bool v) noexcept {
    if (nargs < kMaxArgs) args[nargs++] = Arg{key, {}, v ? 1 : 0, Arg::Type::boolean};
  }
};
static_assert(std::is_trivially_copyable_v<Event> && std::is_trivially_destructible_v<Event>);

class Sink;

/// One recorder's events: the last `capacity` of them. Written by one thread at a time.
class Ring {
 public:
  Ring(Sink& sink, int pid, int tid_base, std::size_t capacity, std::string lane0_name);
  /// Hands the events to the sink (which writes the file).
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  /// The slot of the next event, cleared. Fill it, then commit().
  Event& next() noexcept {
    // A slot is constructed when first used, so a ring's memory is committed as it fills.
    Event& e = head_ < slots_ ? *std::construct_at(events_ + head_)
                              : events_[static_cast<std::size_t>(head_ % slots_)];
    e.nargs = 0;
    e.error = 0;
    e.lane = 0;
    e.number = -1;
    e.shape = Event::Shape::complete;
    e.queued = {};
    e.category = "";
    return e;
  }
  void commit() noexcept { published_.store(++head_, std::memory_order_release); }
  /// An operation that has started: the slot from next(), filled but for its end, is shown
  /// as unfinished if the part is written (a stop signal) before close() commits it.
  void mark_open() noexcept { open_.store(true, std::memory_order_release); }
  /// The event mark_open() left open (to add what was learnt while it ran).
  Event& open_event() noexcept { return events_[static_cast<std::size_t>(head_ % slots_)]; }
  /// Ends the open event at `end` (a non-empty `error` marks it failed) and commits it.
  void close(Clock::time_point end, std::string_view error = {}) {
    Event& e = open_event();
    e.end = end;
    if (!error.empty()) set_error(e, error);
    open_.store(false, std::memory_order_relaxed);
    commit();
  }
  /// Stores a failure's text for event.error (failure path only: takes a lock).
  void set_error(Event& e, std::string_view text);
  /// Names thread track `lane` ("ddp bucket 3"); not on a hot path.
  void name_lane(std::uint16_t lane, std::string name);

  int pid() const noexcept { return pid_; }
  Sink& sink() const noexcept { return sink_; }
  std::uint64_t recorded() const noexcept { return published_.load(std::memory_order_acquire); }

  /// Appends the JSON lines of the events still held (oldest first) and of the lane names.
  void render(std::vector<std::string>& events, std::vector<std::string>& metadata) const;

 private:
  Sink& sink_;
  const int pid_;
  const int tid_base_;
  const std::uint64_t capacity_;
  /// One slot more than the events kept: the slot being filled never holds one of them, so
  /// render() can read a live ring while its writer goes on.
  const std::uint64_t slots_;
  std::unique_ptr<std::byte[]> storage_;
  Event* events_;
  std::uint64_t head_ = 0;  ///< the writer's count
  std::atomic<std::uint64_t> published_{0};
  std::atomic<bool> open_{false};
  mutable std::mutex mutex_;         ///< errors_ and lanes_
  std::vector<std::string> errors_;  ///< the last 256 texts; Event::error counts all of them
  std::size_t errors_dropped_ = 0;
  std::vector<std::string> lanes_;
};

/// The process's output. Thread-safe.
class Sink {
 public:
  /// The sink when TANDEM_TRACE names a file, else nullptr. Reads the settings (not for a hot
  /// path: communicators and Reducers call it once, at construction).
  static Sink* get();

  /// Sets the rank that names this process's part (the first world communicator's).
  void set_rank(int rank);
  /// This process's rank as set, or -1.
  int rank() const;
  /// A new ring on process track `pid`, its first thread track named `name`. Events per ring
  /// are bounded by TANDEM_TRACE_EVENTS.
  std::unique_ptr<Ring> open(int pid, std::string name);
  /// Writes the part file now (atomically). Never throws; logs a warning on failure.
  void flush() noexcept;
  /// "<file>.rank<N>.json".
  std::filesystem::path part_path() const;
  /// Steady clock to nanoseconds since the epoch (wall clock, comparable across ranks).
  std::int64_t wall_ns(Clock::time_point t) const noexcept;

  Sink(std::filesystem::path file, std::size_t capacity);

 private:
  /// A rank stopped with SIGTERM or SIGINT (tandemrun stops the others when one fails) still
  /// writes its part: unless the program handles those signals itself, a handler wakes a
  /// thread that writes the part and then lets the signal end the process as it would have.
  void watch_stop_signals();
  friend class Ring;
  void attach(Ring* ring);
  void retire(Ring* ring) noexcept;
  std::string render_locked() const;
  std::filesystem::path part_path_locked() const;

  const std::filesystem::path file_;
  const std::size_t capacity_;
  const std::int64_t offset_ns_;  ///< system_clock - steady_clock, read once
  mutable std::mutex mutex_;
  int rank_ = -1;
  int next_block_ = 0;
  std::vector<Ring*> live_;
  std::deque<std::string> retired_;  ///< rendered events of destroyed rings, bounded
  std::vector<std::string> metadata_;
  std::vector<int> pids_;    ///< process tracks named so far
  std::thread stop_writer_;  ///< the process's sink is never destroyed: runs until exit
};

/// First and last line of a part file; every line between them is one trace event.
inline constexpr std::string_view kPartHeader = R"({"traceEvents":[)";
inline constexpr std::string_view kPartFooter = R"(],"displayTimeUnit":"ms"})";

/// JSON string literal of `text` (quotes and escapes included).
std::string json_quote(std::string_view text);

/// The parts of `file` ("<file>.rank<N>.json"), sorted by rank.
std::vector<std::filesystem::path> find_parts(const std::filesystem::path& file);
/// Joins the parts of `file` into `file` (atomically) and, when `remove_parts`, deletes them.
/// The merged timestamps count from the first event (otherData.ts_base_unix_us holds it).
/// Returns how many parts were merged (0: none found, `file` untouched). Throws
/// Error(Io) when a part cannot be read or is not a part written by tandem.
std::size_t merge_parts(const std::filesystem::path& file, bool remove_parts);

}  // namespace tandem::core::trace
