#pragma once
// Checks that compare a value across the ranks of a communicator (inside a rank of a
// multi-process test).

#include <tandem/communicator.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace tandem::testing {

/// True when `value` is the same on every rank (one allgather).
inline bool same_on_every_rank(Communicator& comm, std::uint64_t value) {
  std::int64_t mine = static_cast<std::int64_t>(value);
  std::vector<std::int64_t> all(static_cast<std::size_t>(comm.size()));
  comm.allgather(BufferView::raw(&mine, 1, DataType::i64),
                 BufferView::of(std::span<std::int64_t>(all)));
  for (auto v : all)
    if (v != mine) return false;
  return true;
}

}  // namespace tandem::testing
