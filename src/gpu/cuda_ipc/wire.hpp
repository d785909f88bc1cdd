#pragma once
// What the ranks of a CUDA IPC group share, byte for byte: the record each publishes through
// the store (its staging buffer's IPC handle and size, its GPU, its pid), and the host control
// block each maps from every peer (one step counter per rank, on a cache line of its own).
//
// The protocol: every collective is a fixed sequence of phases, the same on every rank. A
// rank ends a phase by waiting (on the host) until its device finished the phase's copies and
// kernels, then publishing step + 1; it starts the next phase once every peer's step reached
// its own. A phase that reads peers' staging is always followed by such a step before anyone
// writes that staging again, so no copy ever reads memory a peer is rewriting.
//
// A collective on buffers from cudaMalloc skips the staging: each rank writes where its input
// and output are (a BufferRecord: the allocation's IPC handle and the offset) into its control
// block before the step that ends the call's first phase; the peers map those buffers (cached
// per allocation); on one GPU rank 0 then runs the whole collective, between GPUs each rank
// reduces its slice of every input into every output (allreduce); a second phase ends the
// call. Every rank decides from all ranks' records, so all take the same path.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>
#include <string>
#include <string_view>

namespace tandem::gpu::cuda_ipc {

/// Each rank's staging buffer: an input half and an output half of this many bytes.
inline constexpr std::size_t kHalfBytes = std::size_t{16} << 20;

struct StagingRecord {
  cudaIpcMemHandle_t handle{};
  std::uint64_t bytes = 0;  ///< the whole buffer: 2 x kHalfBytes
  std::int32_t pid = 0;
};

/// Fixed-size binary record (magic, version, fields) as hex text for the store.
std::string encode(const StagingRecord& r);
/// Throws Error(Io) naming `rank` when the text is not one of this build's records.
StagingRecord decode_staging_record(std::string_view text, int rank);

/// Where one of a rank's buffers is for the current call: its allocation's IPC handle, the
/// allocation's process-wide id (CU_POINTER_ATTRIBUTE_BUFFER_ID: a new id is a new allocation,
/// even at a reused address) and the buffer's offset in it. `usable` is 0 when the buffer
/// cannot be shared this way (memory not from cudaMalloc, such as managed or virtual-memory
/// allocations): then every rank stages the call.
struct BufferRecord {
  cudaIpcMemHandle_t handle{};
  std::uint64_t allocation = 0;
  std::uint64_t offset = 0;
  std::uint64_t usable = 0;
};

/// One rank's control block in host shared memory. The records are written before the step
/// that publishes them (release) and read after it (acquire).
struct alignas(64) ControlBlock {
  std::atomic<std::uint64_t> step{0};  ///< phases this rank completed, since creation
  BufferRecord in alignas(64);
  BufferRecord out;
};
static_assert(offsetof(ControlBlock, in) == 64 && sizeof(ControlBlock) % 64 == 0);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

/// The step a peer's block shows (an acquire load of memory another process writes).
inline std::uint64_t load_step(const ControlBlock* block) noexcept {
  return __atomic_load_n(reinterpret_cast<const std::uint64_t*>(&block->step), __ATOMIC_ACQUIRE);
}

}  // namespace tandem::gpu::cuda_ipc
