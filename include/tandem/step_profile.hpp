#pragma once
// Where a training step's time goes, and why a run is not faster: a rank times the parts of
// each step (waiting for data, forward and backward, the rest) and the Reducer reports how
// long finalize_backward() waited for its buckets; report() gathers every rank's averages,
// splits that wait into communication not hidden behind backward (what the slowest rank
// waited) and waiting for the slowest rank (what the others waited on top), names the slowest
// rank, and says in one sentence which cause dominates and what to try.
//
//   tandem::ddp::StepProfiler prof(&reducer);
//   for (...) {
//     prof.begin_step();
//     { auto t = prof.time(tandem::ddp::StepPart::data); batch = loader.next(); }
//     { auto t = prof.time(tandem::ddp::StepPart::compute); forward_backward(batch); }
//     reducer.finalize_backward();   // its wait is read from the Reducer
//     prof.end_step();               // the rest of the step counts as "other"
//   }
//   std::puts(prof.report(comm).text().c_str());   // collective

#include <tandem/communicator.hpp>
#include <tandem/ddp.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::ddp {

enum class StepPart { data, compute };

/// One rank's mean milliseconds per step.
struct StepBreakdown {
  int rank = 0;
  double step_ms = 0;     ///< the whole step
  double data_ms = 0;     ///< waiting for the data loader
  double compute_ms = 0;  ///< forward and backward (the Reducer's copies included)
  double exposed_ms = 0;  ///< finalize_backward() waiting for the buckets' collectives
  double other_ms = 0;    ///< the rest: optimizer step, logging, ...
  double comm_ms = 0;     ///< of exposed: communication not hidden behind backward
  double waiting_ms = 0;  ///< of exposed: waiting for the slowest rank
};

/// What report() found, the same on every rank.
struct StepReport {
  std::uint64_t steps = 0;  ///< steps measured (rank 0's)
  std::vector<StepBreakdown> ranks;
  int slowest_rank = 0;  ///< the rank the others wait for (the most data + compute + other)
  std::string cause;     ///< data_loader, slowest_rank, communication or compute
  std::string verdict;   ///< one sentence: the dominant cause and what to try
  /// A table (one line per rank) and the verdict, for a log or a terminal.
  std::string text() const;
};

class StepProfiler {
 public:
  /// `reducer` (may be null: no communication measured) must outlive the profiler.
  explicit StepProfiler(const Reducer* reducer = nullptr) noexcept;

  class Scope {
   public:
    Scope(StepProfiler& p, StepPart part) noexcept;
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StepProfiler& p_;
    StepPart part_;
    std::chrono::steady_clock::time_point start_;
    double exposed_start_;
  };

  void begin_step() noexcept;
  /// Adds the time until the Scope ends to `part` of the current step, less the Reducer's wait
  /// within it (LibTorch's DDP finalizes inside backward()): that wait counts as exposed
  /// communication only.
  [[nodiscard]] Scope time(StepPart part) noexcept { return Scope(*this, part); }
  void end_step();
  /// Steps measured since construction or reset().
  std::uint64_t steps() const noexcept { return steps_; }
  void reset() noexcept;

  /// Collective (every rank of `comm`, with its own profiler): every rank's means, the slowest
  /// rank and the verdict.
  StepReport report(Communicator& comm) const;

 private:
  const Reducer* reducer_;
  std::chrono::steady_clock::time_point step_start_{};
  double exposed_at_start_ = 0;
  double data_s_ = 0, compute_s_ = 0, exposed_s_ = 0, step_s_ = 0;
  double step_data_s_ = 0, step_compute_s_ = 0;
  std::uint64_t steps_ = 0;
};

}  // namespace tandem::ddp
