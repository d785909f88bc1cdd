// Building a mesh: make_mesh over connections the caller made, connect_mesh through a store
// (addresses exchanged, shared-memory segments mapped, tcp connections opened).

#include "transport/bootstrap.hpp"
#include "transport/exchange.hpp"
#include "transport/mesh_impl.hpp"
#include "transport/tcp/connector.hpp"
#include "transport/tcp/context.hpp"
#include "transport/tcp/wire.hpp"
#include "transport/ucx/context.hpp"
#include "transport/ucx/wire.hpp"

#include <tandem/log.hpp>
#include <tandem/settings.hpp>
#include <tandem/store.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <sched.h>
#include <thread>
#include <unistd.h>

namespace tandem::transport {
namespace {

std::string run_id(const std::vector<RankRecord>& records) {
  std::string id = settings::get_string("TANDEM_RUN_ID");
  return id.empty() ? fmt::format("p{}", records[0].info.pid) : id;
}

// UCX connects lazily, as messages go; a peer that closes while a connection is still being
// made can trip UCX 1.13's tcp transport. One message each way with every UCX peer now brings
// every connection up before the mesh is used (the first message between two ranks, so it
// matches the first receive on both sides).
void ucx_handshake(Mesh& mesh, const std::vector<int>& peers, int rank, Deadline deadline) {
  constexpr std::uint32_t kHandshakeTag = 0x55435848;  // "UCXH"
  const auto me = static_cast<std::uint64_t>(rank);
  std::vector<std::uint64_t> got(peers.size(), ~std::uint64_t{0});
  std::vector<Request> requests;
  requests.reserve(2 * peers.size());
  for (std::size_t i = 0; i < peers.size(); ++i) {
    requests.push_back(Request::make_recv(peers[i], kHandshakeTag, &got[i], sizeof got[i]));
    requests.push_back(Request::make_send(peers[i], kHandshakeTag, &me, sizeof me));
  }
  std::vector<Request*> pending;
  for (Request& r : requests) {
    mesh.post(r);
    pending.push_back(&r);
  }
  mesh.wait(pending, deadline);
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if (got[i] != static_cast<std::uint64_t>(peers[i]))
      throw_protocol(peers[i], Link::ucx, "its UCX handshake named another rank");
  }
}

}  // namespace

std::unique_ptr<Mesh> make_mesh(int rank, std::vector<PeerInfo> peers,
                                std::vector<net::Fd> controls, const EndpointMaker& make_endpoint,
                                const MeshOptions& options) {
  const int size = static_cast<int>(peers.size());
  TANDEM_CHECK_ARG(rank >= 0 && rank < size && controls.size() == peers.size(),
                   "rank {} in a group of {} ranks with {} control connections", rank, size,
                   controls.size());
  std::vector<Link> links(peers.size(), Link::tcp);
  links[static_cast<std::size_t>(rank)] = Link::self;
  auto mesh = std::make_unique<detail::MeshImpl>(rank, options, std::move(peers), std::move(links));
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    auto ep = make_endpoint(p, mesh->failures());
    TANDEM_CHECK_ARG(ep != nullptr && ep->peer() == p && ep->link() == Link::tcp,
                     "the endpoint to rank {} must be a tcp link to that rank", p);
    mesh->attach(p, Control(std::move(controls[static_cast<std::size_t>(p)])), std::move(ep));
  }
  return mesh;
}

bool oversubscribed(int local_ranks, int* cpus_out) noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (cpus <= 1) cpus = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  if (cpus_out != nullptr) *cpus_out = cpus;
  return local_ranks > cpus;
}

std::size_t shm_channel_bytes(std::size_t peers) noexcept {
  constexpr std::size_t kFull = 4u << 20;
  constexpr std::size_t kSegmentBudget = 7 * kFull;
  constexpr std::size_t kFloor = 256u << 10;
  if (peers * kFull <= kSegmentBudget) return kFull;
  return std::max(kFloor, std::bit_floor(kSegmentBudget / peers));
}

namespace {

// This rank's record before its listening address is known.
RankRecord self_record(int rank, const MeshOptions& options) {
  TANDEM_CHECK_ARG(options.host_label.find_first_of("\r\n") == std::string::npos,
                   "host label {:?} must not contain a line break", options.host_label);
  std::string host_id = local_host_id();
  if (!options.host_label.empty()) host_id += "/label:" + options.host_label;
  RankRecord self;
  self.info =
      PeerInfo{rank, net::local_host_name(), std::move(host_id), static_cast<int>(::getpid())};
  self.shm_disable = options.shm_disable;
  self.streams = options.sockets_per_peer;
  return self;
}

// How this rank reaches one peer, from the two records.
struct PeerPlan {
  Link link = Link::tcp;
  tcp::Target target;  // a control connection, and data streams over tcp
  bool same_host = false;
};

PeerPlan plan_peer(const RankRecord& self, const RankRecord& r, const MeshOptions& options,
                   bool have_ucx) {
  PeerPlan plan;
  plan.same_host = r.info.host_id == self.info.host_id;
  const bool shm = plan.same_host && !options.shm_disable && !r.shm_disable;
  const bool use_ucx = !shm && have_ucx && !r.ucx.empty();
  plan.link = shm ? Link::shm : use_ucx ? Link::ucx : Link::tcp;
  // A peer over shm or UCX gets a control connection only (liveness, goodbyes).
  plan.target = tcp::Target{r.address, r.port,
                            shm || use_ucx ? 0 : std::min(self.streams, r.streams), plan.same_host};
  return plan;
}

// How this rank reaches each peer, from the records.
struct LinkPlan {
  std::vector<Link> links;
  std::vector<PeerInfo> peers;
  std::vector<tcp::Target> targets;
  std::vector<int> local, over_ucx, same_host;
};

LinkPlan plan_links(int rank, const std::vector<RankRecord>& records, const MeshOptions& options,
                    bool have_ucx) {
  const auto n = records.size();
  const RankRecord& self = records[static_cast<std::size_t>(rank)];
  LinkPlan plan{std::vector<Link>(n, Link::tcp),
                std::vector<PeerInfo>(n),
                std::vector<tcp::Target>(n),
                {},
                {},
                {}};
  for (int p = 0; p < static_cast<int>(n); ++p) {
    const RankRecord& r = records[static_cast<std::size_t>(p)];
    plan.peers[static_cast<std::size_t>(p)] = r.info;
    if (p == rank) {
      plan.links[static_cast<std::size_t>(p)] = Link::self;
      continue;
    }
    const PeerPlan one = plan_peer(self, r, options, have_ucx);
    if (one.same_host) plan.same_host.push_back(p);
    if (one.link == Link::tcp && have_ucx && r.ucx.empty() &&
        options.transport == NetTransport::ucx) {
      TANDEM_WARN(init,
                  "rank {}: TANDEM_TRANSPORT=ucx, but rank {} ({}) does not offer UCX (its "
                  "TANDEM_TRANSPORT is tcp, or auto without an RDMA device, or its tandem has "
                  "no UCX): tcp to it. Give every rank the same TANDEM_TRANSPORT",
                  rank, p, r.info.host);
    }
    plan.links[static_cast<std::size_t>(p)] = one.link;
    if (one.link == Link::shm) plan.local.push_back(p);
    if (one.link == Link::ucx) plan.over_ucx.push_back(p);
    plan.targets[static_cast<std::size_t>(p)] = one.target;
  }
  return plan;
}

// Every rank's record, `self` at `rank`: the setup peers' through the store (one read of their
// keys), after connecting to them the rest from them (transport/exchange.hpp). Returns the
// records and the setup peers' sockets, in the order of setup_peers().
struct FirstContact {
  std::vector<RankRecord> records;
  std::vector<int> peers;
  std::vector<tcp::PeerSockets> sockets;
};

FirstContact first_contact(store::Store& store, int rank, int size, const RankRecord& self,
                           tcp::Context& tcp, bool have_ucx, Deadline deadline,
                           const MeshOptions& options) {
  FirstContact c;
  c.peers = setup_peers(rank, size);
  // Waits until every rank has published its address, too: the waits after this one (the
  // setup peers' handshakes, the record exchange) then wait for ranks that are all running.
  const auto texts = gather(
      store, rank, encode_record(self),
      GatherSpec{.prefix = kAddressPrefix, .what = "addresses", .from = c.peers, .everyone = size},
      deadline, options.check_peers, options.read_keys, liveness_period(size));
  c.records.resize(static_cast<std::size_t>(size));
  c.records[static_cast<std::size_t>(rank)] = self;
  for (std::size_t i = 0; i < c.peers.size(); ++i) {
    const int p = c.peers[i];
    c.records[static_cast<std::size_t>(p)] = decode_record(texts[i], p);
    tcp.connector().set_target(
        p, plan_peer(self, c.records[static_cast<std::size_t>(p)], options, have_ucx).target);
  }
  c.sockets = tcp.connector().connect(c.peers, deadline, options.check_peers);
  testing::setup_step("connected setup peers");
  const auto all = allgather_records(
      rank, size, encode_record(self),
      [&](int p) {
        const auto at = std::lower_bound(c.peers.begin(), c.peers.end(), p) - c.peers.begin();
        return c.sockets[static_cast<std::size_t>(at)].control.get();
      },
      deadline);
  for (int p = 0; p < size; ++p)
    if (p != rank) c.records[static_cast<std::size_t>(p)] = decode_record(all[p], p);
  testing::setup_step("exchanged records");
  return c;
}

// `options` with check_peers asking the store at most every liveness_period(size): the waits
// that poll it (the segment attach, a dial on demand) call it every kLivenessPoll.
MeshOptions paced(const MeshOptions& options, int size) {
  MeshOptions opts = options;
  const auto period = liveness_period(size);
  if (opts.check_peers && period > kLivenessPoll) {
    opts.check_peers = [check = options.check_peers, period, next = Clock::time_point{}]() mutable {
      const auto now = Clock::now();
      if (now < next) return;
      next = now + period;
      check();
    };
  }
  return opts;
}

// The options the mesh runs with: TANDEM_SPIN_US=auto yields on every poll where this host's
// ranks outnumber their CPUs.
MeshOptions wait_options(int rank, int local_ranks, const MeshOptions& options) {
  MeshOptions opts = options;
  int cpus = 0;
  if (opts.spin_auto && oversubscribed(local_ranks, &cpus)) {
    opts.spin_time = detail::kOversubscribedSpin;
    opts.yield_always = true;
    TANDEM_INFO(
        init,
        "rank {}: {} ranks on this host share {} CPU(s): a waiting rank yields its CPU "
        "on every poll, for up to {} ms before it blocks (TANDEM_SPIN_US=auto; a number "
        "sets the spin time)",
        rank, local_ranks, cpus,
        std::chrono::duration_cast<std::chrono::milliseconds>(detail::kOversubscribedSpin).count());
  }
  return opts;
}

// The shared-memory segment of this rank's host peers, each peer's mapped (null without any).
std::unique_ptr<shm::Context> connect_shm(store::Store& store, int rank,
                                          const std::vector<int>& local,
                                          const std::vector<RankRecord>& records, Deadline deadline,
                                          const MeshOptions& options) {
  if (local.empty()) return nullptr;
  std::unique_ptr<shm::Context> shm;
  try {
    const std::size_t channel =
        options.shm_buffer_bytes != 0 ? options.shm_buffer_bytes : shm_channel_bytes(local.size());
    shm = std::make_unique<shm::Context>(rank, local, channel, run_id(records));
  } catch (const Error& e) {
    store.set(fmt::format("shm/{}", rank), "!" + e.message());  // the local peers fail fast
    throw;
  }
  const auto names = gather(
      store, rank, shm->name(),
      GatherSpec{.prefix = "shm/", .what = "shared-memory segment names", .from = local}, deadline,
      options.check_peers, options.read_keys, liveness_period(static_cast<int>(records.size())));
  for (std::size_t i = 0; i < local.size(); ++i) {
    if (names[i].starts_with('!'))
      TANDEM_THROW(ErrorCode::Io, "rank {} could not set up shared memory: {}", local[i],
                   std::string_view(names[i]).substr(1));
    try {
      shm->attach(local[i], names[i]);
    } catch (const Error&) {
      // A peer that gave up because a third rank was lost removed its segment: name that rank.
      if (options.check_peers) options.check_peers();
      throw;
    }
  }
  // Setup ends only once the local peers have mapped this rank's segment too: a rank that
  // closes at once must not remove it under a peer still attaching.
  auto next_check = Clock::now() + kLivenessPoll;
  while (!shm->all_attached()) {
    const auto now = Clock::now();
    if (now >= deadline)
      TANDEM_THROW(ErrorCode::Timeout,
                   "rank {} waited for its host's ranks [{}] to map its shared-memory segment "
                   "until the timeout: is one of them stuck in setup?",
                   rank, fmt::join(local, ","));
    if (options.check_peers && now >= next_check) {
      options.check_peers();
      next_check = now + kLivenessPoll;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return shm;
}

// Attaches an endpoint over its link and its control connection to every peer connected at
// setup; returns the UCX lanes ("3 via rc_mlx5/mlx5_0:1, ...") for the log.
std::string attach_endpoints(detail::MeshImpl& mesh, const LinkPlan& plan,
                             std::span<const int> peers, std::vector<tcp::PeerSockets>& sockets,
                             tcp::Context& tcp, shm::Context* shm, ucx::Context* ucx,
                             const std::vector<RankRecord>& records) {
  std::string ucx_lanes;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    const int p = peers[i];
    auto& s = sockets[i];
    std::unique_ptr<Endpoint> ep;
    switch (plan.links[static_cast<std::size_t>(p)]) {
      case Link::shm:
        ep = shm->make_endpoint(p, mesh.failures());
        break;
      case Link::ucx: {
        const auto address = ucx::from_hex(records[static_cast<std::size_t>(p)].ucx);
        if (!address)
          TANDEM_THROW(ErrorCode::Internal, "rank {} published a malformed UCX address", p);
        ep = ucx->make_endpoint(p, *address, mesh.failures());
        ucx_lanes +=
            fmt::format("{}{} via {}", ucx_lanes.empty() ? "" : ", ", p, ucx::describe(*ep));
        break;
      }
      default:
        ep = tcp.make_endpoint(p, std::move(s.data), mesh.failures());
        break;
    }
    mesh.attach(p, Control(std::move(s.control)), std::move(ep));
  }
  return ucx_lanes;
}

}  // namespace

std::unique_ptr<Mesh> connect_mesh(store::Store& store, int rank, int size,
                                   const MeshOptions& caller_options) {
  TANDEM_CHECK_ARG(size >= 1 && rank >= 0 && rank < size, "rank {} is not in a group of {} ranks",
                   rank, size);
  TANDEM_CHECK_ARG(
      caller_options.sockets_per_peer >= 1 && caller_options.sockets_per_peer <= tcp::kMaxStreams,
      "TANDEM_SOCKETS_PER_PEER={} is out of range 1..{}", caller_options.sockets_per_peer,
      tcp::kMaxStreams);
  const auto start = Clock::now();
  const MeshOptions options = paced(caller_options, size);
  const Deadline deadline = deadline_in(options.connect_timeout);
  RankRecord self = self_record(rank, options);
  if (size == 1) {
    return std::make_unique<detail::MeshImpl>(rank, options, std::vector<PeerInfo>{self.info},
                                              std::vector<Link>{Link::self});
  }

  // UCX: offered when asked for, or (auto) where an RDMA device makes it worth it.
  std::shared_ptr<ucx::Context> ucx;
  if (options.transport == NetTransport::ucx || (options.transport == NetTransport::automatic &&
                                                 ucx::available() && ucx::rdma_device_present())) {
    ucx = ucx::Context::create(rank);
    self.ucx = ucx::to_hex(ucx->address());
  }

  testing::setup_step("start");
  auto tcp = std::make_unique<tcp::Context>(
      rank, size, choose_listen_address(options.socket_ifname, options.socket_ifname_source),
      options.token);
  self.address = tcp->address();
  self.port = tcp->port();
  FirstContact first =
      first_contact(store, rank, size, self, *tcp, ucx != nullptr, deadline, options);
  const LinkPlan plan = plan_links(rank, first.records, options, ucx != nullptr);
  // Then the peers every rank connects at setup besides: its host's ranks over shared memory
  // and the UCX peers (a control connection each). Tcp peers connect at their first message.
  std::vector<int> second;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    tcp->connector().set_target(p, plan.targets[static_cast<std::size_t>(p)]);
    if (plan.links[static_cast<std::size_t>(p)] != Link::tcp &&
        !std::binary_search(first.peers.begin(), first.peers.end(), p))
      second.push_back(p);
  }
  auto mesh = std::make_unique<detail::MeshImpl>(
      rank, wait_options(rank, static_cast<int>(plan.same_host.size()) + 1, options), plan.peers,
      plan.links);
  auto shm = connect_shm(store, rank, plan.local, first.records, deadline, options);
  auto second_sockets = tcp->connector().connect(second, deadline, options.check_peers);
  std::string ucx_lanes = attach_endpoints(*mesh, plan, first.peers, first.sockets, *tcp, shm.get(),
                                           ucx.get(), first.records);
  ucx_lanes += attach_endpoints(*mesh, plan, second, second_sockets, *tcp, shm.get(), ucx.get(),
                                first.records);
  if (shm) mesh->adopt_shm(std::move(shm), plan.local);
  mesh->share_host(plan.same_host);
  std::vector<int> over_tcp;
  for (int p : first.peers)
    if (plan.links[static_cast<std::size_t>(p)] == Link::tcp) over_tcp.push_back(p);
  const std::string listening = net::format_host_port(tcp->address(), tcp->port());
  tcp->connector().refusal_is_final();
  mesh->adopt_tcp(std::move(tcp));
  if (!plan.over_ucx.empty()) ucx_handshake(*mesh, plan.over_ucx, rank, deadline);
  testing::setup_step("connected");
  const auto later = static_cast<std::size_t>(size - 1) - plan.local.size() - plan.over_ucx.size() -
                     over_tcp.size();
  TANDEM_INFO(
      init,
      "rank {}/{} connected in {:.1f} ms: shm to [{}], tcp to [{}] ({} stream(s) each), "
      "{}{}listening on {}",
      rank, size, std::chrono::duration<double, std::milli>(Clock::now() - start).count(),
      fmt::join(plan.local, ","), fmt::join(over_tcp, ","), options.sockets_per_peer,
      ucx_lanes.empty() ? std::string() : fmt::format("ucx to [{}], ", ucx_lanes),
      later == 0 ? std::string() : fmt::format("{} more over tcp at their first message, ", later),
      listening);
  return mesh;
}

}  // namespace tandem::transport
