#include "python/backend.hpp"

#include "python/store_adapter.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <unistd.h>
#include <unordered_set>
#include <variant>
#include <vector>

namespace tandem::python {

BackendTandem::BackendTandem(std::shared_ptr<store::Store> store, int rank, int size,
                             std::chrono::milliseconds timeout, bool enable_reconfigure,
                             int stable_rank)
    : c10d::Backend(rank, size),
      group_(store, rank, size, timeout,
             enable_reconfigure ? Group::Start::at_reconfigure : Group::Start::now),
      store_(std::move(store)),
      stable_rank_(stable_rank >= 0 ? stable_rank : rank) {}

BackendTandem::BackendTandem(std::shared_ptr<Communicator> comm,
                             std::shared_ptr<store::Store> store)
    : c10d::Backend(comm->rank(), comm->size()),
      group_(std::move(comm)),
      store_(std::move(store)),
      stable_rank_(getRank()) {}

WorkPtr BackendTandem::broadcast(Tensors& t, const c10d::BroadcastOptions& o) {
  return group_.broadcast(t, o);
}
WorkPtr BackendTandem::allreduce(Tensors& t, const c10d::AllreduceOptions& o) {
  return group_.allreduce(t, o);
}
WorkPtr BackendTandem::allreduce_coalesced(Tensors& t, const c10d::AllreduceCoalescedOptions& o) {
  return group_.allreduce_coalesced(t, o);
}
WorkPtr BackendTandem::allreduce_sparse(Tensors& t, const c10d::AllreduceOptions& o) {
  return group_.allreduce_sparse(t, o);
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
WorkPtr BackendTandem::recvAnysource(Tensors& t, int tag) {
  return group_.recv(t, kAnySource, tag);
}
WorkPtr BackendTandem::barrier(const c10d::BarrierOptions& o) {
  return group_.barrier(o);
}
void BackendTandem::waitForPendingWorks() {
  TANDEM_THROW(ErrorCode::InvalidArgument,
               "backend 'tandem' does not keep its works for waitForPendingWorks (a "
               "ProcessGroupNCCL method): wait() for each work, or call barrier(), which runs "
               "after every call made before it");
}
void BackendTandem::enableCollectivesTiming() {
  TANDEM_THROW(ErrorCode::InvalidArgument,
               "backend 'tandem' times its calls with TANDEM_TRACE=<file> (a timeline of every "
               "call, see docs/timeline.md), not with enableCollectivesTiming");
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

#if TANDEM_HAVE_BACKEND_SPLIT
c10::intrusive_ptr<c10d::Backend::Options> BackendTandem::getBackendOptions() {
  // A copy: torch writes the child's name and timeout into what it gets here.
  return c10::make_intrusive<Options>("tandem", group_.timeout());
}

c10::intrusive_ptr<c10d::Backend> BackendTandem::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                       const std::vector<int>& ranks,
                                                       const c10::intrusive_ptr<Options>& opts) {
  const auto me = std::find(ranks.begin(), ranks.end(), getRank());
  if (me == ranks.end()) return nullptr;
  for (const int r : ranks)
    TANDEM_CHECK_ARG(r >= 0 && r < getSize(),
                     "split_group: rank {} is not in this group of {} ranks (the ranks are the "
                     "group's own, 0..{})",
                     r, getSize(), getSize() - 1);
  const std::string name = opts ? opts->group_name : std::string();
  const auto timeout = opts && opts->timeout.count() > 0 ? opts->timeout : group_.timeout();
  std::lock_guard lock(splits_mutex_);
  if (const auto it = splits_.find(name); it != splits_.end()) {
    if (auto made = it->second.lock()) return made;
  }
  auto child = c10::make_intrusive<BackendTandem>(std::make_shared<C10dStore>(store),
                                                  static_cast<int>(me - ranks.begin()),
                                                  static_cast<int>(ranks.size()), timeout);
  if (!name.empty()) splits_.insert_or_assign(name, c10::weak_intrusive_ptr<BackendTandem>(child));
  return child;
}

c10::intrusive_ptr<c10d::Backend> BackendTandem::merge(const c10::intrusive_ptr<c10d::Store>& store,
                                                       const c10::intrusive_ptr<Options>& opts,
                                                       const int& rank, const int& size) {
  TANDEM_CHECK_ARG(size > 0 && rank >= 0 && rank < size,
                   "merge_remote_group: rank {} of {} ranks is not a place in the merged group",
                   rank, size);
  const auto timeout = opts && opts->timeout.count() > 0 ? opts->timeout : group_.timeout();
  return c10::make_intrusive<BackendTandem>(std::make_shared<C10dStore>(store), rank, size,
                                            timeout);
}
#endif

#if TANDEM_HAVE_BACKEND_SHRINK
c10::intrusive_ptr<c10d::Backend> BackendTandem::shrink(
    const std::vector<std::int64_t>& ranks_to_exclude, int shrink_flags,
    const c10::intrusive_ptr<Options>& opts) {
  TANDEM_CHECK_ARG(shrink_flags == 0 || shrink_flags == 1,
                   "shrink_group: shrink_flags {} is neither SHRINK_DEFAULT (0) nor SHRINK_ABORT "
                   "(1)",
                   shrink_flags);
  std::vector<int> exclude;
  for (const std::int64_t r : ranks_to_exclude) {
    TANDEM_CHECK_ARG(r >= 0 && r < getSize(), "shrink_group: rank {} is not in this group of {}", r,
                     getSize());
    exclude.push_back(static_cast<int>(r));
  }
  const auto timeout = opts && opts->timeout.count() > 0 ? opts->timeout : group_.timeout();
  return c10::make_intrusive<BackendTandem>(group_.shrink(exclude, shrink_flags == 1, timeout),
                                            store_);
}
#endif

#if TANDEM_HAVE_BACKEND_RECONFIGURE
c10d::ReconfigureHandle BackendTandem::get_reconfigure_handle() const {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("tandem:{:010}:{}:{}:{}", stable_rank_, uuid_, host, ::getpid());
}

c10::intrusive_ptr<c10d::Work> BackendTandem::reconfigure(const c10d::ReconfigureOptions& opts) {
  std::vector<std::string> handles = std::visit(
      [](const auto& given) { return std::vector<std::string>(given.begin(), given.end()); },
      opts.handles);
  if (std::holds_alternative<std::unordered_set<c10d::ReconfigureHandle>>(opts.handles))
    std::sort(handles.begin(), handles.end());
  TANDEM_CHECK_ARG(!handles.empty(),
                   "reconfigure: no handles; pass every member's get_reconfigure_handle(), this "
                   "rank's included");
  for (const auto& h : handles) {
    TANDEM_CHECK_ARG(h.starts_with("tandem:"),
                     "reconfigure: '{}' is not a handle of backend 'tandem' (each member's "
                     "handle comes from its group's get_reconfigure_handle())",
                     h);
  }
  auto sorted = handles;
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  TANDEM_CHECK_ARG(twice == sorted.end(), "reconfigure: handle '{}' is given twice", *twice);
  const auto mine = get_reconfigure_handle();
  const auto at = std::find(handles.begin(), handles.end(), mine);
  TANDEM_CHECK_ARG(at != handles.end(),
                   "reconfigure: this rank's handle '{}' is not among the {} given; pass the "
                   "handle each member's get_reconfigure_handle() returned just before",
                   mine, handles.size());
  TANDEM_CHECK_ARG(store_ != nullptr,
                   "reconfigure: this group of backend 'tandem' has no store to meet its new "
                   "members through; reconfigure the group it was split from");
  const int rank = static_cast<int>(at - handles.begin());
  const int size = static_cast<int>(handles.size());
  const std::string prefix = fmt::format("tandem/reconfigure/{}", opts.uuid);
  // A reused uuid would meet the stale keys of its first setup: the new rank 0 claims it.
  if (rank == 0) {
    const auto claimed = store_->compare_set(prefix + "/claimed", "", mine);
    TANDEM_CHECK_ARG(claimed == mine,
                     "reconfigure: uuid {} was used already (by '{}'); give every reconfigure() "
                     "a fresh uuid",
                     opts.uuid, claimed);
  }
  group_.reconfigure(store_, prefix, rank, size, opts.timeout.value_or(group_.timeout()));
  rank_ = rank;
  size_ = size;
  uuid_ = opts.uuid;
  auto work =
      c10::make_intrusive<TandemWork>(rank, c10d::OpType::UNKNOWN, Tensors{}, group_.timeout());
  work->complete_now();
  return work;
}
#endif

}  // namespace tandem::python
