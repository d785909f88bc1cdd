#include "core/trace.hpp"

#include "core/net.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/settings.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <memory>
#include <new>
#include <pthread.h>
#include <system_error>
#include <unistd.h>

namespace tandem::core::trace {

namespace {

// Thread tracks of one ring: tid = base + lane.
constexpr int kTidsPerRing = 1000;
// Rendered lines kept per event of capacity for destroyed rings (a queued or async event
// takes two or three).
constexpr std::size_t kLinesPerEvent = 2;

std::int64_t realtime_offset_ns() {
  const auto wall = std::chrono::system_clock::now();
  const auto mono = Clock::now();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(wall.time_since_epoch()).count() -
         std::chrono::duration_cast<std::chrono::nanoseconds>(mono.time_since_epoch()).count();
}

}  // namespace

// ---- Ring ------------------------------------------------------------------------------------

Ring::Ring(Sink& sink, int pid, int tid_base, std::size_t capacity, std::string lane0_name)
    : sink_(sink),
      pid_(pid),
      tid_base_(tid_base),
      capacity_(capacity),
      slots_(capacity + 1),
      storage_(std::make_unique_for_overwrite<std::byte[]>(slots_ * sizeof(Event))),
      events_(reinterpret_cast<Event*>(storage_.get())),
      lanes_{std::move(lane0_name)} {}

Ring::~Ring() {
  sink_.retire(this);
}

void Ring::set_error(Event& e, std::string_view text) {
  std::lock_guard lock(mutex_);
  // Bounded like the events: after a failure every later operation fails with the same text.
  if (!errors_.empty() && errors_.back() == text) {
    e.error = static_cast<std::uint32_t>(errors_dropped_ + errors_.size());
    return;
  }
  if (errors_.size() >= 256) {
    errors_.erase(errors_.begin());
    ++errors_dropped_;
  }
  errors_.emplace_back(text);
  e.error = static_cast<std::uint32_t>(errors_dropped_ + errors_.size());
}

void Ring::name_lane(std::uint16_t lane, std::string name) {
  std::lock_guard lock(mutex_);
  if (lanes_.size() <= lane) lanes_.resize(static_cast<std::size_t>(lane) + 1);
  lanes_[lane] = std::move(name);
}

// ---- Sink ------------------------------------------------------------------------------------

Sink::Sink(std::filesystem::path file, std::size_t capacity)
    : file_(std::move(file)), capacity_(capacity), offset_ns_(realtime_offset_ns()) {}

Sink* Sink::get() {
  const std::string file = settings::get_string("TANDEM_TRACE");
  if (file.empty()) return nullptr;
  // Never destroyed: a communicator destroyed during static destruction still reaches it.
  alignas(Sink) static unsigned char storage[sizeof(Sink)];
  static Sink* sink = nullptr;
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  if (sink == nullptr) {
    const auto events = settings::get_int("TANDEM_TRACE_EVENTS");
    TANDEM_CHECK_ARG(events >= 16 && events <= (std::int64_t{1} << 26),
                     "TANDEM_TRACE_EVENTS={} is out of range (16 to 67108864; default 100000)",
                     events);
    std::error_code ec;
    auto path = std::filesystem::absolute(file, ec);
    if (ec) path = file;
    sink = std::construct_at(reinterpret_cast<Sink*>(storage), std::move(path),
                             static_cast<std::size_t>(events));
    // Rings still alive at exit (a communicator never destroyed) are written then.
    std::atexit([] { sink->flush(); });
    sink->watch_stop_signals();
  }
  return sink;
}

namespace {

int g_stop_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int sig) {
  const int saved = errno;
  const auto b = static_cast<unsigned char>(sig);
  [[maybe_unused]] const auto n = ::write(g_stop_pipe[1], &b, 1);
  errno = saved;
}

// A forked child (a data-loading worker) has no writer thread, and its signals must not wake
// the parent's through the shared pipe: it gets the default dispositions back.
extern "C" void reset_in_child() {
  for (int sig : {SIGTERM, SIGINT}) {
    struct sigaction now {};
    if (::sigaction(sig, nullptr, &now) == 0 && now.sa_handler == on_stop_signal)
      ::signal(sig, SIG_DFL);
  }
}

}  // namespace

void Sink::watch_stop_signals() {
  std::vector<int> mine;
  for (int sig : {SIGTERM, SIGINT}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL &&
        (old.sa_flags & SA_SIGINFO) == 0)
      mine.push_back(sig);
  }
  if (mine.empty() || ::pipe2(g_stop_pipe, O_CLOEXEC) != 0) return;
  try {
    stop_writer_ = std::thread([this] {
      unsigned char sig = 0;
      while (::read(g_stop_pipe[0], &sig, 1) != 1) {
        if (errno != EINTR) return;
      }
      flush();
      ::signal(sig, SIG_DFL);
      ::raise(sig);
    });
  } catch (const std::system_error&) {
    return;  // no thread: the part is written at the usual points only
  }
  ::pthread_atfork(nullptr, nullptr, reset_in_child);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : mine) ::sigaction(sig, &sa, nullptr);
}

void Sink::set_rank(int rank) {
  std::lock_guard lock(mutex_);
  if (rank_ < 0) rank_ = rank;
}

int Sink::rank() const {
  std::lock_guard lock(mutex_);
  return rank_;
}

std::filesystem::path Sink::part_path() const {
  std::lock_guard lock(mutex_);
  return part_path_locked();
}

std::filesystem::path Sink::part_path_locked() const {
  const int r = rank_;
  auto name = file_.filename().string();
  name += r >= 0 ? fmt::format(".rank{}.json", r) : fmt::format(".pid{}.json", ::getpid());
  return file_.parent_path() / name;
}

std::int64_t Sink::wall_ns(Clock::time_point t) const noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count() +
         offset_ns_;
}

std::unique_ptr<Ring> Sink::open(int pid, std::string name) {
  int block = 0;
  {
    std::lock_guard lock(mutex_);
    block = next_block_++;
    if (std::find(pids_.begin(), pids_.end(), pid) == pids_.end()) {
      pids_.push_back(pid);
      metadata_.push_back(
          fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"tid":0,"args":{{"name":{}}}}})",
                      pid, json_quote(fmt::format("rank {} ({})", pid, net::local_host_name()))));
      metadata_.push_back(fmt::format(
          R"({{"name":"process_sort_index","ph":"M","pid":{},"tid":0,"args":{{"sort_index":{}}}}})",
          pid, pid));
    }
  }
  auto ring =
      std::make_unique<Ring>(*this, pid, 1 + block * kTidsPerRing, capacity_, std::move(name));
  attach(ring.get());
  return ring;
}

void Sink::attach(Ring* ring) {
  std::lock_guard lock(mutex_);
  live_.push_back(ring);
}

void Sink::retire(Ring* ring) noexcept {
  try {
    std::vector<std::string> events;
    std::vector<std::string> metadata;
    ring->render(events, metadata);
    {
      std::lock_guard lock(mutex_);
      live_.erase(std::remove(live_.begin(), live_.end(), ring), live_.end());
      for (auto& m : metadata) metadata_.push_back(std::move(m));
      for (auto& e : events) retired_.push_back(std::move(e));
      while (retired_.size() > capacity_ * kLinesPerEvent) retired_.pop_front();
    }
    flush();
  } catch (...) {
    std::lock_guard lock(mutex_);
    live_.erase(std::remove(live_.begin(), live_.end(), ring), live_.end());
  }
}

std::string Sink::render_locked() const {
  std::vector<std::string> lines(metadata_.begin(), metadata_.end());
  std::vector<std::string> events(retired_.begin(), retired_.end());
  for (const Ring* ring : live_) ring->render(events, lines);
  for (auto& e : events) lines.push_back(std::move(e));
  std::string out(kPartHeader);
  out += '\n';
  for (std::size_t i = 0; i < lines.size(); ++i) {
    out += lines[i];
    out += i + 1 < lines.size() ? ",\n" : "\n";
  }
  out += kPartFooter;
  out += '\n';
  return out;
}

void Sink::flush() noexcept {
  try {
    std::lock_guard lock(mutex_);
    const std::string text = render_locked();
    const auto path = part_path_locked();
    auto tmp = path;
    tmp += fmt::format(".tmp{}", ::getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << text;
      out.flush();
      if (!out) {
        TANDEM_WARN(coll, "timeline: cannot write {} (TANDEM_TRACE): {}", tmp.string(),
                    std::generic_category().message(errno));
        std::filesystem::remove(tmp);
        return;
      }
    }
    std::filesystem::rename(tmp, path);
    TANDEM_DETAIL(coll, "timeline: wrote {} ({} bytes)", path.string(), text.size());
  } catch (const std::exception& e) {
    try {
      TANDEM_WARN(coll, "timeline: cannot write the trace (TANDEM_TRACE): {}", e.what());
    } catch (...) {
    }
  }
}

}  // namespace tandem::core::trace
