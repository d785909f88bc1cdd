#pragma once
// Which CUDA backend a communicator's device collectives use, agreed by every rank at its
// first CUDA call: NCCL, where it serves (one rank per GPU, any number of hosts); CUDA IPC
// (gpu/cuda_ipc/) where several ranks share a GPU (NCCL 2.28 refuses them), where this build
// has no NCCL, or where TANDEM_GPU_TRANSPORT=cuda_ipc asks for it. Every rank publishes what
// it sees and asks for through the store; the choice is a pure function of those records, so
// every rank makes the same one, and ranks that ask for different transports are named.

#include "comm/device/backend.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace tandem::gpu {

enum class GpuTransport : std::uint8_t { nccl, cuda_ipc };
std::string_view to_string(GpuTransport t) noexcept;

/// What one rank publishes.
struct GpuRecord {
  std::string host_id;    ///< transport::local_host_id(): equal means one host
  std::string uuid;       ///< the GPU's UUID, 32 hex digits
  int device = 0;         ///< its index in that rank's process (for messages)
  std::string requested;  ///< TANDEM_GPU_TRANSPORT: auto, nccl or cuda_ipc
};

/// One line per field; decode() bounds every field and names `rank` when a record is
/// malformed (Error(Io)).
std::string encode(const GpuRecord& r);
GpuRecord decode_gpu_record(std::string_view text, int rank);

struct GpuChoice {
  GpuTransport transport = GpuTransport::nccl;
  std::string why;  ///< for TANDEM_DEBUG=INFO: "ranks 0 and 1 share GPU ..."
};

/// The choice for the ranks whose records are `ranks` (index = rank), with or without NCCL in
/// this build. Throws InvalidArgument when nothing serves (ranks sharing a GPU across hosts,
/// cuda_ipc forced across hosts, nccl forced without NCCL or with a shared GPU) or when the
/// ranks ask for different transports, saying which ranks and what to do.
GpuChoice choose_transport(std::span<const GpuRecord> ranks, bool nccl_built);

/// The factory registered for CUDA devices: exchanges the records, chooses, and makes the
/// backend (collective over the communicator's ranks).
std::unique_ptr<comm::DeviceBackend> make_cuda_backend(const comm::DeviceSetup& setup);

}  // namespace tandem::gpu
