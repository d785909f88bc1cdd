#pragma once
// A CUDA IPC group: this rank's staging buffer (device memory, exported once through its IPC
// handle), its control block (host shared memory that every peer maps), every peer's mapped
// staging and control block, and the phase protocol of wire.hpp. Made collectively by every
// rank of the communicator, all on one host.

#include "comm/device/backend.hpp"
#include "gpu/cuda.hpp"
#include "gpu/cuda_ipc/endpoint.hpp"
#include "gpu/wait.hpp"

#include <tandem/shared_buffer.hpp>

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace tandem::transport {
class RegionPool;
}

namespace tandem::gpu::cuda_ipc {

class Context {
 public:
  /// Collective. Throws InvalidArgument when a peer cannot be mapped, Timeout/PeerLost while
  /// waiting for the peers' records, Io when CUDA or /dev/shm refuse.
  Context(const comm::DeviceSetup& setup, const WaitHooks& hooks);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(peers_.size()); }
  const Peer& peer(int rank) const { return peers_.at(static_cast<std::size_t>(rank)); }
  const Peer& self() const { return peer(rank_); }
  cudaStream_t stream() const noexcept { return stream_.get(); }

  /// Ends a phase: waits until the device ran everything enqueued on stream(), publishes the
  /// next step, and returns once every peer published it too.
  void end_phase(Deadline deadline, std::string_view what);
  /// end_phase() for a phase whose device work is `after` (an event recorded earlier), or
  /// that put none on this rank's device (null): publishes the step without a drain.
  void end_phase_after(cudaEvent_t after, Deadline deadline, std::string_view what);
  /// Waits until the device ran everything enqueued on stream() (the end of a call).
  void drain(Deadline deadline, std::string_view what);

  /// Writes where this call's buffers are into this rank's control block (published by the
  /// next end_phase()); false in the records when a buffer cannot be shared through CUDA IPC.
  void publish_buffers(const void* in, const void* out);
  /// Whether every rank's staging is on this rank's GPU (ranks sharing one GPU).
  bool one_device() const noexcept {
    for (int same : same_device_)
      if (same == 0) return false;
    return true;
  }
  /// Rank `rank`'s buffer described by `record` (from its block), mapped in this process.
  std::byte* peer_buffer(int rank, const BufferRecord& record) {
    return peers_.at(static_cast<std::size_t>(rank)).map(record);
  }

  /// What TANDEM_DEBUG=INFO says about the peers ("rank 1 on this GPU, rank 2 on cuda:1").
  std::string describe() const;

 private:
  int rank_;
  WaitHooks hooks_;
  Stream stream_;
  Event done_;
  DeviceMemory staging_;
  std::shared_ptr<transport::RegionPool> pool_;
  SharedBuffer control_;
  ControlBlock* own_block_ = nullptr;
  std::uint64_t step_ = 0;
  std::vector<Peer> peers_;  ///< index = rank (this rank's own entry included)
  /// This process's allocations already exported (their IPC handles are made once).
  struct Exported {
    std::uintptr_t base = 0;
    std::uint64_t allocation = 0;
    cudaIpcMemHandle_t handle{};
  };
  std::vector<Exported> exported_;
  BufferRecord describe_buffer(const void* p);
  std::vector<int> same_device_;  ///< 1 where the peer's staging is on this GPU
};

}  // namespace tandem::gpu::cuda_ipc
