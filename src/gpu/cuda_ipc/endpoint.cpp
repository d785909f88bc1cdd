#include "gpu/cuda_ipc/endpoint.hpp"

#include "gpu/cuda.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <unistd.h>
#include <utility>

namespace tandem::gpu::cuda_ipc {

Peer::Peer(int rank, std::byte* staging, const ControlBlock* block) noexcept
    : rank_(rank), staging_(staging), block_(block) {}

Peer::Peer(int rank, const StagingRecord& record, const ControlBlock* block)
    : rank_(rank), staging_(nullptr), block_(block) {
  TANDEM_CHECK_ARG(record.pid != ::getpid(),
                   "rank {} is in this same process: CUDA IPC joins ranks of different processes "
                   "(start one process per rank, as tandemrun does)",
                   rank);
  void* p = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&p, record.handle, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "cannot map rank {}'s (pid {}) staging buffer through CUDA IPC: {} ({}). Ranks "
                 "joined by CUDA IPC must share a GPU or have peer access between theirs "
                 "(NVLink or PCIe P2P: nvidia-smi topo -p2p r); otherwise give each rank a "
                 "GPU of its own and let NCCL connect them",
                 rank, record.pid, cudaGetErrorString(e), cudaGetErrorName(e));
  }
  staging_ = static_cast<std::byte*>(p);
  opened_ = true;
}

Peer::Peer(Peer&& other) noexcept
    : rank_(other.rank_),
      staging_(std::exchange(other.staging_, nullptr)),
      block_(other.block_),
      opened_(std::exchange(other.opened_, false)),
      mapped_(std::move(other.mapped_)),
      uses_(other.uses_) {
  other.mapped_.clear();
}

Peer::~Peer() {
  for (const Mapped& m : mapped_) (void)cudaIpcCloseMemHandle(m.base);
  if (opened_ && staging_ != nullptr) (void)cudaIpcCloseMemHandle(staging_);
}

std::byte* Peer::map(const BufferRecord& record) {
  ++uses_;
  for (Mapped& m : mapped_)
    if (m.allocation == record.allocation) {
      m.used = uses_;
      return m.base + record.offset;
    }
  if (mapped_.size() >= kMapped) {
    auto oldest =
        std::min_element(mapped_.begin(), mapped_.end(),
                         [](const Mapped& a, const Mapped& b) { return a.used < b.used; });
    (void)cudaIpcCloseMemHandle(oldest->base);
    mapped_.erase(oldest);
  }
  void* p = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&p, record.handle, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    TANDEM_THROW(ErrorCode::Io,
                 "cannot map rank {}'s buffer through CUDA IPC: {} ({}); set "
                 "TANDEM_GPU_TRANSPORT=nccl if every rank has a GPU of its own",
                 rank_, cudaGetErrorString(e), cudaGetErrorName(e));
  }
  mapped_.push_back({record.allocation, static_cast<std::byte*>(p), uses_});
  return mapped_.back().base + record.offset;
}

}  // namespace tandem::gpu::cuda_ipc
