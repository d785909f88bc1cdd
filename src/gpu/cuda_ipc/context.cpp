#include "gpu/cuda_ipc/context.hpp"

#include "transport/bootstrap.hpp"
#include "transport/regions.hpp"

#include <tandem/error.hpp>
#include <tandem/store.hpp>

#include <fmt/format.h>

#include <cuda.h>
#include <new>
#include <unistd.h>

namespace tandem::gpu::cuda_ipc {
namespace {

using PointerAttributes = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);

// cuPointerGetAttributes from the driver, found through the runtime: libtandem_cuda links the
// runtime only, so that it loads on machines without a driver. Null when the driver has none.
PointerAttributes pointer_attributes() {
  static const PointerAttributes fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return PointerAttributes{};
    }
    return reinterpret_cast<PointerAttributes>(f);
  }();
  return fn;
}

// At most this many of this process's allocations keep their exported handle at hand.
constexpr std::size_t kExported = 64;

}  // namespace

Context::Context(const comm::DeviceSetup& setup, const WaitHooks& hooks)
    : rank_(setup.rank), hooks_(hooks), staging_(2 * kHalfBytes) {
  const Deadline deadline = deadline_in(setup.timeout.get());
  auto store = std::make_shared<store::PrefixStore>("cuda_ipc/", setup.store);
  std::vector<int> others;
  for (int r = 0; r < setup.size; ++r)
    if (r != rank_) others.push_back(r);
  // The control blocks: one shared-memory segment per rank, mapped by every peer.
  if (!others.empty()) {
    pool_ = std::make_shared<transport::RegionPool>(rank_, others);
    control_ = pool_->allocate(sizeof(ControlBlock), *store, deadline, setup.check_peers);
  }
  own_block_ = control_.data() != nullptr ? new (control_.data()) ControlBlock()
                                          : new ControlBlock();  // one rank: nobody reads it
  StagingRecord mine;
  check_cuda(cudaIpcGetMemHandle(&mine.handle, staging_.get()), "cudaIpcGetMemHandle");
  mine.bytes = 2 * kHalfBytes;
  mine.pid = static_cast<std::int32_t>(::getpid());
  const auto texts =
      transport::gather(*store, rank_, encode(mine),
                        {.prefix = "staging/", .what = "CUDA IPC staging handle", .from = others},
                        deadline, setup.check_peers);
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  peers_.reserve(static_cast<std::size_t>(setup.size));
  same_device_.assign(static_cast<std::size_t>(setup.size), 1);
  std::size_t next = 0;
  for (int r = 0; r < setup.size; ++r) {
    if (r == rank_) {
      peers_.emplace_back(r, static_cast<std::byte*>(staging_.get()), own_block_);
      continue;
    }
    const StagingRecord record = decode_staging_record(texts[next++], r);
    const auto* block = static_cast<const ControlBlock*>(pool_->peer_view(
        r, *pool_->locate(control_.data(), sizeof(ControlBlock)), sizeof(ControlBlock)));
    TANDEM_CHECK_ARG(block != nullptr,
                     "rank {}'s control block is not mapped in this process: CUDA IPC joins "
                     "ranks of one host only",
                     r);
    peers_.emplace_back(r, record, block);
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, peers_.back().in()) == cudaSuccess)
      same_device_[static_cast<std::size_t>(r)] = a.device == device ? 1 : 0;
    (void)cudaGetLastError();
  }
}

Context::~Context() {
  peers_.clear();  // unmaps the peers' staging before this rank's own is freed
  if (control_.data() == nullptr) delete own_block_;
}

void Context::drain(Deadline deadline, std::string_view what) {
  wait_for_stream(stream_.get(), done_.get(), deadline, what, hooks_);
}

void Context::end_phase(Deadline deadline, std::string_view what) {
  drain(deadline, what);
  end_phase_after(nullptr, deadline, what);
}

void Context::end_phase_after(cudaEvent_t after, Deadline deadline, std::string_view what) {
  if (after != nullptr) wait_for_event(after, deadline, what, hooks_);
  ++step_;
  own_block_->step.store(step_, std::memory_order_release);
  poll_until(
      [&] {
        for (const Peer& p : peers_)
          if (p.step() < step_) return false;
        return true;
      },
      deadline, what, hooks_);
}

BufferRecord Context::describe_buffer(const void* p) {
  BufferRecord r;
  const PointerAttributes attributes = pointer_attributes();
  if (p == nullptr || attributes == nullptr) return r;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
  CUdeviceptr base = 0;
  unsigned long long allocation = 0;
  int capable = 0;
  void* values[] = {&base, &allocation, &capable};
  if (attributes(3, which, values, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS ||
      capable == 0 || base == 0)
    return r;
  r.allocation = allocation;
  r.offset = reinterpret_cast<std::uintptr_t>(p) - static_cast<std::uintptr_t>(base);
  for (const Exported& e : exported_)
    if (e.base == base && e.allocation == allocation) {
      r.handle = e.handle;
      r.usable = 1;
      return r;
    }
  cudaIpcMemHandle_t handle{};
  if (cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base)) != cudaSuccess) {
    (void)cudaGetLastError();
    return r;
  }
  // A new allocation at an address seen before replaces the old entry.
  std::erase_if(exported_, [&](const Exported& e) { return e.base == base; });
  if (exported_.size() >= kExported) exported_.erase(exported_.begin());
  exported_.push_back({static_cast<std::uintptr_t>(base), allocation, handle});
  r.handle = handle;
  r.usable = 1;
  return r;
}

void Context::publish_buffers(const void* in, const void* out) {
  own_block_->in = describe_buffer(in);
  own_block_->out = in == out ? own_block_->in : describe_buffer(out);
}

std::string Context::describe() const {
  std::string s;
  for (const Peer& p : peers_) {
    if (p.rank() == rank_) continue;
    if (!s.empty()) s += ", ";
    s += fmt::format("rank {} {}", p.rank(),
                     same_device_[static_cast<std::size_t>(p.rank())] != 0 ? "on this GPU"
                                                                           : "on another GPU "
                                                                             "(peer access)");
  }
  return s.empty() ? std::string("no peers") : s;
}

}  // namespace tandem::gpu::cuda_ipc
