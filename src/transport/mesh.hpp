#pragma once
// The seam between algorithms and transports. An algorithm sees only Mesh: it posts
// Requests to peers and waits on them. It cannot tell whether a peer is reached through
// shared memory or TCP.
//
// Semantics
//  - Between two ranks, messages in one direction are matched in FIFO order: the k-th send
//    from A to B completes B's k-th posted receive from A. There is no tag matching: the
//    tag travels with the message and a receive whose tag or size differs from the incoming
//    message fails with Error(Mismatch) naming the peer (this is how mismatched collectives
//    are caught instead of hanging).
//  - A Request is owned by the caller and must outlive its completion, or the Mesh must have
//    been aborted. The Mesh never allocates per Request.
//  - Progress is made only by the thread inside wait()/test(): there are no background
//    progress threads. wait() spins briefly (TANDEM_SPIN_US), then blocks (futex for shm,
//    poll for tcp) in slices, watching every peer's liveness, until the deadline.
//  - Any transport failure (peer died, reset, abort frame, protocol violation) throws an
//    Error naming the peer; the Mesh is then poisoned: every later post/wait throws the same
//    error until it is destroyed. Requests pending at that moment are dropped (never touched
//    again), so the caller's stack may unwind safely.

#include <tandem/error.hpp>
#include <tandem/types.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::store {
class Store;
}

namespace tandem::transport {

class RegionPool;

enum class RequestKind : std::uint8_t {
  send,         ///< send `bytes` from `src`
  recv,         ///< receive `bytes` into `dst`
  recv_reduce,  ///< dst[i] = src[i] op incoming[i] for `bytes / dtype_size` elements; dst may be
                ///< src
};

/// One posted point-to-point operation.
struct Request {
  RequestKind kind = RequestKind::send;
  int peer = -1;
  std::uint32_t tag = 0;
  const void* src = nullptr;
  void* dst = nullptr;
  std::size_t bytes = 0;
  DataType dtype = DataType::u8;  ///< recv_reduce only
  ReduceOp op = ReduceOp::sum;    ///< recv_reduce only (avg reduces as sum; the algorithm divides)

  // ---- owned by the transport while posted ----
  std::size_t done = 0;        ///< bytes moved so far
  bool complete = false;       ///< set once, by the transport
  Request* next = nullptr;     ///< intrusive FIFO link
  std::uint64_t priv[2] = {};  ///< transport-private progress state

  static Request make_send(int peer, std::uint32_t tag, const void* src, std::size_t bytes) {
    Request r;
    r.kind = RequestKind::send;
    r.peer = peer;
    r.tag = tag;
    r.src = src;
    r.bytes = bytes;
    return r;
  }
  static Request make_recv(int peer, std::uint32_t tag, void* dst, std::size_t bytes) {
    Request r;
    r.kind = RequestKind::recv;
    r.peer = peer;
    r.tag = tag;
    r.dst = dst;
    r.bytes = bytes;
    return r;
  }
  static Request make_recv_reduce(int peer, std::uint32_t tag, void* dst, const void* local,
                                  std::size_t count, DataType dtype, ReduceOp op) {
    Request r;
    r.kind = RequestKind::recv_reduce;
    r.peer = peer;
    r.tag = tag;
    r.dst = dst;
    r.src = local;
    r.bytes = count * dtype_size(dtype);
    r.dtype = dtype;
    r.op = op;
    return r;
  }
};

/// Which transport a peer is reached through.
enum class Link : std::uint8_t { self, shm, tcp, ucx };
std::string_view to_string(Link l) noexcept;

/// Where a rank lives (published through the store at connection time).
struct PeerInfo {
  int rank = -1;
  std::string host;     ///< hostname
  std::string host_id;  ///< hostname + boot id + network namespace: equal means same host
  int pid = 0;
};

/// The point-to-point links of one communicator. Every peer can be posted to; a peer over tcp
/// that setup did not connect is connected at the first message either way (connect_mesh()).
class Mesh {
 public:
  virtual ~Mesh() = default;

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  virtual Link link(int peer) const noexcept = 0;
  virtual const PeerInfo& peer_info(int peer) const = 0;

  /// Appends `r` to the peer's FIFO. Never blocks. A send to or receive from self is invalid.
  virtual void post(Request& r) = 0;
  /// Advances every posted request without blocking; true when all of `rs` are complete.
  virtual bool test(std::span<Request* const> rs) = 0;
  /// Progresses until every request in `rs` is complete. Throws Error(Timeout) at `deadline`
  /// (naming the peers still owed data), Error(PeerLost) when a peer dies, Error(Mismatch)
  /// on a tag/size mismatch, Error(Aborted) when a peer aborted.
  virtual void wait(std::span<Request* const> rs, Deadline deadline) = 0;
  void wait(Request& r, Deadline deadline) {
    Request* p = &r;
    wait(std::span<Request* const>(&p, 1), deadline);
  }
  /// post() of every request of `rs` in order, then wait(): for requests the caller has
  /// nothing to overlap with. A transport may move a request at once instead of queueing it
  /// (shm: a message of one chunk with nothing queued before it), so that a small message
  /// costs neither a queue nor a progress pass. Requests are checked before any is posted;
  /// a failure leaves none pending (the mesh is poisoned, as by wait()).
  virtual void transfer(std::span<Request* const> rs, Deadline deadline);
  void transfer(Request& r, Deadline deadline) {
    Request* p = &r;
    transfer(std::span<Request* const>(&p, 1), deadline);
  }

  /// Without blocking: a peer whose next message, not awaited by any posted receive, has
  /// arrived with `tag`, looking from rank `from` on in rank order (wrapping), or -1 when none
  /// has. The message is left in place: a receive posted to that peer next takes it. This is
  /// how a receive from any peer picks its sender. Throws as test() does (a closed link);
  /// a mesh that cannot look (an algorithm's view of a subset of ranks) throws Internal.
  virtual int probe(std::uint32_t tag, int from);

  /// Without waiting: throws Error(PeerLost) naming a peer whose control connection says it
  /// died, Error(Aborted) for one that aborted, or the error that poisoned the mesh (which
  /// it then is). For work that runs outside the mesh (a device backend) while the peers'
  /// liveness is watched here; a poll of the control connections, a few microseconds.
  virtual void check_alive() = 0;
  /// Without waiting, and also once the mesh is poisoned: the peers whose control connection
  /// closed without a goodbye (they died), as far as this rank can tell now. What the
  /// survivors of a failure add to the ranks their error named (Communicator::agree_lost()).
  /// Call it from the thread that runs the mesh's operations, or while none runs.
  virtual std::vector<int> dead_peers() noexcept { return {}; }

  /// Poisons the mesh with `error`, tells every peer (an abort frame carrying the message),
  /// and drops every pending request. Idempotent; never throws. May be called from another
  /// thread while one is inside wait(): that wait throws `error` within one sleep slice.
  virtual void abort(const Error& error) noexcept = 0;
  /// The error that poisoned the mesh, or nullptr.
  virtual std::exception_ptr error() const noexcept = 0;
  /// Tells every peer that this rank leaves normally, then closes. Never throws.
  virtual void close() noexcept = 0;

  /// Registered memory shared with the peers reached through shm (transport/regions.hpp), or
  /// nullptr when there are none: then nothing is registered and algorithms use messages.
  /// It outlives the mesh while buffers allocated from it live.
  virtual const std::shared_ptr<RegionPool>& regions() const noexcept {
    static const std::shared_ptr<RegionPool> none;
    return none;
  }
};

/// Options of a Mesh, normally filled from TANDEM_* settings by the communicator.
/// How ranks on different hosts (and on one host without shared memory) are connected:
/// TANDEM_TRANSPORT. UCX is used between two ranks when both offer it: with `ucx`, or with
/// `automatic` when the host has an RDMA device and the build has UCX.
enum class NetTransport : std::uint8_t { automatic, tcp, ucx };

/// Reads keys of a store, all of them once every one is set (MeshOptions::read_keys).
using ReadKeys =
    std::function<std::vector<std::string>(std::span<const std::string> keys, Deadline deadline)>;

struct MeshOptions {
  bool shm_disable = false;                          ///< TANDEM_SHM_DISABLE
  NetTransport transport = NetTransport::automatic;  ///< TANDEM_TRANSPORT
  std::string socket_ifname;  ///< interfaces to listen on, NCCL's syntax (empty: auto)
  /// Where socket_ifname came from: TANDEM_SOCKET_IFNAME, else NCCL_SOCKET_IFNAME, else
  /// GLOO_SOCKET_IFNAME (named in messages and at TANDEM_DEBUG=INFO).
  std::string socket_ifname_source = "TANDEM_SOCKET_IFNAME";
  std::string token;  ///< TANDEM_STORE_TOKEN: authenticates peers
  std::chrono::nanoseconds spin_time{std::chrono::microseconds(50)};  ///< TANDEM_SPIN_US
  /// A waiting rank gives its CPU away (sched_yield) on every fruitless pass instead of every
  /// 16th: where ranks outnumber CPUs, the peer it waits for may need this very CPU.
  bool yield_always = false;
  /// TANDEM_SPIN_US=auto: connect_mesh() sets yield_always and a long spin_time when this host
  /// runs more ranks than the CPUs they may use (see oversubscribed()).
  bool spin_auto = true;
  /// TANDEM_BUFFSIZE: per shm channel; 0 (auto): shm_channel_bytes() of the host's ranks.
  std::size_t shm_buffer_bytes = 0;
  int sockets_per_peer = 1;  ///< TANDEM_SOCKETS_PER_PEER (tcp data streams)
  std::chrono::milliseconds connect_timeout{std::chrono::minutes(10)};
  /// Appended to this rank's PeerInfo::host_id: ranks with different labels are different
  /// hosts (tcp between them) even on one machine. Empty: the real host only.
  std::string host_label;
  /// Throws Error(PeerLost) when a rank is known to be gone (the communicator asks the store).
  /// Setup calls it after a failed dial, before a lost connection is reported, and every
  /// kLivenessPoll where no socket would tell (the host peers' segment attach); the mesh, while
  /// it dials a peer on demand. Empty: setup waits for the peers until connect_timeout.
  std::function<void()> check_peers;
  /// Reads keys of the setup store as Store::multi_get() does, but throws Error(PeerLost) as
  /// soon as a rank is known to be gone, in one store request however long it waits (the
  /// communicator's Store::multi_get_or_stop() on its lost-rank key). Empty: multi_get() in
  /// slices, with check_peers between them.
  ReadKeys read_keys;
};

/// How often a wait that no socket ends asks check_peers whether a rank is gone, and how long
/// setup waits for a lower peer's connection before it dials that peer itself.
inline constexpr auto kLivenessPoll = std::chrono::milliseconds(250);

/// How often a rank of a group of `size` asks the store whether a rank is gone while it
/// waits: every kLivenessPoll, and in a large group less often, so that all of its ranks
/// together ask about 4,000 times a second (16,384 ranks: every 4 s) and leave the store's one
/// thread free for the rest.
inline std::chrono::milliseconds liveness_period(int size) noexcept {
  return std::max<std::chrono::milliseconds>(kLivenessPoll, std::chrono::milliseconds(size / 4));
}

/// Whether `local_ranks` ranks of one host outnumber the CPUs they may run on: this process's
/// affinity mask, or every online CPU when the mask holds one CPU only (a launcher bound each
/// rank to a core of its own). `cpus_out` gets the count compared.
bool oversubscribed(int local_ranks, int* cpus_out = nullptr) noexcept;

/// TANDEM_BUFFSIZE=auto: the bytes of each shared-memory channel of a rank with `peers`
/// same-host peers. 4 MiB up to 7 peers; then 28 MiB over the peers, rounded down to a power
/// of two and at least 256 KiB, so that a rank's segment stays near 28 MiB and a host's
/// segments grow with its ranks instead of their square.
std::size_t shm_channel_bytes(std::size_t peers) noexcept;

/// Connects `rank` to the group through `store` (whose keys must already be namespaced for this
/// communicator), choosing shm for peers on the same host and tcp or ucx
/// (MeshOptions::transport) otherwise. Setup reads the addresses of setup_peers()
/// (transport/exchange.hpp) from the store, connects to them, gathers every other rank's
/// record from them, and connects the host's ranks over shm and the UCX peers. The other tcp
/// peers are connected at the first message to or from them, from either side. Blocks until
/// setup's links are up or the timeout passes.
std::unique_ptr<Mesh> connect_mesh(store::Store& store, int rank, int size,
                                   const MeshOptions& options);

}  // namespace tandem::transport
