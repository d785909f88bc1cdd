#include "python/backend.hpp"

#include <tandem/error.hpp>

namespace tandem::python {

BackendTandem::BackendTandem(std::shared_ptr<store::Store> store, int rank, int size,
                             std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), group_(std::move(store), rank, size, timeout) {}

WorkPtr BackendTandem::broadcast(Tensors& t, const c10d::BroadcastOptions& o) {
  return group_.broadcast(t, o);
}
WorkPtr BackendTandem::allreduce(Tensors& t, const c10d::AllreduceOptions& o) {
  return group_.allreduce(t, o);
}
WorkPtr BackendTandem::allreduce_coalesced(Tensors& t, const c10d::AllreduceCoalescedOptions& o) {
  return group_.allreduce_coalesced(t, o);
}
WorkPtr BackendTandem::reduce(Tensors& t, const c10d::ReduceOptions& o) {
  return group_.reduce(t, o);
}
WorkPtr BackendTandem::allgather(std::vector<Tensors>& out, Tensors& in,
                                 const c10d::AllgatherOptions&) {
  return group_.allgather(out, in);
}
WorkPtr BackendTandem::_allgather_base(at::Tensor& out, at::Tensor& in,
                                       const c10d::AllgatherOptions&) {
  return group_.allgather_base(out, in);
}
WorkPtr BackendTandem::allgather_coalesced(std::vector<Tensors>& out, Tensors& in,
                                           const c10d::AllgatherOptions&) {
  return group_.allgather_coalesced(out, in);
}
WorkPtr BackendTandem::allgather_into_tensor_coalesced(Tensors& out, Tensors& in,
                                                       const c10d::AllgatherOptions&) {
  return group_.allgather_into_tensor_coalesced(out, in);
}
WorkPtr BackendTandem::gather(std::vector<Tensors>& out, Tensors& in,
                              const c10d::GatherOptions& o) {
  return group_.gather(out, in, o);
}
WorkPtr BackendTandem::scatter(Tensors& out, std::vector<Tensors>& in,
                               const c10d::ScatterOptions& o) {
  return group_.scatter(out, in, o);
}
WorkPtr BackendTandem::reduce_scatter(Tensors& out, std::vector<Tensors>& in,
                                      const c10d::ReduceScatterOptions& o) {
  return group_.reduce_scatter(out, in, o);
}
WorkPtr BackendTandem::_reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                            const c10d::ReduceScatterOptions& o) {
  return group_.reduce_scatter_base(out, in, o);
}
WorkPtr BackendTandem::reduce_scatter_tensor_coalesced(Tensors& out, Tensors& in,
                                                       const c10d::ReduceScatterOptions& o) {
  return group_.reduce_scatter_tensor_coalesced(out, in, o);
}
WorkPtr BackendTandem::alltoall_base(at::Tensor& out, at::Tensor& in,
                                     std::vector<std::int64_t>& out_splits,
                                     std::vector<std::int64_t>& in_splits,
                                     const c10d::AllToAllOptions&) {
  return group_.alltoall_base(out, in, out_splits, in_splits);
}
WorkPtr BackendTandem::alltoall(Tensors& out, Tensors& in, const c10d::AllToAllOptions&) {
  return group_.alltoall(out, in);
}
WorkPtr BackendTandem::send(Tensors& t, int dst, int tag) {
  return group_.send(t, dst, tag);
}
WorkPtr BackendTandem::recv(Tensors& t, int src, int tag) {
  return group_.recv(t, src, tag);
}
WorkPtr BackendTandem::recvAnysource(Tensors&, int) {
  TANDEM_THROW(ErrorCode::InvalidArgument,
               "recv without a source rank is not supported by backend 'tandem' (its receives "
               "are matched per peer, in order): pass src=");
}
WorkPtr BackendTandem::barrier(const c10d::BarrierOptions& o) {
  return group_.barrier(o);
}
void BackendTandem::shutdown() {
  group_.shutdown();
}
void BackendTandem::abort() {
  group_.abort();
}
void BackendTandem::monitoredBarrier(const c10d::BarrierOptions& o, bool) {
  group_.monitored_barrier(o);
}

}  // namespace tandem::python
