// Communicator::grow and Communicator::join: new processes arrive in a running group.
//
// Store keys, on the base store under the group's join point (the world's prefix):
//   join/tickets      counter: each joiner takes the next number
//   join/who/<t>      "host H, pid P" of the joiner that took ticket t, set once it asked
//   join/answer/<t>   "claimed" (set by the group's rank 0) or "withdrawn" (set by the joiner
//                     when it stops waiting, or by the store server when its connection ends
//                     first): whichever comes first wins, by compare-and-set
//   join/admit/<t>    "<prefix> <rank> <size> <next ticket>": the communicator it joins
//   join/closed       set by stop_admitting(): joiners stop waiting
// Rank 0 of the group reads the counter, claims the tickets it has not answered yet, and
// broadcasts how many it claimed; every rank then builds the grown communicator.

#include "comm/impl.hpp"
#include "comm/setup/bootstrap.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace tandem {
namespace {

std::string ticket_key(const std::string& join_point, const char* what, std::int64_t t) {
  return fmt::format("{}/join/{}/{}", join_point, what, t);
}

// "ticket 3 (host h, pid 12)", for rank 0's log line; empty on the other ranks.
std::string describe_joiners(store::Store& store, const std::string& join_point,
                             const std::vector<std::int64_t>& tickets) {
  std::string out;
  for (const std::int64_t t : tickets) {
    const std::string key = ticket_key(join_point, "who", t);
    const std::string keys[] = {key};
    out += fmt::format("{}ticket {} ({})", out.empty() ? "" : ", ", t,
                       store.check(keys) ? store.get(key) : std::string("unknown process"));
  }
  return out;
}

}  // namespace

std::shared_ptr<Communicator> Communicator::grow(int max_joiners, std::chrono::milliseconds wait) {
  comm::Rendezvous& rdv = impl_->rendezvous;
  TANDEM_CHECK_ARG(!rdv.join_point.empty(),
                   "grow: communicator '{}' was made by split(); only the world communicator and "
                   "those shrunk or grown from it admit new ranks",
                   rdv.prefix);
  TANDEM_CHECK_ARG(max_joiners >= 0, "grow: max_joiners is {}", max_joiners);
  TANDEM_CHECK_ARG(wait.count() >= 0 && wait < impl_->config.timeout(),
                   "grow: wait is {} ms; it must be shorter than the communicator's timeout "
                   "({} ms), within which the other ranks wait for rank 0's answer",
                   wait.count(), impl_->config.timeout().count());
  const int size = impl_->id.size;
  const std::uint64_t n = rdv.grow_count++;
  const std::string name = fmt::format("{}/grow{}", rdv.prefix, n);
  store::Store& store = *rdv.base_store;

  // Rank 0 claims the waiting tickets; {admitted, next ticket, failed}.
  std::array<std::int64_t, 3> decision{0, rdv.join_next, 0};
  std::vector<std::int64_t> claimed;
  std::string failure;
  if (impl_->id.rank == 0) {
    try {
      const std::string counter = fmt::format("{}/join/tickets", rdv.join_point);
      std::int64_t tickets = store.add(counter, 0);
      if (tickets < rdv.join_next && wait.count() > 0) {
        // Until the next joiner has asked (its who/ key), or `wait` passed.
        const std::string next[] = {ticket_key(rdv.join_point, "who", rdv.join_next)};
        try {
          store.wait(next, deadline_in(wait));
        } catch (const Error& e) {
          if (e.code() != ErrorCode::Timeout) throw;
        }
        tickets = store.add(counter, 0);
      }
      std::int64_t t = rdv.join_next;
      for (; t <= tickets && static_cast<int>(claimed.size()) < max_joiners; ++t) {
        if (store.compare_set(ticket_key(rdv.join_point, "answer", t), "", "claimed") == "claimed")
          claimed.push_back(t);
      }
      decision = {static_cast<std::int64_t>(claimed.size()), t, 0};
      const int new_size = size + static_cast<int>(claimed.size());
      for (std::size_t i = 0; i < claimed.size(); ++i)
        store.set(ticket_key(rdv.join_point, "admit", claimed[i]),
                  fmt::format("{} {} {} {}", name, size + static_cast<int>(i), new_size, t));
    } catch (const Error& e) {
      failure = e.message();
      decision = {0, rdv.join_next, 1};
    }
  }
  if (size > 1) broadcast(BufferView::raw(decision.data(), decision.size(), DataType::i64), 0);
  if (!failure.empty())
    TANDEM_THROW(ErrorCode::Io, "grow: rank 0 could not read the join requests: {}", failure);
  TANDEM_CHECK(decision[2] == 0,
               "grow: rank 0 could not read the join requests from the store (its error says "
               "why)");
  rdv.join_next = decision[1];
  const int added = static_cast<int>(decision[0]);
  if (added == 0) return nullptr;

  CommOptions options = impl_->config.options;
  options.store_prefix = name;
  options.timeout = impl_->config.timeout();
  TANDEM_INFO(init, "grow #{} of '{}': {} new rank{} ({} to {}) under '{}', rank 0 admitted {}", n,
              rdv.prefix, added, added == 1 ? "" : "s", size, size + added - 1, name,
              describe_joiners(store, rdv.join_point, claimed));
  auto impl = comm::build(rdv.base_store, impl_->id.rank, size + added, std::move(options),
                          impl_->id.is_world);
  impl->rendezvous.join_point = rdv.join_point;
  impl->rendezvous.join_next = rdv.join_next;
  {
    // The children are this communicator's: its ranks keep their numbers.
    std::lock_guard lock(rdv.family_mutex);
    impl->rendezvous.children = rdv.children;
  }
  return comm::after_barrier(std::shared_ptr<Communicator>(new Communicator(std::move(impl))),
                             fmt::format("grow to '{}': a rank", name));
}

std::shared_ptr<Communicator> Communicator::join(std::shared_ptr<store::Store> store,
                                                 CommOptions options) {
  TANDEM_CHECK_ARG(store != nullptr, "join: no store");
  const std::string join_point = comm::group_prefix(options);
  const auto timeout = comm::timeout_from(options);
  const std::int64_t t = store->add(fmt::format("{}/join/tickets", join_point), 1);
  const std::string answer = ticket_key(join_point, "answer", t);
  // Dying while it waits withdraws the request: the group does not admit a dead process.
  (void)store->set_on_disconnect(answer, "withdrawn");
  std::array<char, 256> host{};
  (void)::gethostname(host.data(), host.size() - 1);
  store->set(ticket_key(join_point, "who", t),
             fmt::format("host {}, pid {}", host.data(), static_cast<long>(::getpid())));
  TANDEM_INFO(init, "join: asked to join '{}' (ticket {}); waiting up to {} ms to be admitted",
              join_point, t, timeout.count());
  const std::string admit = ticket_key(join_point, "admit", t);
  const std::string admit_keys[] = {admit};
  bool closed = false;
  try {
    closed = store
                 ->multi_get_or_stop(admit_keys, fmt::format("{}/join/closed", join_point),
                                     deadline_in(timeout), std::chrono::milliseconds(100))
                 .stop.has_value();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Timeout) throw;
  }
  const bool admitted = !closed && store->check(admit_keys);
  // Not admitted: withdraw, unless rank 0 claimed the ticket meanwhile (its admission follows).
  if (!admitted && store->compare_set(answer, "", "withdrawn") != "claimed") {
    if (closed)
      TANDEM_THROW(ErrorCode::Aborted,
                   "join: the group '{}' stopped admitting new ranks before it admitted this "
                   "process (its job is ending)",
                   join_point);
    TANDEM_THROW(ErrorCode::Timeout,
                 "join: no rank of the group '{}' admitted this process within {} ms: the "
                 "group's ranks admit newcomers in Communicator::grow() (with "
                 "training.on_rank_loss=continue the main job calls it every step while it "
                 "has fewer ranks than it started with). Is the group running, over this "
                 "store, under this prefix?",
                 join_point, timeout.count());
  }
  if (!admitted) store->wait(admit_keys, deadline_in(timeout));
  (void)store->set_on_disconnect(answer, "");  // answered: nothing to withdraw any more
  const std::string admission = store->get(admit, deadline_in(timeout));
  std::istringstream in(admission);
  std::string prefix;
  int rank = -1;
  int size = 0;
  std::int64_t next = 0;
  in >> prefix >> rank >> size >> next;
  TANDEM_CHECK(!in.fail() && rank >= 0 && rank < size && next > t,
               "join: a malformed admission in the store under '{}': {:?}", admit, admission);
  TANDEM_INFO(init, "join: admitted to '{}' as rank {} of {}", prefix, rank, size);
  options.store_prefix = prefix;
  if (!options.timeout) options.timeout = timeout;
  auto impl = comm::build(std::move(store), rank, size, std::move(options), true);
  impl->rendezvous.join_point = join_point;
  impl->rendezvous.join_next = next;
  impl->rendezvous.joined = true;
  return comm::after_barrier(std::shared_ptr<Communicator>(new Communicator(std::move(impl))),
                             fmt::format("join of '{}': a rank", prefix));
}

void Communicator::stop_admitting() {
  const comm::Rendezvous& rdv = impl_->rendezvous;
  if (rdv.join_point.empty()) return;  // a split communicator admits nobody anyway
  rdv.base_store->set(fmt::format("{}/join/closed", rdv.join_point), "1");
}

bool Communicator::joined() const noexcept {
  return impl_->rendezvous.joined;
}

}  // namespace tandem
