// Round trip of one cache line between two CPUs: two processes, pinned to CPU A and CPU B
// (0 and 1 unless given), bounce a counter in a shared line N times (200000 unless given);
// prints the mean round trip in ns. What every exchange between two ranks of one host pays
// at least once per handoff; on a VM it shows where the host runs the vCPUs.
//
//   g++ -O2 -std=c++20 -o /tmp/pingpong bench/host/pingpong.cpp && /tmp/pingpong [N [A B]]

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 200000;
  const int a = argc > 3 ? std::atoi(argv[2]) : 0;
  const int b = argc > 3 ? std::atoi(argv[3]) : 1;
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED || n <= 0) return 2;
  auto* line = new (page) std::atomic<long>(0);
  const pid_t child = fork();
  if (child < 0) return 2;
  if (child == 0) {
    if (!pin(b)) _exit(2);
    for (long i = 0; i < n; ++i) {
      while (line->load(std::memory_order_acquire) != 2 * i + 1) {
      }
      line->store(2 * i + 2, std::memory_order_release);
    }
    _exit(0);
  }
  if (!pin(a)) return 2;
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) {
    line->store(2 * i + 1, std::memory_order_release);
    while (line->load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("%.0f\n", std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
