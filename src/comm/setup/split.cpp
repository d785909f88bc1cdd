#include "comm/impl.hpp"
#include "comm/setup/bootstrap.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tandem {

std::shared_ptr<Communicator> Communicator::split(int color, int key) {
  // Every rank learns every (color, key); the split is a collective of this communicator,
  // ordered with its other operations.
  std::int64_t mine[2] = {color, key};
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(impl_->id.size));
  allgather(BufferView::raw(mine, 2, DataType::i64),
            BufferView::raw(all.data(), all.size(), DataType::i64));
  const std::uint64_t n = impl_->rendezvous.split_count++;
  if (color < 0) return nullptr;

  struct Member {
    std::int64_t key;
    int rank;
  };
  std::vector<Member> members;
  for (int r = 0; r < impl_->id.size; ++r) {
    if (all[2 * static_cast<std::size_t>(r)] == color)
      members.push_back({all[2 * static_cast<std::size_t>(r) + 1], r});
  }
  std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
    return a.key != b.key ? a.key < b.key : a.rank < b.rank;
  });
  const auto me = std::find_if(members.begin(), members.end(),
                               [&](const Member& m) { return m.rank == impl_->id.rank; });
  TANDEM_CHECK(me != members.end(), "rank {} missing from its own split group", impl_->id.rank);
  const int new_rank = static_cast<int>(me - members.begin());
  const int new_size = static_cast<int>(members.size());

  CommOptions options = impl_->config.options;
  options.store_prefix = fmt::format("{}/split{}/c{}", impl_->rendezvous.prefix, n, color);
  if (!options.timeout) options.timeout = impl_->config.timeout();
  TANDEM_DETAIL(init, "split #{} color {} key {}: rank {} of {} under '{}'", n, color, key,
                new_rank, new_size, options.store_prefix);
  auto impl = comm::build(impl_->rendezvous.base_store, new_rank, new_size, std::move(options),
                          false, impl_->rendezvous.lost_key);
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

}  // namespace tandem
