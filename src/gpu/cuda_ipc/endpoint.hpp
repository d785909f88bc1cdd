#pragma once
// One rank of a CUDA IPC group as this process sees it: where its staging buffer is mapped
// (opened from its IPC handle, or this rank's own), where its control block is, and the
// allocations of its own buffers that this process has mapped (a small cache).

#include "gpu/cuda_ipc/wire.hpp"

#include <cstddef>
#include <vector>

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
  /// Its control block (read the records after its step showed the phase that wrote them).
  const ControlBlock& block() const noexcept { return *block_; }

  /// Where `record` (one of this rank's buffers, usable) is in this process: its allocation
  /// mapped once and kept (up to kMapped allocations per rank; the least recently used is
  /// closed first, and a mapping whose allocation the peer replaced is never used again).
  /// Throws Error(Io) when CUDA refuses to map it.
  std::byte* map(const BufferRecord& record);

  static constexpr std::size_t kMapped = 16;

 private:
  struct Mapped {
    std::uint64_t allocation = 0;
    std::byte* base = nullptr;
    std::uint64_t used = 0;  ///< when it was last used, in map() calls
  };

  int rank_;
  std::byte* staging_;
  const ControlBlock* block_;
  bool opened_ = false;  ///< staging_ came from cudaIpcOpenMemHandle
  std::vector<Mapped> mapped_;
  std::uint64_t uses_ = 0;
};

}  // namespace tandem::gpu::cuda_ipc
