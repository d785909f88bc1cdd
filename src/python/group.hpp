#pragma once
// Every torch.distributed collective on a tandem Communicator, in terms that do not depend on
// the torch version: tensors and c10d option structs in, a c10d Work out. The version-specific
// c10d::Backend subclass (backend.cpp) only forwards its virtual methods here.

#include "python/tensors.hpp"

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
#include <vector>

namespace tandem::python {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using Tensors = std::vector<at::Tensor>;

class Group {
 public:
  /// Joins a communicator of `size` ranks through `store` (the torch.distributed store).
  Group(std::shared_ptr<store::Store> store, int rank, int size, std::chrono::milliseconds timeout);
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
  /// A barrier that fails at `timeout` with tandem's report of which ranks never arrived.
  void monitored_barrier(const c10d::BarrierOptions& opts);

  /// Collectives issued so far (torch's sequence number of the group).
  std::uint64_t sequence_number() const noexcept { return seq_.load(std::memory_order_relaxed); }
  /// Closes the communicator (graceful: the peers are told); later calls fail.
  void shutdown();
  /// Fails the calls in flight with Aborted now and closes the communicator; later calls
  /// fail too.
  void abort();
  /// The communicator, or Error(Aborted) after shutdown() or abort().
  std::shared_ptr<Communicator> comm();

 private:
  WorkPtr launch(c10d::OpType type, Tensors outputs, std::vector<std::shared_ptr<Work>> parts,
                 std::function<void()> on_success = {}, Tensors keep = {});
  WorkPtr alltoallv(const at::Tensor& out, const at::Tensor& in,
                    const std::vector<std::size_t>& send_counts,
                    const std::vector<std::size_t>& recv_counts, Tensors outputs,
                    std::function<void()> on_success, Tensors keep);

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;  // guards comm_ against shutdown()
  std::shared_ptr<Communicator> comm_;
  std::atomic<std::uint64_t> seq_{0};
  std::shared_ptr<StagingPool> pool_ = std::make_shared<StagingPool>();
};

}  // namespace tandem::python
