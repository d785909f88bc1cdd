#include "algorithms/cma.hpp"

#include <tandem/log.hpp>
#include <tandem/settings.hpp>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <sys/stat.h>
#include <sys/uio.h>

namespace tandem::algorithms::detail {
namespace {

// 0: not decided yet (TANDEM_CMA not read), 1: usable, 2: off.
std::atomic<int> g_state{0};

}  // namespace

bool cma_usable() noexcept {
  int s = g_state.load(std::memory_order_relaxed);
  if (s == 0) {
    bool on = true;
    try {
      on = settings::get_bool("TANDEM_CMA");
    } catch (...) {
      on = false;  // malformed: communicator setup already refused it with a clear error
    }
    int expected = 0;
    g_state.compare_exchange_strong(expected, on ? 1 : 2, std::memory_order_relaxed);
    s = g_state.load(std::memory_order_relaxed);
  }
  return s == 1;
}

std::uint32_t cma_tag() noexcept {
  if (!cma_usable()) return 0;
  static const std::uint32_t tag = [] {
    struct stat st {};
    if (::stat("/proc/self/ns/pid", &st) != 0) return std::uint32_t{0};  // unknown: no CMA
    const auto ino = static_cast<std::uint64_t>(st.st_ino);
    return static_cast<std::uint32_t>(ino ^ (ino >> 32)) | 1u;
  }();
  return tag;
}

void cma_disable() noexcept {
  g_state.store(2, std::memory_order_relaxed);
}

namespace {

// process_vm_readv (write false) or process_vm_writev (write true) of `bytes` between `local`
// here and `remote` in process `pid`, resumed after a partial transfer.
bool cma_move(bool write, int pid, char* local, char* remote, std::size_t bytes) noexcept {
  while (bytes > 0) {
    iovec here{local, bytes};
    iovec there{remote, bytes};
    const ssize_t n = write ? ::process_vm_writev(pid, &here, 1, &there, 1, 0)
                            : ::process_vm_readv(pid, &here, 1, &there, 1, 0);
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      if (n < 0 && err == EINTR) continue;
      if (g_state.exchange(2, std::memory_order_relaxed) != 2)
        TANDEM_INFO(algo,
                    "cross-memory attach refused ({} of pid {}: {}); broadcast and allgather copy "
                    "through shared memory from now on",
                    write ? "process_vm_writev" : "process_vm_readv", pid, std::strerror(err));
      return false;
    }
    local += n;
    remote += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

bool cma_read(int pid, void* dst, const void* remote, std::size_t bytes) noexcept {
  return cma_move(false, pid, static_cast<char*>(dst),
                  const_cast<char*>(static_cast<const char*>(remote)), bytes);
}

bool cma_write(int pid, void* remote, const void* src, std::size_t bytes) noexcept {
  return cma_move(true, pid, const_cast<char*>(static_cast<const char*>(src)),
                  static_cast<char*>(remote), bytes);
}

}  // namespace tandem::algorithms::detail
