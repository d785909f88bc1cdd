#include "comm/exec/local.hpp"

#include <tandem/error.hpp>

#include <cstring>

namespace tandem::comm {

void run_local(const algorithms::Call& c) {
  switch (c.kind) {
    case CollectiveKind::barrier:
      return;
    case CollectiveKind::send:
    case CollectiveKind::recv:
      // validate() rejects these (the only peer would be this rank).
      TANDEM_THROW(ErrorCode::Internal, "{} on a one-rank communicator", to_string(c.kind));
    default:
      break;
  }
  // With one rank every reduction (avg included: divided by 1) is the input itself, and
  // every gather/scatter layout is the single block.
  const std::size_t bytes = c.out.bytes() < c.in.bytes() ? c.out.bytes() : c.in.bytes();
  if (bytes > 0 && c.in.data != c.out.data) std::memmove(c.out.data, c.in.data, bytes);
}

}  // namespace tandem::comm
