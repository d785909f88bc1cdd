#include "comm/diag/flight_recorder.hpp"

#include "comm/diag/progress.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace tandem::comm {

namespace {

// "#12 allreduce f32 x 1024 ring <when> ok" / "send peer 3 ... FAILED after 2.5 ms".
std::string describe_entry(const FlightRecorder::Entry& e, std::string_view when) {
  const bool p2p = e.kind == CollectiveKind::send || e.kind == CollectiveKind::recv;
  std::string s = !p2p         ? fmt::format("#{} {}", e.seq, to_string(e.kind))
                  : e.root < 0 ? fmt::format("{} from any peer", to_string(e.kind))
                               : fmt::format("{} peer {}", to_string(e.kind), e.root);
  s += fmt::format(" {} x {} {} {}", to_string(e.dtype), e.count, e.algorithm, when);
  switch (e.outcome) {
    case FlightRecorder::Outcome::running:
      return s + " running";
    case FlightRecorder::Outcome::ok:
      return s + " ok";
    case FlightRecorder::Outcome::failed:
      return s + fmt::format(" FAILED after {:.3f} ms",
                             std::chrono::duration<double, std::milli>(e.end - e.start).count());
  }
  return s;
}

}  // namespace

std::string FlightRecorder::dump(std::size_t max_entries) const {
  const auto now = Clock::now();
  const std::uint64_t n = std::min<std::uint64_t>({recorded_, kCapacity, max_entries});
  std::string s = fmt::format("last {} of {} operations (start relative to now):", n, recorded_);
  for (std::uint64_t i = recorded_ - n; i < recorded_; ++i) {
    const Entry& e = entries_[static_cast<std::size_t>(i % kCapacity)];
    const double ago = std::chrono::duration<double, std::milli>(now - e.start).count();
    s += fmt::format(" {}{}", i == recorded_ - n ? "" : "| ",
                     describe_entry(e, fmt::format("{:.3f} ms", -ago)));
  }
  return s;
}

std::vector<std::string> FlightRecorder::lines(std::size_t max_entries) const {
  const auto now = Clock::now();
  const auto wall_now = std::chrono::system_clock::now();
  const std::uint64_t n = std::min<std::uint64_t>({recorded_, kCapacity, max_entries});
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(n));
  for (std::uint64_t i = recorded_ - n; i < recorded_; ++i) {
    const Entry& e = entries_[static_cast<std::size_t>(i % kCapacity)];
    const auto wall = std::chrono::duration_cast<std::chrono::milliseconds>(
                          (wall_now - (now - e.start)).time_since_epoch())
                          .count();
    out.push_back(describe_entry(e, format_wall_ms(wall)));
  }
  return out;
}

}  // namespace tandem::comm
