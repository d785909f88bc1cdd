#include "comm/flight_recorder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace tandem::comm {

std::string FlightRecorder::dump(std::size_t max_entries) const {
  const auto now = Clock::now();
  const auto ms = [](Clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  const std::uint64_t n = std::min<std::uint64_t>({recorded_, kCapacity, max_entries});
  std::string s = fmt::format("last {} of {} operations (start relative to now):", n, recorded_);
  for (std::uint64_t i = recorded_ - n; i < recorded_; ++i) {
    const Entry& e = entries_[static_cast<std::size_t>(i % kCapacity)];
    const bool p2p = e.kind == CollectiveKind::send || e.kind == CollectiveKind::recv;
    s += fmt::format(" {}{}{}", i == recorded_ - n ? "" : "| ",
                     p2p ? "" : fmt::format("#{} ", e.seq), to_string(e.kind));
    if (p2p) s += fmt::format(" peer {}", e.root);
    s += fmt::format(" {} x {} {} {:.3f} ms", to_string(e.dtype), e.count, e.algorithm,
                     -ms(now - e.start));
    switch (e.outcome) {
      case Outcome::running:
        s += " running";
        break;
      case Outcome::ok:
        s += " ok";
        break;
      case Outcome::failed:
        s += fmt::format(" FAILED after {:.3f} ms", ms(e.end - e.start));
        break;
    }
  }
  return s;
}

}  // namespace tandem::comm
