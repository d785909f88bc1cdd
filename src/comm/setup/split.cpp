#include "comm/impl.hpp"
#include "comm/setup/bootstrap.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
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
  std::shared_ptr<Communicator> child(new Communicator(std::move(impl)));
  std::vector<int> ranks;
  for (const Member& m : members) ranks.push_back(m.rank);
  std::lock_guard lock(impl_->rendezvous.family_mutex);
  impl_->rendezvous.children.push_back({child, std::move(ranks)});
  return child;
}

std::shared_ptr<Communicator> Communicator::successor() const {
  std::lock_guard lock(impl_->rendezvous.family_mutex);
  return impl_->rendezvous.successor;
}

std::shared_ptr<Communicator> Communicator::shrink(std::span<const int> exclude) {
  const int size = impl_->id.size;
  const int rank = impl_->id.rank;
  std::vector<int> out(exclude.begin(), exclude.end());
  std::sort(out.begin(), out.end());
  for (std::size_t i = 0; i < out.size(); ++i) {
    TANDEM_CHECK_ARG(out[i] >= 0 && out[i] < size,
                     "shrink: rank {} is not a rank of this communicator of {} ranks (0..{})",
                     out[i], size, size - 1);
    TANDEM_CHECK_ARG(i == 0 || out[i] != out[i - 1], "shrink: rank {} is excluded twice", out[i]);
  }
  TANDEM_CHECK_ARG(!std::binary_search(out.begin(), out.end(), rank),
                   "shrink: rank {} excludes itself; an excluded rank does not call shrink (it "
                   "may destroy its communicator, or be dead)",
                   rank);
  const int new_size = size - static_cast<int>(out.size());
  const int new_rank =
      rank - static_cast<int>(std::lower_bound(out.begin(), out.end(), rank) - out.begin());
  const std::uint64_t n = impl_->rendezvous.shrink_count++;

  CommOptions options = impl_->config.options;
  // The excluded ranks are part of the name: ranks that disagree on them do not meet.
  options.store_prefix = fmt::format("{}/shrink{}/without-{}", impl_->rendezvous.prefix, n,
                                     out.empty() ? "none" : comm::format_ranks(out));
  options.timeout = impl_->config.timeout();
  TANDEM_INFO(init, "shrink #{} of '{}' without ranks [{}]: rank {} of {} under '{}'", n,
              impl_->rendezvous.prefix, fmt::join(out, ","), new_rank, new_size,
              options.store_prefix);
  // A lost-rank key of its own: the parent's may already name the rank that died.
  const std::string name = options.store_prefix;
  auto impl =
      comm::build(impl_->rendezvous.base_store, new_rank, new_size, std::move(options), false);
  impl->rendezvous.join_point = impl_->rendezvous.join_point;  // a shrunk world still admits
  impl->rendezvous.join_next = impl_->rendezvous.join_next;
  auto next = comm::after_barrier(std::shared_ptr<Communicator>(new Communicator(std::move(impl))),
                                  fmt::format("shrink to '{}': a remaining rank", name));
  // The children follow: each that had an excluded member shrinks without it (a collective of
  // its remaining members, who all shrink this communicator and meet its children in the
  // order they were made); the others are passed on as they are.
  std::vector<comm::Rendezvous::Child> children;
  {
    std::lock_guard lock(impl_->rendezvous.family_mutex);
    children = impl_->rendezvous.children;
  }
  std::vector<comm::Rendezvous::Child> passed;
  for (const auto& c : children) {
    auto child = c.comm.lock();
    if (!child) continue;
    std::vector<int> gone;       // ranks of the child
    std::vector<int> remaining;  // their ranks in `next`
    for (std::size_t i = 0; i < c.members.size(); ++i) {
      const auto below = std::lower_bound(out.begin(), out.end(), c.members[i]);
      if (below != out.end() && *below == c.members[i])
        gone.push_back(static_cast<int>(i));
      else
        remaining.push_back(c.members[i] - static_cast<int>(below - out.begin()));
    }
    if (!gone.empty()) {
      auto shrunk = child->shrink(gone);
      std::lock_guard lock(child->impl_->rendezvous.family_mutex);
      child->impl_->rendezvous.successor = shrunk;
      child = std::move(shrunk);
    }
    passed.push_back({child, std::move(remaining)});
  }
  std::lock_guard lock(next->impl_->rendezvous.family_mutex);
  next->impl_->rendezvous.children = std::move(passed);
  return next;
}

namespace {

std::string format_list(const std::vector<int>& ranks) {
  return ranks.empty() ? std::string("none") : fmt::format("{}", fmt::join(ranks, ","));
}

std::vector<int> parse_list(std::string_view text, int size) {
  std::vector<int> out;
  if (text == "none") return out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    int r = -1;
    const auto got = std::from_chars(text.data() + at, text.data() + comma, r);
    TANDEM_CHECK(got.ec == std::errc() && got.ptr == text.data() + comma && r >= 0 && r < size,
                 "agree_lost: a malformed list of ranks in the store: {:?}", std::string(text));
    out.push_back(r);
    at = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<int> Communicator::agree_lost(std::optional<std::chrono::milliseconds> wait) {
  const int size = impl_->id.size;
  const int rank = impl_->id.rank;
  store::Store& store = *impl_->rendezvous.store;
  // Keys: views (a counter: each survivor takes a number n), view/<n> ("<rank>:<its list>")
  // and decision. A survivor reads each view once, in the order published, so an iteration
  // costs it a few store requests however large the group.
  const std::string base = fmt::format("agree{}/", impl_->rendezvous.agree_count++);
  const std::string decision = base + "decision";
  const std::string counter = base + "views";
  const auto view_key = [&](std::int64_t n) { return fmt::format("{}view/{}", base, n); };
  const Deadline deadline = deadline_in(wait.value_or(impl_->config.timeout()));
  // The pause between looks: 20 ms, longer in large groups (size / 16 ms, at most 250 ms).
  const auto slice = std::clamp(std::chrono::milliseconds(impl_->id.size / 16),
                                std::chrono::milliseconds(20), std::chrono::milliseconds(250));

  std::vector<char> alive(static_cast<std::size_t>(size), 0);
  std::vector<char> lost(static_cast<std::size_t>(size), 0);
  // What the error named, and the peers this rank's connections have seen die since (all of
  // them on a communicator that no call failed on yet, such as one split from a failed one).
  std::vector<int> mine = lost_ranks();
  if (impl_->runner.mesh)
    for (const int r : impl_->runner.mesh->dead_peers())
      if (std::find(mine.begin(), mine.end(), r) == mine.end()) mine.push_back(r);
  for (const int r : mine) lost[static_cast<std::size_t>(r)] = 1;
  store.set(view_key(store.add(counter, 1)), fmt::format("{}:{}", rank, format_list(mine)));
  alive[static_cast<std::size_t>(rank)] = 1;

  std::vector<std::int64_t> unread;  // views numbered but not yet seen (being written)
  std::int64_t numbered = 0;
  const auto read_view = [&](std::int64_t n) {
    const std::string key = view_key(n);
    const std::string keys[] = {key};
    if (!store.check(keys)) return false;
    const std::string text = store.get(key, deadline_in(std::chrono::seconds(10)));
    const std::size_t colon = text.find(':');
    const auto who = parse_list(std::string_view(text).substr(0, colon), size);
    TANDEM_CHECK(colon != std::string::npos && who.size() == 1,
                 "agree_lost: a malformed view in the store: {:?}", text);
    alive[static_cast<std::size_t>(who.front())] = 1;
    for (const int d : parse_list(std::string_view(text).substr(colon + 1), size))
      lost[static_cast<std::size_t>(d)] = 1;
    return true;
  };

  std::string decided;
  for (;;) {
    // Deaths this rank's own connections reveal after its error was raised.
    if (impl_->runner.mesh)
      for (const int r : impl_->runner.mesh->dead_peers()) lost[static_cast<std::size_t>(r)] = 1;
    const std::string decision_keys[] = {decision};
    if (store.check(decision_keys)) {
      decided = store.get(decision, deadline_in(std::chrono::seconds(10)));
      break;
    }
    for (const std::int64_t total = store.add(counter, 0); numbered < total;)
      unread.push_back(++numbered);
    std::erase_if(unread, read_view);
    bool waiting = false;
    for (int r = 0; r < size && !waiting; ++r)
      waiting = !alive[static_cast<std::size_t>(r)] && !lost[static_cast<std::size_t>(r)];
    if (!waiting || Clock::now() >= deadline) {
      std::vector<int> out;
      for (int r = 0; r < size; ++r)
        if (lost[static_cast<std::size_t>(r)] || !alive[static_cast<std::size_t>(r)])
          out.push_back(r);
      decided = store.compare_set(decision, "", format_list(out));
      break;
    }
    // Until the next view is published, the decision appears or a slice passes (a rank that
    // died unseen never publishes; another survivor's view may name it meanwhile).
    const std::string next[] = {view_key(numbered + 1)};
    try {
      (void)store.multi_get_or_stop(next, decision, std::min(deadline, deadline_in(slice)),
                                    std::chrono::milliseconds(5));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
    }
  }
  const std::vector<int> out = parse_list(decided, size);
  if (std::find(out.begin(), out.end(), rank) != out.end()) {
    TANDEM_THROW(ErrorCode::PeerLost,
                 "agree_lost: the other ranks of '{}' left this rank (rank {}) out of the "
                 "shrunk communicator: it was reported lost, or did not answer before their "
                 "deadline",
                 impl_->rendezvous.prefix, rank);
  }
  TANDEM_INFO(init, "agree_lost on '{}': rank {} saw [{}] lost; the ranks agreed on [{}]",
              impl_->rendezvous.prefix, rank, fmt::join(mine, ","), fmt::join(out, ","));
  return out;
}

std::shared_ptr<Communicator> Communicator::shrink_lost(
    std::optional<std::chrono::milliseconds> wait, std::vector<int>* left_out) {
  std::vector<int> out;
  try {
    out = agree_lost(wait);
  } catch (...) {
    // Every call uses up a shrink number, also one that fails before shrinking: survivors
    // whose calls failed at different points still name their next shrink alike.
    ++impl_->rendezvous.shrink_count;
    throw;
  }
  if (left_out != nullptr) *left_out = out;
  return shrink(out);
}

}  // namespace tandem
