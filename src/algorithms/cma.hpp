#pragma once
// Cross-memory attach (process_vm_readv / process_vm_writev, Linux 3.2+): a rank copies a
// same-host peer's plain, unregistered buffer straight into its own (or its own into the
// peer's), one copy, where the shared-memory transport needs two (into a slot, out of it). The
// kernel allows it where the caller may ptrace the peer (the same user and Yama's ptrace_scope
// 0, or CAP_SYS_PTRACE); tandem never changes that. A read or write the kernel refuses turns
// CMA off for this process, and the direct algorithms then fall back as for unregistered
// buffers without it. TANDEM_CMA=0 turns it off from the start.

#include <cstddef>
#include <cstdint>

namespace tandem::algorithms::detail {

/// Whether this process may try CMA (TANDEM_CMA, and no read or write refused so far).
bool cma_usable() noexcept;
/// What a rank puts in its hello about CMA: 0 when it may not use it, else a nonzero tag of
/// its pid namespace. A pid means the same process only to a peer in the same pid namespace
/// (containers of one pod share a host but not their pids), so ranks read each other only
/// when their tags are equal and nonzero.
std::uint32_t cma_tag() noexcept;
/// Turns CMA off for this process (after a refusal; tests).
void cma_disable() noexcept;
/// Copies `bytes` from `remote` in process `pid` into `dst`. False when the kernel refuses or
/// cannot complete it (then CMA is off for this process from now on); `dst` is then partly
/// written at most.
bool cma_read(int pid, void* dst, const void* remote, std::size_t bytes) noexcept;
/// Copies `bytes` from `src` into `remote` in process `pid` (process_vm_writev: the same
/// permission as a read). False as for cma_read(); `remote` is then partly written at most.
bool cma_write(int pid, void* remote, const void* src, std::size_t bytes) noexcept;

}  // namespace tandem::algorithms::detail
