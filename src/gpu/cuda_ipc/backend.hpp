#pragma once
// The CUDA IPC backend: a communicator's collectives on CUDA memory between ranks of one host
// that share a GPU or have peer access between theirs, without NCCL. Buffers from cudaMalloc
// are mapped by the peers through CUDA IPC and used in place (run_mapped: on one GPU rank 0
// runs the whole collective as one fused reduction or its copies). Other buffers are staged:
// each rank copies its part into its own device buffer, which every peer maps; reductions are
// direct (rank r reduces slice r of every rank's input with tandem's device kernels, reading
// the peers' staging in place, then every rank gathers the slices), and data movement is one
// copy from the peer's staging into the output. Everything runs on the backend's stream behind
// the caller's work on the legacy default stream; every wait is on the host, bounded by the
// call's deadline, with the peers' liveness asked every millisecond (wire.hpp: the phases).

#include "comm/device/backend.hpp"
#include "gpu/cuda_ipc/context.hpp"
#include "gpu/kernels.hpp"

#include <array>
#include <atomic>
#include <memory>
#include <string>

namespace tandem::gpu::cuda_ipc {

class Backend final : public comm::DeviceBackend {
 public:
  /// Collective: every rank of the communicator makes one. Throws as Context does.
  explicit Backend(const comm::DeviceSetup& setup);
  ~Backend() override;

  std::string_view name() const noexcept override { return "cuda_ipc"; }
  Device device() const noexcept override { return setup_.device; }
  void run(const algorithms::Call& call) override;
  void abort() noexcept override { aborted_.store(true, std::memory_order_release); }

 private:
  void allreduce(const algorithms::Call& c, const std::string& what);
  /// Where every rank's buffers of a mapped call are in this process (null where unused).
  struct Views {
    std::array<const std::byte*, kMaxFused> in{};
    std::array<std::byte*, kMaxFused> out{};
  };
  /// Whether `c` may run on the ranks' own buffers (wire.hpp): every collective when all
  /// ranks share one GPU, allreduce on GPUs joined by peer access too.
  bool mappable(const algorithms::Call& c) const;
  /// Runs `c` on the ranks' own buffers: on one GPU rank 0 does the whole collective (one
  /// fused reduction pass, or the copies), elsewhere each rank reduces its slice. False
  /// (after one phase, the same on every rank) when some rank's buffers cannot be mapped:
  /// the call is then staged.
  bool run_mapped(const algorithms::Call& c, const std::string& what);
  void lead(const algorithms::Call& c, const Views& v);
  void reduce_slices(const algorithms::Call& c, const Views& v);
  void reduce(const algorithms::Call& c, const std::string& what);
  void reduce_scatter(const algorithms::Call& c, const std::string& what);
  void broadcast(const algorithms::Call& c, const std::string& what);
  /// allgather, allgatherv and gather.
  void allgather(const algorithms::Call& c, const std::string& what);
  void scatter(const algorithms::Call& c, const std::string& what);
  void alltoall(const algorithms::Call& c, const std::string& what);

  /// dst = a op b (dst may be a).
  void combine(void* dst, const void* a, const void* b, std::size_t count,
               const algorithms::Call& c);
  /// dst = the reduction of every rank's staged input at element `first` (count elements),
  /// divided by the size after an average.
  void reduce_staged(void* dst, std::size_t first, std::size_t count, const algorithms::Call& c);
  void copy(void* dst, const void* src, std::size_t bytes);
  /// `rows` rows of `width` bytes, `src_pitch` apart, into consecutive rows of `dst`.
  void copy_rows(void* dst, const void* src, std::size_t width, std::size_t src_pitch,
                 std::size_t rows);

  comm::DeviceSetup setup_;
  std::atomic<bool> aborted_{false};
  std::unique_ptr<Event> ready_;  ///< recorded on the legacy default stream before a call
  std::unique_ptr<Context> ctx_;
  bool broken_ = false;
};

}  // namespace tandem::gpu::cuda_ipc

namespace tandem::gpu {
/// The CUDA IPC backend for `setup` (collective).
std::unique_ptr<comm::DeviceBackend> make_cuda_ipc_backend(const comm::DeviceSetup& setup);
}  // namespace tandem::gpu
