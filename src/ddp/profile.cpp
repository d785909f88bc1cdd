#include <tandem/step_profile.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <span>

namespace tandem::ddp {
namespace {

using SteadyClock = std::chrono::steady_clock;

double seconds_since(SteadyClock::time_point t) noexcept {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// What each rank contributes to report(): steps, then ms per step of step, data, compute and
// the Reducer's wait.
constexpr std::size_t kFields = 5;

// A cause dominates from this share of the mean step on.
constexpr double kDominant = 0.15;

double percent(double part, double whole) noexcept {
  return whole > 0 ? 100.0 * part / whole : 0.0;
}

}  // namespace

StepProfiler::StepProfiler(const Reducer* reducer) noexcept : reducer_(reducer) {}

StepProfiler::Scope::Scope(StepProfiler& p, StepPart part) noexcept
    : p_(p),
      part_(part),
      start_(SteadyClock::now()),
      exposed_start_(p.reducer_ != nullptr ? p.reducer_->exposed_seconds() : 0.0) {}

StepProfiler::Scope::~Scope() {
  double s = seconds_since(start_);
  if (p_.reducer_ != nullptr) s -= p_.reducer_->exposed_seconds() - exposed_start_;
  (part_ == StepPart::data ? p_.step_data_s_ : p_.step_compute_s_) += std::max(0.0, s);
}

void StepProfiler::begin_step() noexcept {
  step_start_ = SteadyClock::now();
  step_data_s_ = step_compute_s_ = 0;
  exposed_at_start_ = reducer_ != nullptr ? reducer_->exposed_seconds() : 0.0;
}

void StepProfiler::end_step() {
  step_s_ += seconds_since(step_start_);
  data_s_ += step_data_s_;
  compute_s_ += step_compute_s_;
  if (reducer_ != nullptr) exposed_s_ += reducer_->exposed_seconds() - exposed_at_start_;
  ++steps_;
}

void StepProfiler::reset() noexcept {
  data_s_ = compute_s_ = exposed_s_ = step_s_ = 0;
  steps_ = 0;
}

StepReport StepProfiler::report(Communicator& comm) const {
  const double n = steps_ > 0 ? static_cast<double>(steps_) : 1.0;
  const double mine[kFields] = {static_cast<double>(steps_), 1e3 * step_s_ / n, 1e3 * data_s_ / n,
                                1e3 * compute_s_ / n, 1e3 * exposed_s_ / n};
  const auto size = static_cast<std::size_t>(comm.size());
  std::vector<double> all(kFields * size);
  comm.allgather(BufferView::of(std::span<const double>(mine)),
                 BufferView::of(std::span<double>(all)));

  StepReport r;
  r.steps = static_cast<std::uint64_t>(all[0]);
  double least_exposed = 0;
  double busiest = -1;
  for (std::size_t i = 0; i < size; ++i) {
    const double* f = &all[i * kFields];
    StepBreakdown b;
    b.rank = static_cast<int>(i);
    b.step_ms = f[1];
    b.data_ms = f[2];
    b.compute_ms = f[3];
    b.exposed_ms = f[4];
    b.other_ms = std::max(0.0, b.step_ms - b.data_ms - b.compute_ms - b.exposed_ms);
    // The rank the others wait for spends the most on its own work.
    const double own = b.data_ms + b.compute_ms + b.other_ms;
    if (own > busiest) {
      busiest = own;
      r.slowest_rank = b.rank;
    }
    least_exposed = i == 0 ? b.exposed_ms : std::min(least_exposed, b.exposed_ms);
    r.ranks.push_back(b);
  }
  // The slowest rank waits only for the communication itself; what the others wait on top of
  // that is waiting for it.
  double step = 0, data = 0, waiting = 0, least_own = busiest, compute = 0;
  for (StepBreakdown& b : r.ranks) {
    b.comm_ms = least_exposed;
    b.waiting_ms = b.exposed_ms - least_exposed;
    step += b.step_ms / static_cast<double>(size);
    data += b.data_ms / static_cast<double>(size);
    compute += b.compute_ms / static_cast<double>(size);
    waiting = std::max(waiting, b.waiting_ms);
    least_own = std::min(least_own, b.data_ms + b.compute_ms + b.other_ms);
  }

  const double shares[3] = {data, waiting, least_exposed};
  const std::size_t top = static_cast<std::size_t>(std::max_element(shares, shares + 3) - shares);
  if (shares[top] < kDominant * step) {
    r.cause = "compute";
    r.verdict = fmt::format(
        "Compute-bound: forward and backward take {:.0f} % of each {:.1f} ms step and "
        "communication is hidden behind them ({:.1f} ms exposed); more ranks divide the work.",
        percent(compute, step), step, least_exposed);
  } else if (top == 0) {
    r.cause = "data_loader";
    r.verdict = fmt::format(
        "The data loader is the bottleneck: each {:.1f} ms step waits {:.1f} ms for data "
        "({:.0f} %). Give the loader more worker threads or a deeper prefetch, or keep decoded "
        "samples in memory.",
        step, data, percent(data, step));
  } else if (top == 1) {
    r.cause = "slowest_rank";
    r.verdict = fmt::format(
        "Rank {} is the slowest: the others wait up to {:.1f} ms of each {:.1f} ms step for it "
        "({:.0f} %), as its data, forward, backward and the rest take {:.1f} ms more than the "
        "fastest rank's. Look for other load on its host, its CPU binding (tandemrun --cpu-bind "
        "core) or uneven batches.",
        r.slowest_rank, waiting, step, percent(waiting, step), busiest - least_own);
  } else {
    r.cause = "communication";
    r.verdict = fmt::format(
        "Communication is not hidden behind backward: {:.1f} ms of each {:.1f} ms step "
        "({:.0f} %) wait for gradients after backward ends. The model is small for its gradient "
        "traffic: a larger batch per rank, gradient accumulation (no_sync), compressed buckets "
        "(fp16_compress) or a faster link help.",
        least_exposed, step, percent(least_exposed, step));
  }
  return r;
}

std::string StepReport::text() const {
  std::string s = fmt::format(
      "where a step's time went, ms per step over {} steps:\n"
      "  rank     step     data  compute     comm  waiting    other\n",
      steps);
  for (const StepBreakdown& b : ranks)
    s += fmt::format("  {:>4} {:>8.2f} {:>8.2f} {:>8.2f} {:>8.2f} {:>8.2f} {:>8.2f}{}\n", b.rank,
                     b.step_ms, b.data_ms, b.compute_ms, b.comm_ms, b.waiting_ms, b.other_ms,
                     b.rank == slowest_rank && cause == "slowest_rank" ? "  (slowest)" : "");
  s += verdict;
  return s;
}

}  // namespace tandem::ddp
