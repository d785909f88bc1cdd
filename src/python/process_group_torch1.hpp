#pragma once
// The one torch-version-specific piece: backend "tandem" as a c10d::ProcessGroup subclass,
// the plugin API of torch 1.x (built and tested with 1.13.1). torch 2.x makes backends
// subclasses of c10d::Backend with the same virtual methods: a port replaces this file
// (and its two lines in module.cpp) and touches nothing else.

#include "python/group.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace tandem::python {

class ProcessGroupTandem final : public c10d::ProcessGroup {
 public:
  ProcessGroupTandem(std::shared_ptr<store::Store> store, int rank, int size,
                     std::chrono::milliseconds timeout);

  const std::string getBackendName() const override { return "tandem"; }

  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override;
  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override;
  WorkPtr allreduce_coalesced(Tensors& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override;
  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override;
  WorkPtr allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                    const c10d::AllgatherOptions& opts) override;
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override;
  WorkPtr gather(std::vector<Tensors>& outputs, Tensors& inputs,
                 const c10d::GatherOptions& opts) override;
  WorkPtr scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                  const c10d::ScatterOptions& opts) override;
  WorkPtr reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                         const c10d::ReduceScatterOptions& opts) override;
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override;
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input,
                        std::vector<std::int64_t>& output_splits,
                        std::vector<std::int64_t>& input_splits,
                        const c10d::AllToAllOptions& opts) override;
  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions& opts) override;
  WorkPtr send(Tensors& tensors, int dst, int tag) override;
  WorkPtr recv(Tensors& tensors, int src, int tag) override;
  WorkPtr recvAnysource(Tensors& tensors, int tag) override;
  WorkPtr barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override {}
  std::uint64_t getSequenceNumberForGroup() override { return group_.sequence_number(); }

  Group& group() noexcept { return group_; }

 private:
  Group group_;
};

}  // namespace tandem::python
