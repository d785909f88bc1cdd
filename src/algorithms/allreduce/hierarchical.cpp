// Hierarchical allreduce for ranks on several hosts with as many ranks on each:
//   1. ring reduce-scatter among the ranks of each host (shared memory): the l-th rank of a
//      host ends with block l of the message reduced over its host;
//   2. allreduce of block l among the l-th ranks of every host (one per host, tcp), so the
//      L ranks of a host drive the link together, each with 1/L of the message: a ring, or
//      where the α–β–γ model (model.hpp) expects it faster (a small block, many hosts), a
//      binomial tree reduce to the first host and a tree broadcast back, 2 log2 H steps;
//   3. ring allgather of the blocks among the ranks of each host.
// Between hosts this moves 2(H-1)/H of the message per host and direction instead of the
// flat ring's 2(n-1)/n per rank crossing the link, and the shared-memory phases stay off
// the network. Each phase runs the ring building blocks on a view of the mesh restricted to
// the ranks of that phase. Every element is reduced by one rank and then copied, so every
// rank ends with the same bits. Hosts with different numbers of ranks are left to the flat
// algorithms (supports() is false); run anyway, it treats all ranks as one host (a flat ring).

#include "algorithms/builtin.hpp"
#include "algorithms/common.hpp"
#include "algorithms/model.hpp"
#include "algorithms/parts.hpp"
#include "core/reduce.hpp"

#include <string>
#include <utility>

namespace tandem::algorithms {

HostLayout HostLayout::of(const transport::Mesh& mesh) {
  HostLayout layout;
  const int n = mesh.size();
  std::vector<std::string> ids;
  std::vector<int> count;
  layout.host_of.resize(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    const std::string& id = mesh.peer_info(r).host_id;
    std::size_t h = 0;
    while (h < ids.size() && ids[h] != id) ++h;
    if (h == ids.size()) {
      ids.push_back(id);
      count.push_back(0);
    }
    ++count[h];
    layout.host_of[static_cast<std::size_t>(r)] = static_cast<int>(h);
  }
  layout.hosts = static_cast<int>(ids.size());
  layout.ranks_per_host = count.empty() ? 0 : count[0];
  for (int c : count)
    if (c != layout.ranks_per_host) layout.ranks_per_host = 0;
  return layout;
}

namespace {

// The mesh seen by a subset of its ranks: sub-rank i is the parent's rank members[i]. Requests
// are posted with sub-ranks and translated once, on the way in (nothing reposts a request
// without rebuilding it); errors name the parent's ranks.
class SubMesh final : public transport::Mesh {
 public:
  SubMesh(transport::Mesh& parent, std::vector<int> members, int self)
      : parent_(parent), members_(std::move(members)), self_(self) {}

  int rank() const noexcept override { return self_; }
  int size() const noexcept override { return static_cast<int>(members_.size()); }
  transport::Link link(int peer) const noexcept override {
    return peer == self_ || peer < 0 || peer >= size() ? transport::Link::self
                                                       : parent_.link(member(peer));
  }
  const transport::PeerInfo& peer_info(int peer) const override {
    TANDEM_CHECK(peer >= 0 && peer < size(), "sub-rank {} of {}", peer, size());
    return parent_.peer_info(member(peer));
  }
  void post(transport::Request& r) override {
    check_peer(r);
    r.peer = member(r.peer);
    parent_.post(r);
  }
  bool test(std::span<transport::Request* const> rs) override { return parent_.test(rs); }
  void wait(std::span<transport::Request* const> rs, Deadline deadline) override {
    parent_.wait(rs, deadline);
  }
  void transfer(std::span<transport::Request* const> rs, Deadline deadline) override {
    for (const transport::Request* r : rs) check_peer(*r);  // before any is translated
    for (transport::Request* r : rs) r->peer = member(r->peer);
    parent_.transfer(rs, deadline);
  }
  void check_alive() override { parent_.check_alive(); }
  void abort(const Error& error) noexcept override { parent_.abort(error); }
  std::exception_ptr error() const noexcept override { return parent_.error(); }
  void close() noexcept override {}  // the parent's to close

 private:
  int member(int peer) const noexcept { return members_[static_cast<std::size_t>(peer)]; }
  void check_peer(const transport::Request& r) const {
    TANDEM_CHECK(r.peer >= 0 && r.peer < size() && r.peer != self_,
                 "sub-rank {} is not a peer in a group of {}", r.peer, size());
  }

  transport::Mesh& parent_;
  std::vector<int> members_;
  int self_;
};

bool usable(const HostLayout* hosts, int world) noexcept {
  return hosts != nullptr && hosts->hosts > 1 && hosts->ranks_per_host >= 2 &&
         hosts->host_of.size() == static_cast<std::size_t>(world);
}

class Hierarchical final : public Algorithm {
 public:
  Hierarchical() : Algorithm(CollectiveKind::allreduce, "hierarchical") {}
  bool supports(const Call& call, int world) const noexcept override {
    return usable(call.hosts, world);
  }

  void run(const Call& call, Context& ctx) const override {
    const int n = ctx.mesh.size();
    const int r = ctx.mesh.rank();
    // Without a layout it supports, every rank counts as one host: the flat ring.
    const bool layered = usable(call.hosts, n);
    const int hosts = layered ? call.hosts->hosts : 1;
    const auto host_of = [&](int p) {
      return layered ? call.hosts->host_of[static_cast<std::size_t>(p)] : 0;
    };
    const int my_host = host_of(r);
    // Ranks of this host in rank order, and the position of each rank within its host.
    std::vector<int> local;
    std::vector<int> position(static_cast<std::size_t>(n));
    std::vector<int> seen(static_cast<std::size_t>(hosts), 0);
    for (int p = 0; p < n; ++p) {
      const int h = host_of(p);
      position[static_cast<std::size_t>(p)] = seen[static_cast<std::size_t>(h)]++;
      if (h == my_host) local.push_back(p);
    }
    const int per_host = static_cast<int>(local.size());
    const int l = position[static_cast<std::size_t>(r)];
    std::vector<int> cross(static_cast<std::size_t>(hosts), -1);
    for (int p = 0; p < n; ++p)
      if (position[static_cast<std::size_t>(p)] == l)
        cross[static_cast<std::size_t>(host_of(p))] = p;

    const DataType dt = call.out.dtype;
    const std::size_t es = dtype_size(dt);
    std::byte* out = detail::ptr(call.out.data);

    SubMesh host_mesh(ctx.mesh, std::move(local), l);
    Context host_ctx{host_mesh, ctx.scratch, ctx.chunk_bytes};
    const auto off = detail::even_offsets(call.out.count, per_host);
    const auto ul = static_cast<std::size_t>(l);
    std::byte* mine = out + off[ul] * es;
    detail::ring_reduce_scatter(call, host_ctx, dt, detail::ptr(call.in.data), out, mine, off);

    SubMesh link_mesh(ctx.mesh, std::move(cross), my_host);
    Context link_ctx{link_mesh, ctx.scratch, ctx.chunk_bytes};
    const std::size_t block = off[ul + 1] - off[ul];
    if (model::prefer_tree_between_hosts(hosts, block * es, model::kTcp)) {
      detail::tree_reduce(call, link_ctx, dt, mine, mine, block, 0);
      if (my_host == 0 && call.op == ReduceOp::avg) core::divide(mine, block, dt, n);
      detail::tree_broadcast(call, link_ctx, dt, mine, mine, block, 0);
    } else {
      const auto xoff = detail::even_offsets(block, hosts);
      const auto uh = static_cast<std::size_t>(my_host);
      std::byte* part = mine + xoff[uh] * es;
      detail::ring_reduce_scatter(call, link_ctx, dt, mine, mine, part, xoff);
      if (call.op == ReduceOp::avg) core::divide(part, xoff[uh + 1] - xoff[uh], dt, n);
      detail::ring_allgather(call, link_ctx, dt, part, mine, xoff);
    }

    detail::ring_allgather(call, host_ctx, dt, mine, out, off);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allreduce_hierarchical() {
  return std::make_unique<Hierarchical>();
}

}  // namespace tandem::algorithms
