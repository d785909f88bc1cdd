// One-copy allgather. When every rank is reached through shared memory, the ranks tell each
// other where their inputs lie (40 bytes each way) and every rank copies every peer's block
// straight out of that peer's input into its own output:
// - from the mapping, when every input lies in the same registered buffer
//   (Communicator::allocate; any offset, in place included);
// - else with cross-memory attach (process_vm_readv, algorithms/cma.hpp) when every rank may
//   use it. A read the kernel refuses is not fatal: each rank tells each peer whether it read
//   its block or needs it sent, and the peers send what was not read.
// A last exchange keeps the inputs untouched until every rank has read them. Otherwise (a
// peer over TCP, CMA off on some rank) the call runs as the ring, every rank deciding alike.
#include "algorithms/direct.hpp"

#include "algorithms/builtin.hpp"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tandem::algorithms {
namespace {

class Direct final : public Algorithm {
 public:
  Direct() : Algorithm(CollectiveKind::allgather, "direct") {}

  void run(const Call& call, Context& ctx) const override {
    transport::Mesh& mesh = ctx.mesh;
    const std::size_t bytes = call.in.bytes();
    if (mesh.size() == 1 || bytes == 0 || !detail::all_shm(mesh)) return fallback(call, ctx);
    const int n = mesh.size();
    const int r = mesh.rank();
    const auto where = detail::exchange_where(call, mesh, false);
    const bool registered = detail::all_registered(where, r, false);
    // Every rank may use CMA, all in one pid namespace: the pids in the hellos are theirs.
    const std::uint32_t tag = where[static_cast<std::size_t>(r)].cma;
    const bool cma =
        tag != 0 && std::all_of(where.begin(), where.end(),
                                [tag](const detail::Where& w) { return w.cma == tag; });
    if (!registered && !cma) return fallback(call, ctx);
    std::byte* out = detail::ptr(call.out.data);
    if (!registered) return read_with_cma(call, mesh, where, out, bytes);
    detail::copy_bytes(out + static_cast<std::size_t>(r) * bytes, call.in.data, bytes);
    const bool stream = core::streams(call.out.bytes());
    for (int k = 1; k < n; ++k) {
      const int p = detail::mod(r + k, n);
      const detail::Where& w = where[static_cast<std::size_t>(p)];
      core::copy(out + static_cast<std::size_t>(p) * bytes,
                 detail::peer_buffer(mesh, p, w.in_region, w.in_offset, bytes), bytes, stream);
    }
    // Every rank has read every input: the callers may overwrite them once this returns.
    detail::sync(call, mesh);
  }

 private:
  // Without one copy: what the selector chose before direct covered these sizes, the log-step
  // algorithms below 64 KiB of result (fewer steps over TCP), the ring above.
  static void fallback(const Call& call, Context& ctx) {
    if (call.out.bytes() < (64u << 10)) {
      for (std::string_view name : {"recursive_doubling", "bruck"}) {
        const Algorithm* a = Registry::builtin().find(CollectiveKind::allgather, name);
        if (a != nullptr && a->supports(call, ctx.mesh.size())) {
          ctx.ran = a;
          return a->run(call, ctx);
        }
      }
    }
    detail::run_ring(call, ctx);
  }

  static void read_with_cma(const Call& call, transport::Mesh& mesh,
                            const std::vector<detail::Where>& where, std::byte* out,
                            std::size_t bytes) {
    const int n = mesh.size();
    const int r = mesh.rank();
    const auto un = static_cast<std::size_t>(n);
    // need[p]: this rank could not read rank p's block; sent[p]: rank p could not read ours.
    std::vector<std::uint8_t> need(un, 0);
    std::vector<std::uint8_t> sent(un, 0);
    for (int k = 1; k < n; ++k) {
      const int p = detail::mod(r + k, n);
      const detail::Where& w = where[static_cast<std::size_t>(p)];
      need[static_cast<std::size_t>(p)] =
          detail::cma_read(w.pid, out + static_cast<std::size_t>(p) * bytes,
                           reinterpret_cast<const void*>(w.in_address), bytes)
              ? 0
              : 1;
    }
    // The rank's own block after the peers' (as Open MPI's two-process allgather does): 2-3 %
    // faster at 2-32 MiB on 2 ranks here than before them (six interleaved runs, medians).
    detail::copy_bytes(out + static_cast<std::size_t>(r) * bytes, call.in.data, bytes);
    // Tell every peer whether it was read: after this nobody reads an input any more.
    detail::exchange(call, mesh, need.data(), 1, reinterpret_cast<std::byte*>(sent.data()), 1);
    // What could not be read travels through shared memory.
    std::size_t moves = 0;
    for (int p = 0; p < n; ++p)
      moves += need[static_cast<std::size_t>(p)] + sent[static_cast<std::size_t>(p)];
    if (moves == 0) return;
    detail::Batch data(mesh, moves);
    for (int p = 0; p < n; ++p)
      if (need[static_cast<std::size_t>(p)] != 0)
        data.post(transport::Request::make_recv(p, call.tag,
                                                out + static_cast<std::size_t>(p) * bytes, bytes));
    for (int p = 0; p < n; ++p)
      if (sent[static_cast<std::size_t>(p)] != 0)
        data.post(transport::Request::make_send(p, call.tag, call.in.data, bytes));
    detail::wait_all(mesh, {&data}, call.deadline);
  }
};

}  // namespace

std::unique_ptr<Algorithm> detail::make_allgather_direct() {
  return std::make_unique<Direct>();
}

}  // namespace tandem::algorithms
