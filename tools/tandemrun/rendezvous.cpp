#include "rendezvous.hpp"

#include "tools_api/net.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <tuple>
#include <unistd.h>

namespace tandem::tools::tandemrun {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// How long node 0 waits for a counted arrival to describe itself, and how long past their
// own --rdzv-timeout the other nodes wait for node 0 to close the round.
constexpr auto kDescribeBound = 30s;
constexpr auto kCloseMargin = 60s;
constexpr auto kReadBound = 10s;

struct Arrival {
  int arrival = 0;
  int want = -1;  // requested node rank, -1: any
  std::string host;
  int nproc = 0;
  int pid = 0;
  bool hosts_store = false;
};

std::string describe(const Arrival& a) {
  return fmt::format("{} (pid {})", a.host, a.pid);
}

// Node ranks for the arrivals: the store's host is node 0, requested ranks are kept, the rest
// fill the free ranks in order of arrival. Throws RendezvousError on a conflict.
std::vector<int> assign_node_ranks(const std::vector<Arrival>& arrivals) {
  const int k = static_cast<int>(arrivals.size());
  std::vector<int> rank_of(arrivals.size(), -1);
  std::vector<const Arrival*> holder(arrivals.size(), nullptr);
  for (std::size_t i = 0; i < arrivals.size(); ++i) {
    const Arrival& a = arrivals[i];
    const int want = a.hosts_store ? 0 : a.want;
    if (want < 0) continue;
    if (want >= k) {
      throw RendezvousError(fmt::format(
          "node {} asks for --node-rank {}, but the round closed with {} node(s) (ranks 0..{})",
          describe(a), want, k, k - 1));
    }
    const auto w = static_cast<std::size_t>(want);
    if (holder[w] != nullptr) {
      const bool zero = want == 0 && (holder[w]->hosts_store || a.hosts_store);
      throw RendezvousError(
          zero ? fmt::format("node rank 0 belongs to {}, which hosts the store, but {} also asks "
                             "for --node-rank 0: give each node its own --node-rank",
                             describe(a.hosts_store ? a : *holder[w]),
                             describe(a.hosts_store ? *holder[w] : a))
               : fmt::format("duplicate --node-rank {}: {} and {}; give each node its own "
                             "--node-rank",
                             want, describe(*holder[w]), describe(a)));
    }
    holder[w] = &a;
    rank_of[i] = want;
  }
  std::size_t next = 0;
  for (std::size_t i = 0; i < arrivals.size(); ++i) {
    if (rank_of[i] >= 0) continue;
    while (holder[next] != nullptr) ++next;
    holder[next] = &arrivals[i];
    rank_of[i] = static_cast<int>(next);
  }
  return rank_of;
}

// A port that is free on node 0 now, for the workers' rank 0 (PyTorch's env:// store).
// The workers' MASTER_PORT (PyTorch's rank 0 hosts its store there): reserved, and held by
// the session until the next round, so that no other job started at the same moment gets it.
std::uint16_t free_worker_port(const std::string& addr, Session& session) {
  tools_api::Fd fd = tools_api::reserve_tcp_port(addr);
  const auto port = tools_api::bound_port(fd.get());
  session.hold_worker_port(std::move(fd));
  return port;
}

// Later rounds: node 0 first, then the nodes of the previous round in their old order, then
// new nodes in order of arrival; the first `max_nodes` of them are in.
std::vector<int> order_later_round(const std::vector<Arrival>& arrivals, int max_nodes) {
  std::vector<std::size_t> order(arrivals.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto key = [&](std::size_t i) {
    const Arrival& a = arrivals[i];
    return std::tuple(!a.hosts_store, a.want < 0, a.want, a.arrival);
  };
  std::sort(order.begin(), order.end(),
            [&](std::size_t x, std::size_t y) { return key(x) < key(y); });
  std::vector<int> rank_of(arrivals.size(), -1);
  for (std::size_t r = 0; r < order.size() && static_cast<int>(r) < max_nodes; ++r)
    rank_of[order[r]] = static_cast<int>(r);
  return rank_of;
}

// Node 0: waits for the nodes and publishes the round's assignment (or error). Returns the
// number of arrivals it counted.
std::int64_t close_round(const LaunchOptions& options, Session& session, const WaitKeys& wait,
                         int round, const RoundRules& rules) {
  store::Store& store = session.store();
  const Keys& keys = session.keys();
  const auto start = Clock::now();
  const Deadline deadline = deadline_in(options.rdzv_timeout);
  const int enough = rules.expected > 0
                         ? std::clamp(rules.expected, rules.min_nodes, rules.max_nodes)
                         : rules.max_nodes;
  Deadline last_call = Deadline::max();
  json closed;
  std::int64_t n = 0;
  try {
    while (true) {
      n = store.add(keys.joined(round), 0);
      if (n >= enough) break;
      if (n >= rules.min_nodes && last_call == Deadline::max()) {
        last_call = deadline_in(options.last_call);
        TANDEM_INFO(run, "tandemrun: round {}: {} of {}..{} node(s) joined, closing within {:g} s",
                    round, n, rules.min_nodes, rules.max_nodes,
                    std::chrono::duration<double>(options.last_call).count());
      }
      if (Clock::now() >= std::min(deadline, last_call)) {
        if (n >= rules.min_nodes) break;
        throw RendezvousError(fmt::format(
            "only {} of {} node(s) joined round {} of run {} within --rdzv-timeout {:g} s: "
            "start tandemrun on every node with the same --master-addr/--master-port and "
            "TANDEM_STORE_TOKEN, or lower --nnodes",
            n, rules.min_nodes, round, session.run_id(),
            std::chrono::duration<double>(options.rdzv_timeout).count()));
      }
      wait({keys.node(round, static_cast<int>(n) + 1)}, std::min(deadline, last_call));
    }
    // Round 0 takes the first MAX arrivals; later rounds read every arrival and prefer the
    // nodes that were in the run.
    if (round == 0) n = std::min<std::int64_t>(n, rules.max_nodes);
    std::vector<std::string> described;
    for (int i = 1; i <= n; ++i) described.push_back(keys.node(round, i));
    if (!wait(described, deadline_in(kDescribeBound)))
      throw RendezvousError("a node counted itself in but never described itself");
    std::vector<Arrival> arrivals;
    for (int i = 1; i <= n; ++i) {
      const json j = json::parse(store.get(keys.node(round, i), deadline_in(kDescribeBound)));
      Arrival a;
      a.arrival = i;
      a.want = j.at("want").get<int>();
      a.host = j.at("host").get<std::string>();
      a.nproc = j.at("nproc").get<int>();
      a.pid = j.at("pid").get<int>();
      a.hosts_store = j.at("hosts_store").get<bool>();
      arrivals.push_back(std::move(a));
    }
    const auto ranks =
        round == 0 ? assign_node_ranks(arrivals) : order_later_round(arrivals, rules.max_nodes);
    json nodes = json::array();
    for (std::size_t i = 0; i < arrivals.size(); ++i) {
      if (ranks[i] < 0) continue;
      nodes.push_back(json{{"arrival", arrivals[i].arrival},
                           {"node", ranks[i]},
                           {"host", arrivals[i].host},
                           {"nproc", arrivals[i].nproc},
                           {"pid", arrivals[i].pid}});
    }
    closed = json{{"nodes", nodes},
                  {"master_addr", options.master_addr},
                  {"master_port", free_worker_port(options.master_addr, session)},
                  {"error", ""}};
    TANDEM_INFO(run, "tandemrun: round {} closed with {} node(s) after {:.1f} s", round,
                nodes.size(), std::chrono::duration<double>(Clock::now() - start).count());
  } catch (const RendezvousError& e) {
    closed = json{{"error", e.what()}};
  } catch (const json::exception& e) {
    closed = json{{"error", fmt::format("malformed node description in the store: {}", e.what())}};
  }
  store.set(keys.closed(round), closed.dump());
  store.set(keys.current(), std::to_string(round));
  return n;
}

std::string read_key(const Keys& keys, int round, int arrival) {
  return fmt::format("{}/read/{}", keys.round(round), arrival);
}

}  // namespace

int next_open_round(Session& session) {
  store::Store& store = session.store();
  const std::string key = session.keys().current();
  if (!store.check(std::vector<std::string>{key})) return 0;
  const std::string text = store.get(key, deadline_in(kReadBound));
  int round = 0;
  if (std::from_chars(text.data(), text.data() + text.size(), round).ec != std::errc() ||
      round < 0) {
    throw RendezvousError(fmt::format("malformed round number '{}' in the store", text));
  }
  return round + 1;
}

int round_size(Session& session, int round) {
  store::Store& store = session.store();
  const std::string key = session.keys().closed(round);
  if (!store.check(std::vector<std::string>{key})) return -1;
  try {
    const json j = json::parse(store.get(key, deadline_in(kReadBound)));
    return j.contains("nodes") ? static_cast<int>(j.at("nodes").size()) : -1;
  } catch (const json::exception&) {
    return -1;
  }
}

Assignment join_round(const LaunchOptions& options, Session& session, const WaitKeys& wait,
                      int round, const RoundRules& rules) {
  store::Store& store = session.store();
  const Keys& keys = session.keys();
  const auto arrival = static_cast<int>(store.add(keys.joined(round), 1));
  store.set(keys.node(round, arrival), json{{"want", rules.want.value_or(-1)},
                                            {"host", tools_api::local_host_name()},
                                            {"nproc", options.nproc_per_node},
                                            {"pid", static_cast<int>(::getpid())},
                                            {"hosts_store", session.hosts_store()}}
                                           .dump());
  std::int64_t arrivals = 0;
  if (session.hosts_store()) arrivals = close_round(options, session, wait, round, rules);
  if (!wait({keys.closed(round)}, deadline_in(options.rdzv_timeout + kCloseMargin))) {
    throw RendezvousError(fmt::format(
        "node 0 (store at {}) did not close rendezvous round {} within --rdzv-timeout {:g} s "
        "plus {} s",
        session.store_address(), round, std::chrono::duration<double>(options.rdzv_timeout).count(),
        kCloseMargin.count()));
  }
  Assignment a;
  a.round = round;
  a.max_restarts = options.max_restarts;
  try {
    const json j = json::parse(store.get(keys.closed(round), deadline_in(10s)));
    const auto error = j.at("error").get<std::string>();
    if (!error.empty()) {
      if (!session.hosts_store()) {
        store.set(read_key(keys, round, arrival), "1");
      } else {
        // The store goes when node 0 exits: first let every node read why.
        std::vector<std::string> read;
        for (int i = 1; i <= arrivals; ++i)
          if (i != arrival) read.push_back(read_key(keys, round, i));
        try {
          if (!read.empty()) wait(read, deadline_in(kReadBound));
        } catch (const std::exception&) {
        }
      }
      throw RendezvousError(error);
    }
    a.master_addr = j.at("master_addr").get<std::string>();
    a.master_port = j.at("master_port").get<std::uint16_t>();
    const auto& nodes = j.at("nodes");
    a.nodes.resize(nodes.size());
    int mine = -1;
    for (const auto& n : nodes) {
      const int node = n.at("node").get<int>();
      NodeSlot& s = a.nodes.at(static_cast<std::size_t>(node));
      s.node = node;
      s.host = n.at("host").get<std::string>();
      s.nproc = n.at("nproc").get<int>();
      s.agent_pid = n.at("pid").get<int>();
      if (n.at("arrival").get<int>() == arrival) mine = node;
    }
    // In an elastic run a node the round closed without is not admitted (node_rank -1): it
    // waits for the next round.
    if (mine < 0 && !options.elastic()) {
      throw RendezvousError(fmt::format(
          "rendezvous round {} of run {} closed with {} node(s) before this node joined (arrival "
          "{}): more nodes were started than --nnodes {}",
          round, session.run_id(), nodes.size(), arrival, rules.max_nodes));
    }
    a.node_rank = mine;
  } catch (const json::exception& e) {
    throw RendezvousError(fmt::format("malformed rendezvous result from node 0: {}", e.what()));
  }
  int first = 0;
  for (auto& s : a.nodes) {
    s.first_rank = first;
    first += s.nproc;
  }
  a.world_size = first;
  return a;
}

}  // namespace tandem::tools::tandemrun
