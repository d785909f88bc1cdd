// Operations on the timeline (TANDEM_TRACE): one complete event per collective on the
// communicator's track, point-to-point operations as spans that may overlap (they stay posted
// while later operations run). Called only when tracing is on.

#include "comm/diag/validate.hpp"
#include "comm/exec/op.hpp"

namespace tandem::comm {

void trace_op(core::trace::Ring& ring, const Op& op, Clock::time_point start, Clock::time_point end,
              std::string_view error) {
  trace_begin(ring, op, start);
  ring.close(end, error);
}

void trace_begin(core::trace::Ring& ring, const Op& op, Clock::time_point start) {
  const auto& c = op.call;
  const DataType dtype = shape_dtype(c);
  const std::size_t count = shape_count(c);
  auto& e = ring.next();
  e.label = to_string(c.kind);
  e.start = start;
  e.end = start;
  e.queued = op.issued;
  e.add("dtype", to_string(dtype));
  e.add("count", static_cast<std::int64_t>(count));
  e.add("bytes", static_cast<std::int64_t>(count * dtype_size(dtype)));
  e.add("algorithm", op.algorithm != nullptr ? op.algorithm->name() : std::string_view("local"));
  switch (c.kind) {
    case CollectiveKind::send:
    case CollectiveKind::recv:
      e.category = "p2p";
      e.shape = core::trace::Event::Shape::async;
      e.add("peer", c.root);
      e.add("tag", static_cast<std::int64_t>(op.user_tag));
      break;
    case CollectiveKind::allreduce:
    case CollectiveKind::reduce_scatter:
      e.category = "collective";
      e.number = static_cast<std::int64_t>(c.seq);
      e.add("op", to_string(c.op));
      break;
    case CollectiveKind::reduce:
      e.category = "collective";
      e.number = static_cast<std::int64_t>(c.seq);
      e.add("op", to_string(c.op));
      e.add("root", c.root);
      break;
    case CollectiveKind::broadcast:
    case CollectiveKind::gather:
    case CollectiveKind::scatter:
      e.category = "collective";
      e.number = static_cast<std::int64_t>(c.seq);
      e.add("root", c.root);
      break;
    default:
      e.category = "collective";
      e.number = static_cast<std::int64_t>(c.seq);
      break;
  }
  if (c.kind != CollectiveKind::barrier) e.add_flag("in_place", c.in_place());
  ring.mark_open();
}

void trace_end(core::trace::Ring& ring, const Op& op, const algorithms::Algorithm* ran,
               Clock::time_point end) {
  if (ran != nullptr && ran != op.algorithm) ring.open_event().add("fallback", ran->name());
  ring.close(end);
}

}  // namespace tandem::comm
