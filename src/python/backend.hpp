#pragma once
// Backend "tandem" as torch 2.x sees it: a c10d::Backend, registered for devices cpu and cuda
// (torch.distributed wraps it in a c10d::ProcessGroup per group). Its virtual methods forward
// to Group, which holds every collective; the differences between torch releases are in
// torch_compat.hpp.

#include "python/group.hpp"
#include "python/torch_compat.hpp"

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::python {

class BackendTandem final : public c10d::Backend {
 public:
  /// A group of `size` ranks through `store`, this one `rank`. With `enable_reconfigure`
  /// (torch 2.14's regime) it has no members until reconfigure(); `stable_rank` (the rank in
  /// the default group) then tells this process's handle apart.
  BackendTandem(std::shared_ptr<store::Store> store, int rank, int size,
                std::chrono::milliseconds timeout, bool enable_reconfigure = false,
                int stable_rank = -1);
  /// A backend over a communicator made already (shrink()), reconfigurable through `store`.
  BackendTandem(std::shared_ptr<Communicator> comm, std::shared_ptr<store::Store> store);

  const std::string getBackendName() const override { return "tandem"; }
  /// batch_isend_irecv and _coalescing_manager bracket their calls with start/endCoalescing.
  bool supportsCoalescing() const TANDEM_OVERRIDE_SINCE_2_7 { return true; }
  void startCoalescing() override { group_.start_coalescing(); }
  WorkPtr endCoalescing() override { return group_.end_coalescing(); }

  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override;
  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override;
  WorkPtr allreduce_coalesced(Tensors& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override;
  /// A sparse COO tensor, SUM or AVG (DDP's sparse gradients).
  WorkPtr allreduce_sparse(Tensors& tensors, const c10d::AllreduceOptions& opts) override;
  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override;
  WorkPtr allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                    const c10d::AllgatherOptions& opts) override;
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override;
  WorkPtr allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs,
                              const c10d::AllgatherOptions& opts) override;
  WorkPtr allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllgatherOptions& opts) override;
  WorkPtr gather(std::vector<Tensors>& outputs, Tensors& inputs,
                 const c10d::GatherOptions& opts) override;
  WorkPtr scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                  const c10d::ScatterOptions& opts) override;
  WorkPtr reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                         const c10d::ReduceScatterOptions& opts) override;
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override;
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
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

  /// destroy_process_group: closes the communicator; the peers are told this rank left on
  /// purpose, and this group's later calls fail with Aborted.
  void shutdown() TANDEM_OVERRIDE_SINCE_2_7;
  /// _abort_process_group / ProcessGroup.abort(): fails this rank's pending and later calls
  /// with Aborted at once and tells the peers, whose calls fail with Aborted naming it.
  void abort() TANDEM_OVERRIDE_SINCE_2_7;

#if TANDEM_HAVE_BACKEND_SPLIT
  /// ProcessGroup.set_timeout: the timeout of the calls made from now on.
  void setTimeout(std::chrono::milliseconds timeout) override {
    group_.set_timeout(timeout);
  }
  bool supportsSplitting() const override {
    return true;
  }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  /// ProcessGroup.split_group: a group of `ranks` (ranks of this group) over `store`, or
  /// nullptr on a rank that is not one of them. Torch may ask once per device type: each
  /// asks for the same group (opts->group_name), which is made once.
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  /// ProcessGroup.merge_remote_group: a group of `size` ranks over `store`, this one `rank`.
  c10::intrusive_ptr<c10d::Backend> merge(const c10::intrusive_ptr<c10d::Store>& store,
                                          const c10::intrusive_ptr<Options>& opts, const int& rank,
                                          const int& size) override;
#endif
#if TANDEM_HAVE_BACKEND_SHRINK
  bool supportsShrinking() const override {
    return true;
  }
  /// dist.shrink_group: the group of this one's ranks but `ranks_to_exclude`, renumbered in
  /// order (Communicator::shrink). Only the remaining ranks call it; the excluded ones may be
  /// dead. SHRINK_ABORT (shrink_flags 1) fails this group's calls in flight first.
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<std::int64_t>& ranks_to_exclude,
                                           int shrink_flags,
                                           const c10::intrusive_ptr<Options>& opts) override;
#endif

#if TANDEM_HAVE_BACKEND_RECONFIGURE
  bool supportsReconfigure() const override {
    return true;
  }
  /// "tandem:<stable rank, 10 digits>:<uuid of the current members, -1 before any>:<host>:
  /// <pid>": unique to this process and configuration; sorted, the handles of a set order the
  /// members by stable rank.
  c10d::ReconfigureHandle get_reconfigure_handle() const override;
  /// dist._reconfigure: a new communicator of the members whose handles opts.handles lists
  /// (this rank is its handle's position; in a set, in sorted order), set up through this
  /// group's store under "tandem/reconfigure/<uuid>" within opts.timeout (default: the
  /// group's). Blocking; the work returned has completed. opts.hints are not used.
  c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions& opts) override;
#endif

  // What only ProcessGroupNCCL has: refused, saying what does the same here.
  void waitForPendingWorks() override;
  void enableCollectivesTiming() override;

  Group& group() noexcept {
    return group_;
  }

 private:
  Group group_;
  std::shared_ptr<store::Store> store_;  ///< for reconfigure(); torch's, under the group's prefix
  int stable_rank_;
  std::int64_t uuid_ = -1;  ///< of the current members (reconfigure()); -1 before any
#if TANDEM_HAVE_BACKEND_SPLIT
  std::mutex splits_mutex_;
  /// The groups split() made, by name, while they live.
  std::map<std::string, c10::weak_intrusive_ptr<BackendTandem>> splits_;
#endif
};

}  // namespace tandem::python
