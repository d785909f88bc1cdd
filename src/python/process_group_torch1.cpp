#include "python/process_group_torch1.hpp"

#include <tandem/error.hpp>

namespace tandem::python {

ProcessGroupTandem::ProcessGroupTandem(std::shared_ptr<store::Store> store, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size), group_(std::move(store), rank, size, timeout) {
  init();
}

WorkPtr ProcessGroupTandem::broadcast(Tensors& t, const c10d::BroadcastOptions& o) {
  return group_.broadcast(t, o);
}
WorkPtr ProcessGroupTandem::allreduce(Tensors& t, const c10d::AllreduceOptions& o) {
  return group_.allreduce(t, o);
}
WorkPtr ProcessGroupTandem::allreduce_coalesced(Tensors& t,
                                                const c10d::AllreduceCoalescedOptions& o) {
  return group_.allreduce_coalesced(t, o);
}
WorkPtr ProcessGroupTandem::reduce(Tensors& t, const c10d::ReduceOptions& o) {
  return group_.reduce(t, o);
}
WorkPtr ProcessGroupTandem::allgather(std::vector<Tensors>& out, Tensors& in,
                                      const c10d::AllgatherOptions&) {
  return group_.allgather(out, in);
}
WorkPtr ProcessGroupTandem::_allgather_base(at::Tensor& out, at::Tensor& in,
                                            const c10d::AllgatherOptions&) {
  return group_.allgather_base(out, in);
}
WorkPtr ProcessGroupTandem::gather(std::vector<Tensors>& out, Tensors& in,
                                   const c10d::GatherOptions& o) {
  return group_.gather(out, in, o);
}
WorkPtr ProcessGroupTandem::scatter(Tensors& out, std::vector<Tensors>& in,
                                    const c10d::ScatterOptions& o) {
  return group_.scatter(out, in, o);
}
WorkPtr ProcessGroupTandem::reduce_scatter(Tensors& out, std::vector<Tensors>& in,
                                           const c10d::ReduceScatterOptions& o) {
  return group_.reduce_scatter(out, in, o);
}
WorkPtr ProcessGroupTandem::_reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::ReduceScatterOptions& o) {
  return group_.reduce_scatter_base(out, in, o);
}
WorkPtr ProcessGroupTandem::alltoall_base(at::Tensor& out, at::Tensor& in,
                                          std::vector<std::int64_t>& out_splits,
                                          std::vector<std::int64_t>& in_splits,
                                          const c10d::AllToAllOptions&) {
  return group_.alltoall_base(out, in, out_splits, in_splits);
}
WorkPtr ProcessGroupTandem::alltoall(Tensors& out, Tensors& in, const c10d::AllToAllOptions&) {
  return group_.alltoall(out, in);
}
WorkPtr ProcessGroupTandem::send(Tensors& t, int dst, int tag) {
  return group_.send(t, dst, tag);
}
WorkPtr ProcessGroupTandem::recv(Tensors& t, int src, int tag) {
  return group_.recv(t, src, tag);
}
WorkPtr ProcessGroupTandem::recvAnysource(Tensors&, int) {
  TANDEM_THROW(ErrorCode::InvalidArgument,
               "recv without a source rank is not supported by backend 'tandem' (its receives "
               "are matched per peer, in order): pass src=");
}
WorkPtr ProcessGroupTandem::barrier(const c10d::BarrierOptions& o) {
  return group_.barrier(o);
}
void ProcessGroupTandem::monitoredBarrier(const c10d::BarrierOptions& o, bool) {
  group_.monitored_barrier(o);
}

}  // namespace tandem::python
