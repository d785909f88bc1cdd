#pragma once
// Every torch.distributed collective on a tandem Communicator, in terms that do not depend on
// the torch version: tensors and c10d option structs in, a c10d Work out. The version-specific
// c10d::Backend subclass (backend.cpp) only forwards its virtual methods here.

#include "python/tensors.hpp"
#include "python/work.hpp"

#include <tandem/communicator.hpp>

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/ATen.h>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::python {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using Tensors = std::vector<at::Tensor>;

class Group {
 public:
  /// When the communicator is made: at construction, or at the first reconfigure()
  /// (torch 2.14's enable_reconfigure, where the first members are chosen later).
  enum class Start { now, at_reconfigure };
  /// Joins a communicator of `size` ranks through `store` (the torch.distributed store), or,
  /// with Start::at_reconfigure, only keeps `rank`, `size` and `timeout` until reconfigure().
  Group(std::shared_ptr<store::Store> store, int rank, int size, std::chrono::milliseconds timeout,
        Start start = Start::now);
  /// A group over a communicator made already (shrink()).
  explicit Group(std::shared_ptr<Communicator> comm);
  ~Group();

  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts);
  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts);
  WorkPtr allreduce_coalesced(Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts);
  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts);
  WorkPtr allgather(std::vector<Tensors>& outputs, Tensors& inputs);
  WorkPtr allgather_base(at::Tensor& output, at::Tensor& input);
  WorkPtr gather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::GatherOptions& opts);
  WorkPtr scatter(Tensors& outputs, std::vector<Tensors>& inputs, const c10d::ScatterOptions& opts);
  WorkPtr reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                         const c10d::ReduceScatterOptions& opts);
  WorkPtr reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                              const c10d::ReduceScatterOptions& opts);
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input,
                        std::vector<std::int64_t>& output_splits,
                        std::vector<std::int64_t>& input_splits);
  WorkPtr alltoall(Tensors& outputs, Tensors& inputs);
  WorkPtr send(Tensors& tensors, int dst, int tag);
  WorkPtr recv(Tensors& tensors, int src, int tag);
  WorkPtr barrier(const c10d::BarrierOptions& opts);

  // ---- torch 2.x's coalesced calls and coalescing blocks (coalesced.cpp) -----------------
  /// all_gather_coalesced: outputs[r][i] receives rank r's inputs[i] (any dtypes and shapes,
  /// one exchange for all of them).
  WorkPtr allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs);
  /// all_gather_into_tensor for each pair (outputs[i], inputs[i]), under one Work.
  WorkPtr allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs);
  /// reduce_scatter_tensor for each pair (outputs[i], inputs[i]), under one Work.
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::ReduceScatterOptions& opts);
  /// Opens a coalescing block (batch_isend_irecv, _coalescing_manager): the calls that follow
  /// run as they are issued, as always (sends and receives progress together), and
  /// end_coalescing() returns one Work that completes when all of them have. Throws
  /// Error(InvalidArgument) when a block is open already.
  void start_coalescing();
  /// Closes the block: one Work over every call since start_coalescing() (a completed one
  /// when there was none). Throws Error(InvalidArgument) when no block is open.
  WorkPtr end_coalescing();
  /// all_reduce of one sparse COO tensor (sparse.cpp): SUM or AVG; the tensor receives the
  /// coalesced result. Blocks until every rank's count of nonzeros is known.
  WorkPtr allreduce_sparse(Tensors& tensors, const c10d::AllreduceOptions& opts);
  /// A barrier that fails at `timeout` with tandem's report of which ranks never arrived.
  void monitored_barrier(const c10d::BarrierOptions& opts);

  /// The timeout of the calls made from now on (and of Work::wait() without one).
  void set_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const noexcept { return timeout_.get(); }
  /// Collectives issued so far (torch's sequence number of the group).
  std::uint64_t sequence_number() const noexcept { return seq_.load(std::memory_order_relaxed); }
  /// Closes the communicator (graceful: the peers are told); later calls fail.
  void shutdown();
  /// The communicator of this group's ranks but `exclude` (Communicator::shrink), with
  /// `timeout`; with `abort_first`, this group's calls in flight are failed first (and this
  /// group is aborted).
  std::shared_ptr<Communicator> shrink(std::span<const int> exclude, bool abort_first,
                                       std::chrono::milliseconds timeout);
  /// Replaces the communicator with a new one of `size` ranks, this one `rank`, set up
  /// through `store` under `prefix` within `setup_timeout`; the calls made afterwards keep
  /// this group's timeout. The previous communicator (if any) is closed, its peers told, off
  /// the calling thread. When the setup fails the group is left as it was. No call of this
  /// group may be in flight.
  void reconfigure(std::shared_ptr<store::Store> store, std::string prefix, int rank, int size,
                   std::chrono::milliseconds setup_timeout);
  /// Fails the calls in flight with Aborted now and tells the peers; later calls fail too.
  /// The communicator's threads and memory are released after the return, on the thread that
  /// completes futures (run_later()).
  void abort();
  /// The communicator, or Error(Aborted) after shutdown() or abort().
  std::shared_ptr<Communicator> comm();

 private:
  WorkPtr launch(c10d::OpType type, Tensors outputs, std::vector<std::shared_ptr<Work>> parts,
                 std::function<void()> on_success = {}, Tensors keep = {});
  /// One tensor-to-tensor all_gather or reduce_scatter, submitted: its operation, what
  /// completes it (copy-back) and what it keeps alive. The single and coalesced calls share
  /// them.
  struct Piece {
    std::shared_ptr<Work> part;
    std::function<void()> done;
    Tensors keep;
  };
  Piece allgather_piece(const at::Tensor& output, const at::Tensor& input);
  Piece reduce_scatter_piece(const at::Tensor& output, const at::Tensor& input,
                             const c10d::ReduceOp& op);
  WorkPtr launch_pieces(c10d::OpType type, Tensors outputs, std::vector<Piece> pieces);
  WorkPtr alltoallv(const at::Tensor& out, const at::Tensor& in,
                    const std::vector<std::size_t>& send_counts,
                    const std::vector<std::size_t>& recv_counts, Tensors outputs,
                    std::function<void()> on_success, Tensors keep);

  int rank_;
  int size_;
  SharedTimeout timeout_;  ///< the communicator's, readable after shutdown()
  std::mutex mutex_;       // guards comm_ against shutdown()
  std::shared_ptr<Communicator> comm_;
  /// False until the first reconfigure() of a Start::at_reconfigure group.
  bool configured_ = true;
  std::atomic<std::uint64_t> seq_{0};
  std::shared_ptr<StagingPool> pool_ = std::make_shared<StagingPool>();
  std::mutex block_mutex_;  // guards the coalescing block
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<TandemWork>> block_;
};

}  // namespace tandem::python
