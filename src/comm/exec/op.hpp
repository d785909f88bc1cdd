#pragma once
// One operation as the executor sees it (Op) and the Work of one that was queued (OpWork).

#include "algorithms/algorithm.hpp"
#include "core/trace.hpp"
#include "transport/mesh.hpp"

#include <tandem/communicator.hpp>
#include <tandem/work.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::comm {

/// One operation as submitted: the algorithm call plus what the executor needs around it.
struct Op {
  algorithms::Call call;
  /// nullptr on a one-rank communicator: the call is a local copy.
  const algorithms::Algorithm* algorithm = nullptr;
  /// send/recv: the user's tag (the call's tag is a fingerprint of it).
  std::uint32_t user_tag = 0;
  /// When the call was made, to the coarse clock's tick (core/coarse_clock.hpp): its
  /// deadline counts from here.
  Clock::time_point issued{};
  /// Where the buffers are: a device call runs on the communicator's device backend.
  Device device{};
  /// What the call's messages describe (shape_dtype()/shape_count() of `call`) and the part
  /// of their fingerprint that stays from call to call (algorithms::fingerprint_shape()):
  /// make_op() fills them once for the calls it repeats.
  DataType shape_dtype = DataType::u8;
  std::size_t shape_count = 0;
  std::uint64_t shape_print = 0;
};

inline bool is_p2p(CollectiveKind k) noexcept {
  return k == CollectiveKind::send || k == CollectiveKind::recv;
}

/// "allreduce #12 (f32 x 1048576, ring)".
std::string describe(const Op& op);

/// Records `op` on the timeline (trace.cpp): it ran from `start` to `end` after waiting in
/// the queue since op.issued; a non-empty `error` marks it failed.
void trace_op(core::trace::Ring& ring, const Op& op, Clock::time_point start, Clock::time_point end,
              std::string_view error = {});
/// Starts `op`'s event (running since `start`); ring.close() or trace_end() ends it.
void trace_begin(core::trace::Ring& ring, const Op& op, Clock::time_point start);
/// Ends the event trace_begin() opened for `op`, which succeeded at `end` run by `ran`: an
/// algorithm other than the chosen one (a direct algorithm's ring) is added as "fallback".
void trace_end(core::trace::Ring& ring, const Op& op, const algorithms::Algorithm* ran,
               Clock::time_point end);

class Queue;

/// The Work of a queued operation (asynchronous, or blocking behind others); owns a copy of
/// its arguments. It knows its queue only, which outlives the communicator: waiting for it
/// asks the queue to let the waiting thread run it (Queue::help()), which the queue refuses
/// once the communicator is shut down.
class OpWork final : public Work {
 public:
  OpWork(const Op& op, std::span<const std::size_t> counts, Clock::duration timeout,
         std::shared_ptr<Queue> queue);
  Op op;
  /// allgatherv: the counts, owned here because the caller's span may not outlive the call.
  std::vector<std::size_t> counts;

  /// Waits without throwing: true when the operation finished by `deadline`.
  bool finished_by(Deadline deadline);

  // Point to point on the worker: the posted request and its flight-recorder ticket.
  transport::Request request;
  std::uint64_t ticket = 0;
  /// Timeline only: when a send/recv was posted.
  Clock::time_point posted_at{};
  /// Timeline only: records when the operation completed (Work::completed_at(), read by the
  /// DDP Reducer after wait() to draw when a bucket's allreduce really ended).
  void set_completed_at(Clock::time_point t) noexcept { completed_at_ = t; }
  /// Work::sequence(), once the queue assigned op.call.seq.
  void set_sequence(std::int64_t seq) noexcept { sequence_ = seq; }
  /// Work::source(), before the work completes.
  void set_source(int rank) noexcept { source_ = rank; }
  /// A receive from kAnySource that has not matched a message yet (its request is posted
  /// to no peer).
  bool unmatched() const noexcept {
    return op.call.kind == CollectiveKind::recv && op.call.root == kAnySource &&
           request.peer == kAnySource;
  }

 protected:
  std::string describe() const override;
  void run_if_next(Deadline deadline) override;
  void start_now() override;

 private:
  std::shared_ptr<Queue> queue_;
};

}  // namespace tandem::comm
