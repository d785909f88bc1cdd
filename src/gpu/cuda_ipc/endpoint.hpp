#pragma once
// One rank of a CUDA IPC group as this process sees it: where its staging buffer is mapped
// (opened from its IPC handle, or this rank's own) and where its control block is.

#include "gpu/cuda_ipc/wire.hpp"

#include <cstddef>

namespace tandem::gpu::cuda_ipc {

class Peer {
 public:
  /// This rank: its own staging and control block.
  Peer(int rank, std::byte* staging, const ControlBlock* block) noexcept;
  /// Another process's rank: maps its staging (cudaIpcOpenMemHandle on the current device,
  /// enabling peer access when it lives on another GPU). Throws Error(InvalidArgument) saying
  /// why it cannot be mapped (same process, no peer access between the two GPUs).
  Peer(int rank, const StagingRecord& record, const ControlBlock* block);
  ~Peer();
  Peer(Peer&& other) noexcept;
  Peer& operator=(Peer&&) = delete;
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  int rank() const noexcept { return rank_; }
  /// The staging buffer's input and output halves (kHalfBytes each).
  std::byte* in() const noexcept { return staging_; }
  std::byte* out() const noexcept { return staging_ + kHalfBytes; }
  /// The phases this rank has completed.
  std::uint64_t step() const noexcept { return load_step(block_); }

 private:
  int rank_;
  std::byte* staging_;
  const ControlBlock* block_;
  bool opened_ = false;  ///< staging_ came from cudaIpcOpenMemHandle
};

}  // namespace tandem::gpu::cuda_ipc
