#pragma once
/// @file communicator.hpp
/// The Communicator (process group): every collective, blocking and asynchronous,
/// over shared memory between ranks of one host and TCP between hosts.
///
/// Rules, as in NCCL and Gloo:
///  - every rank calls the same collectives, in the same order, with matching
///    dtype/count/root; collectives on one communicator run in call order;
///  - send/recv are ordered with the collectives of the same communicator;
///  - nothing waits forever: every operation has a deadline (TANDEM_TIMEOUT, default 600 s);
///  - when a peer dies or fails, every pending and later operation fails with
///    Error(PeerLost) naming that peer: the communicator is poisoned and must be rebuilt.
///    The first failure of any operation poisons it the same way (its peers are told);
///  - blocking calls run on the calling thread when nothing is queued; asynchronous calls
///    run on one worker thread per communicator, in call order with the blocking ones;
///  - at TANDEM_DEBUG=DETAIL the ranks compare every collective call before running it, so
///    that mismatched calls fail at once with Error(Mismatch) listing each rank's call.

#include <tandem/error.hpp>
#include <tandem/shared_buffer.hpp>
#include <tandem/store.hpp>
#include <tandem/types.hpp>
#include <tandem/work.hpp>

#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

/// recv()'s `peer` for a message from any rank (MPI_ANY_SOURCE).
inline constexpr int kAnySource = -1;

/// Options fixed when a communicator is created. Defaults come from TANDEM_* settings.
struct CommOptions {
  /// Deadline of every operation (TANDEM_TIMEOUT).
  std::optional<std::chrono::milliseconds> timeout;
  /// Force shared memory off (TANDEM_SHM_DISABLE); ranks on one host then use TCP.
  std::optional<bool> shm_disable;
  /// Force algorithms, in TANDEM_ALGO's syntax: "ring" (every collective that has one) or
  /// "allreduce=ring,broadcast=tree". Where the named algorithm does not support a call the
  /// selector chooses (logged once at INFO). Replaces TANDEM_ALGO when set.
  std::optional<std::string> algorithm;
  /// Namespace of this communicator's keys in the store (default "tandem/r<restart>/world",
  /// from TANDEM_RESTART_COUNT). Creating several communicators of one group over one store
  /// is fine: each rank numbers the ones it creates under a prefix, and the n-th of every
  /// rank belong together.
  std::string store_prefix;
  /// Emulated host: ranks of one machine with different labels are treated as different
  /// hosts (TCP between them, host-aware algorithms across them), as if each label were a
  /// machine of its own. For tests and for trying a multi-host layout on one machine; empty
  /// (the default) means the real host only.
  std::string host_label;
  /// Asynchronous operations do not wake the worker thread at once: the first Work::wait()
  /// runs the operation on the waiting thread, and the worker, polling while operations keep
  /// coming (every `lazy_start` at first, each poll that finds nothing doubling the period up
  /// to 256 x `lazy_start`, sleeping once a whole such period passed without a call), starts
  /// those nobody waited for. It is woken at once for a send or receive, for an operation
  /// queued behind one nobody started, for a wait() behind such operations, and by
  /// Work::start(). For callers that mostly wait right away, such as torch.distributed's
  /// blocking calls: a thread wake-up per call costs several times a small collective, and on
  /// a host with as many ranks as cores every poll preempts a rank mid-collective. It adapts:
  /// once the worker finds an operation nobody waited for, the next ones wake it at once
  /// again, until a waiter runs one itself. Zero (the default): the worker is woken at once.
  std::chrono::microseconds lazy_start{0};
};

/// Per-call options.
struct CallOptions {
  /// Deadline of this call instead of the communicator's timeout.
  std::optional<Deadline> deadline;
  /// Algorithm for this call (overrides TANDEM_ALGO); the call fails with InvalidArgument
  /// if that algorithm does not support it.
  std::string_view algorithm;
  /// Buffers on a CUDA device: the stream (a cudaStream_t) the caller's kernels that write
  /// and read them run on. The collective starts after the work enqueued on it so far, and
  /// the work enqueued on it afterwards starts after the collective. nullptr: the legacy
  /// default stream. Host buffers ignore it.
  void* stream = nullptr;
};

/// A group of `size()` processes that communicate. Create it with create() or from_env().
class Communicator {
 public:
  /// Joins a group of `size` ranks that rendezvous through `store`. Blocks until every rank
  /// has joined and connections are established, or the timeout passes.
  static std::shared_ptr<Communicator> create(std::shared_ptr<store::Store> store, int rank,
                                              int size, CommOptions options = {});

  /// Creates the world communicator from the launcher's environment: tandemrun and torchrun
  /// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Slurm's srun
  /// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...) and mpirun (OMPI_COMM_WORLD_*, PMI_*).
  /// Rank 0 hosts the store at MASTER_ADDR:MASTER_PORT unless a launcher already hosts one.
  static std::shared_ptr<Communicator> from_env(CommOptions options = {});

  /// Says goodbye to the peers (so that ranks which exit normally are not reported as lost)
  /// and releases every resource. Pending asynchronous work is failed with Aborted.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const noexcept;
  int size() const noexcept;
  /// Rank among the ranks of this host, and how many ranks this host has.
  int local_rank() const noexcept;
  int local_size() const noexcept;

  // ---- allreduce: out[i] = op over ranks of in[i] (in == out for in-place) ------------
  void allreduce(BufferView buf, ReduceOp op = ReduceOp::sum, const CallOptions& o = {});
  void allreduce(BufferView in, BufferView out, ReduceOp op, const CallOptions& o = {});
  std::shared_ptr<Work> allreduce_async(BufferView in, BufferView out, ReduceOp op,
                                        const CallOptions& o = {});

  // ---- broadcast: root's buffer to every rank -------------------------------------------
  void broadcast(BufferView buf, int root, const CallOptions& o = {});
  /// Out-of-place: `in` is read on the root only, every rank receives into `out`.
  void broadcast(BufferView in, BufferView out, int root, const CallOptions& o = {});
  std::shared_ptr<Work> broadcast_async(BufferView in, BufferView out, int root,
                                        const CallOptions& o = {});

  // ---- reduce: the reduction lands in root's `out` (other ranks' `out` is untouched) ----
  void reduce(BufferView in, BufferView out, ReduceOp op, int root, const CallOptions& o = {});
  std::shared_ptr<Work> reduce_async(BufferView in, BufferView out, ReduceOp op, int root,
                                     const CallOptions& o = {});

  // ---- allgather: out = concat over ranks of in (out.count = size() * in.count) ---------
  /// In-place when in.data == out.data + rank() * in.bytes().
  void allgather(BufferView in, BufferView out, const CallOptions& o = {});
  std::shared_ptr<Work> allgather_async(BufferView in, BufferView out, const CallOptions& o = {});

  /// Variable counts: rank r contributes counts[r] elements; out holds them back to back.
  void allgatherv(BufferView in, BufferView out, std::span<const std::size_t> counts,
                  const CallOptions& o = {});
  std::shared_ptr<Work> allgatherv_async(BufferView in, BufferView out,
                                         std::span<const std::size_t> counts,
                                         const CallOptions& o = {});

  // ---- reduce_scatter: rank r gets block r of the reduction (in.count = size()*out.count)
  /// In-place when out.data == in.data + rank() * out.bytes().
  void reduce_scatter(BufferView in, BufferView out, ReduceOp op, const CallOptions& o = {});
  std::shared_ptr<Work> reduce_scatter_async(BufferView in, BufferView out, ReduceOp op,
                                             const CallOptions& o = {});

  // ---- alltoall: block j of in goes to rank j, arriving as block rank() of its out -----
  void alltoall(BufferView in, BufferView out, const CallOptions& o = {});
  std::shared_ptr<Work> alltoall_async(BufferView in, BufferView out, const CallOptions& o = {});

  // ---- gather / scatter -------------------------------------------------------------------
  /// root's out (size() * in.count elements) receives every rank's in.
  void gather(BufferView in, BufferView out, int root, const CallOptions& o = {});
  std::shared_ptr<Work> gather_async(BufferView in, BufferView out, int root,
                                     const CallOptions& o = {});
  /// Block r of root's in (size() * out.count elements) lands in rank r's out.
  void scatter(BufferView in, BufferView out, int root, const CallOptions& o = {});
  std::shared_ptr<Work> scatter_async(BufferView in, BufferView out, int root,
                                      const CallOptions& o = {});

  // ---- point to point (ordered with the collectives of this communicator) ---------------
  /// The tag must match between sender and receiver, as must the count and dtype. Blocking
  /// send() may wait until the peer receives (large messages). Asynchronous sends and receives
  /// are posted in call order and progress together: a rank may post a recv_async and then a
  /// send_async (a ring exchange) before waiting for either.
  ///
  /// recv() and recv_async() take `peer` = kAnySource to receive from whichever rank's
  /// message (with this tag, count and dtype) arrives first; Work::source() then names it.
  /// Until it has matched a message, the receives and collectives called after it on this
  /// communicator wait (sends do not): the first message of each peer is its to take. A
  /// collective that a matching sender calls first therefore waits for that send; if the
  /// sender only sends after the collective, the collective fails at its deadline. Host
  /// buffers only; any peer dying fails it with PeerLost.
  void send(BufferView buf, int peer, std::uint32_t tag = 0, const CallOptions& o = {});
  /// Returns the sender: `peer`, or for kAnySource the rank whose message it took.
  int recv(BufferView buf, int peer, std::uint32_t tag = 0, const CallOptions& o = {});
  std::shared_ptr<Work> send_async(BufferView buf, int peer, std::uint32_t tag = 0,
                                   const CallOptions& o = {});
  std::shared_ptr<Work> recv_async(BufferView buf, int peer, std::uint32_t tag = 0,
                                   const CallOptions& o = {});

  // ---- barrier ------------------------------------------------------------------------------
  void barrier(const CallOptions& o = {});
  std::shared_ptr<Work> barrier_async(const CallOptions& o = {});

  // ---- registered memory ----------------------------------------------------------------
  /// Collective: every rank calls it in the same order with the same `bytes`. Returns
  /// zero-filled memory that the same-host peers map too (SharedBuffer::shared()), or
  /// private memory when this rank has no same-host peer over shared memory. Collectives
  /// whose buffers lie in registered memory on every rank run one-copy: an allreduce reads
  /// the peers' buffers directly instead of passing data through the transport. Throws
  /// Error(InvalidArgument) when the ranks ask for different sizes, Error(Io) when /dev/shm
  /// is too small, Error(Timeout)/Error(PeerLost) when a peer does not take part. Not
  /// ordered with queued asynchronous work (it does not touch buffers in use).
  SharedBuffer allocate(std::size_t bytes);

  /// Collective over this communicator: ranks with the same `color` form a new communicator,
  /// ordered by (key, rank). Returns nullptr for color < 0. The new one follows this one's
  /// shrinks (shrink(), successor()).
  std::shared_ptr<Communicator> split(int color, int key);
  /// The communicator that replaced this one when the communicator it was split from shrank
  /// without some of its ranks: shrink() of the parent shrinks each child that had one of
  /// them as a member (without them, renumbered in order) and passes the others on unchanged
  /// (their successor() stays nullptr). nullptr while nothing replaced it. A child made by
  /// split() on a shrunk parent follows that parent in turn; children of children follow
  /// their parents.
  std::shared_ptr<Communicator> successor() const;

  /// The ranks of this communicator but `exclude`, as a new communicator (NCCL's
  /// ncclCommShrink, torch's shrink_group): renumbered in order, the lowest remaining rank
  /// becoming 0, over this communicator's store, with its options and timeout. A collective
  /// of the remaining ranks only: the excluded ones make no call and may be dead. The usual
  /// case is a communicator that failed with PeerLost, shrunk by its survivors without the
  /// rank the error names; a healthy one can be shrunk too. No operation runs on this
  /// communicator, which stays as it was: destroy it (or abort() it first, to fail the calls
  /// still in flight). It ends with a barrier of the new communicator, so that a remaining
  /// rank lost during the shrink fails it with PeerLost on every survivor. The communicators
  /// split from this one that are still alive follow: each that had an excluded member is
  /// shrunk too, in the order they were made (successor()), before shrink() returns; a death
  /// in one of those shrinks fails this one with PeerLost as well. Every remaining rank
  /// must pass the same ranks and shrink the same communicator the same number of times: ranks that
  /// disagree make different communicators, whose setup fails at the timeout naming the ranks it
  /// waited for. Throws InvalidArgument for a rank out of range or named twice, and for this rank
  /// itself (an excluded rank does not call shrink).
  std::shared_ptr<Communicator> shrink(std::span<const int> exclude);
  /// The ranks the survivors of a PeerLost agree to leave out, for survivors that may not all
  /// have heard of every death (two ranks lost at once): each publishes lost_ranks() through
  /// the store, and the first to have every rank accounted for decides for all (a
  /// compare-and-set). A rank is accounted for when it published its own view (alive), or
  /// when some view names it or its connection to this rank closed without a goodbye (lost). The
  /// decision: the ranks found lost, and those that neither published nor were found lost by the
  /// time `wait` ran out (the communicator's timeout when empty). A collective of the survivors;
  /// the n-th call of each meets the n-th of the others. Throws Error(PeerLost) on a rank the
  /// others left out (it asked after they decided). What shrink() or torch's shrink_group then
  /// take.
  std::vector<int> agree_lost(std::optional<std::chrono::milliseconds> wait = std::nullopt);
  /// shrink(agree_lost(wait)); `left_out`, when given, receives the ranks left out. A rank
  /// that died after it published makes the shrunk communicator's setup fail with PeerLost:
  /// call it again on the same communicator.
  std::shared_ptr<Communicator> shrink_lost(
      std::optional<std::chrono::milliseconds> wait = std::nullopt,
      std::vector<int>* left_out = nullptr);
  /// Admits the processes waiting in join() on this group (at most `max_joiners`), as a new
  /// communicator of this one's ranks, numbered as they are, followed by the newcomers in the
  /// order they asked; nullptr, after no store wait, when nobody is waiting. A collective of
  /// this communicator: every rank calls it at the same point, which makes it the step
  /// boundary where newcomers arrive (a training loop can call it every step: when nobody
  /// waits it costs rank 0 one store request and the others a small broadcast). Like shrink(),
  /// this communicator stays as it was, and the new one ends with a barrier, so that a
  /// newcomer lost during its setup fails it on every rank with PeerLost. Admits only into
  /// the world communicator (create(), from_env()) and those shrunk or grown from it: a split
  /// one throws InvalidArgument. `wait`: how long rank 0 waits for a first newcomer when
  /// nobody is waiting yet (zero: not at all); the others wait for rank 0's answer within the
  /// communicator's timeout, so `wait` must be shorter (InvalidArgument otherwise).
  std::shared_ptr<Communicator> grow(
      int max_joiners = std::numeric_limits<int>::max(),
      std::chrono::milliseconds wait = std::chrono::milliseconds::zero());
  /// Tells the processes waiting in join() on this group, and those that ask later, that it
  /// admits nobody any more (its job is ending): their join() throws Error(Aborted) saying
  /// so. Any one rank may call it; a store request.
  void stop_admitting();
  /// Joins a running group as a new rank: asks through `store` (the group's, with its
  /// options.store_prefix, default "tandem/r<restart>/world") and waits, until
  /// options.timeout (TANDEM_TIMEOUT), for the group's ranks to admit it in grow(); returns
  /// the communicator that grow() makes on them. What a replacement for a lost rank calls
  /// (from_env() does with TANDEM_JOIN=1); it then usually takes the model from a peer
  /// (tandem::torch::share_state). Throws Error(Timeout), and stops asking, when nobody
  /// admitted it in time, and Error(Aborted) when the group stopped admitting
  /// (stop_admitting()). A process that dies while it waits is skipped.
  static std::shared_ptr<Communicator> join(std::shared_ptr<store::Store> store,
                                            CommOptions options = {});
  /// True for the communicator join() returned: this process arrived in a running group.
  bool joined() const noexcept;

  /// After this communicator failed with PeerLost: the ranks its error names as lost (as
  /// "rank N (host H, pid P)"), in the order named, each once: what the survivors pass to
  /// shrink(). Empty while it is healthy or when it failed for another reason.
  std::vector<int> lost_ranks() const;

  /// Fails every pending and later operation with Error(Aborted) carrying `reason`, and tells
  /// the peers, which fail theirs with Error(Aborted) naming this rank. Safe to call from any
  /// thread, also while another thread is blocked in a collective of this communicator.
  void abort(std::string_view reason);
  /// True once the communicator failed or was aborted; error() says why.
  bool poisoned() const noexcept;
  std::exception_ptr error() const;

  /// "shm" or "tcp": how this rank reaches `peer` ("self" for its own rank).
  std::string_view transport_to(int peer) const;
  /// Name of the algorithm the selector would run for this call shape (tools, debugging),
  /// TANDEM_ALGO / CommOptions::algorithm and TANDEM_TUNING_FILE included; "local" on a
  /// one-rank communicator.
  /// `bytes` counts f32 elements as nccl-tests does: the whole output of allgather and
  /// gather, the whole input of reduce_scatter and scatter, the buffer otherwise.
  std::string_view algorithm_for(CollectiveKind kind, std::size_t bytes) const;
  /// Name of the algorithm that ran this communicator's most recent collective or blocking
  /// operation that succeeded: the ring where a direct algorithm found the buffers not
  /// registered on every rank; the device backend ("nccl") for a call on device memory; ""
  /// before any, "local" on a one-rank communicator.
  std::string_view last_algorithm() const noexcept;
  /// The communicator's default timeout.
  std::chrono::milliseconds timeout() const noexcept;
  /// Sets the timeout of the calls made from now on (the deadline of each call counts from
  /// when it is made; calls already made keep theirs), and of everything that waits on this
  /// communicator's behalf: its store's waits, the stall report (which names the timeout),
  /// the device backend's waits. Throws Error(InvalidArgument) for a timeout that is not
  /// positive.
  void set_timeout(std::chrono::milliseconds timeout);
  /// The timeout as a handle that follows set_timeout() (and stays readable after the
  /// communicator is gone).
  SharedTimeout shared_timeout() const noexcept;
  /// The store this communicator rendezvoused through.
  const std::shared_ptr<store::Store>& store() const noexcept;

  struct Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
