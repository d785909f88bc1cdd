// What the wire's cache lines cost on their own: one process streams 8-byte messages to
// another through a ring of cells in shared memory (a sequence word and the payload per cell,
// the consumer acknowledging each message in a line of its own), as tandem's slot headers do
// with 64-byte cells and Open MPI's vader fast boxes with smaller ones. Prints nanoseconds per
// message. Built and run by bench/latency/run.sh.
//
//   ring_cells CELL_BYTES CELLS MESSAGES

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

std::atomic<std::uint64_t>& word(char* p) {
  return *reinterpret_cast<std::atomic<std::uint64_t>*>(p);
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);  // best effort: fewer CPUs leave it unpinned
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: ring_cells CELL_BYTES CELLS MESSAGES\n");
    return 2;
  }
  const std::size_t cell = std::strtoull(argv[1], nullptr, 10);
  const std::uint64_t cells = std::strtoull(argv[2], nullptr, 10);
  const std::uint64_t n = std::strtoull(argv[3], nullptr, 10);
  if (cell < 16 || cell % 8 != 0 || cells == 0 || n == 0) {
    std::fprintf(stderr, "ring_cells: CELL_BYTES must be a multiple of 8 from 16 up\n");
    return 2;
  }
  const std::size_t bytes = 4096 + cells * cell;
  auto* mem = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                      MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
  if (mem == MAP_FAILED) {
    std::perror("ring_cells: mmap");
    return 1;
  }
  std::memset(mem, 0, bytes);
  char* const ring = mem + 4096;  // the acknowledgement has the first page to itself
  const pid_t pid = fork();
  pin(pid == 0 ? 1 : 0);
  if (pid == 0) {  // consumer: sums the payloads, acknowledges each message
    std::uint64_t sum = 0;
    for (std::uint64_t k = 0; k < n; ++k) {
      char* c = ring + (k % cells) * cell;
      while (word(c).load(std::memory_order_acquire) != k + 1) {
      }
      std::uint64_t x;
      std::memcpy(&x, c + 8, 8);
      sum += x;
      word(mem).store(k + 1, std::memory_order_release);
    }
    _exit(sum == n * (n - 1) / 2 ? 0 : 1);
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t acked = 0;
  for (std::uint64_t k = 0; k < n; ++k) {
    while (k - acked >= cells) acked = word(mem).load(std::memory_order_acquire);
    char* c = ring + (k % cells) * cell;
    std::memcpy(c + 8, &k, 8);
    word(c).store(k + 1, std::memory_order_release);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
      static_cast<double>(n);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("cells of %zu bytes, %llu cells: %.1f ns per message%s\n", cell,
              static_cast<unsigned long long>(cells), ns, ok ? "" : " (WRONG SUM)");
  return ok ? 0 : 1;
}
