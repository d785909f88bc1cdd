#include "measure.hpp"

#include <tandem/error.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <pthread.h>
#include <sched.h>
#include <thread>

namespace tandem::tools::topo_tool {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kSlot = std::size_t{1} << 20;
constexpr std::size_t kSlots = 4;
constexpr auto kStall = std::chrono::seconds(60);

void pin(const tools_api::CpuList& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  if (const int rc = ::pthread_setaffinity_np(::pthread_self(), sizeof(set), &set); rc != 0)
    TANDEM_THROW(ErrorCode::Io, "cannot pin a thread to CPUs {}: {}", tools_api::to_string(cpus),
                 std::strerror(rc));
}

// Keeps the compiler from dropping copies into buffers that are freed unread.
void keep(const void* p) {
  asm volatile("" : : "r"(p) : "memory");
}

std::unique_ptr<std::byte[]> buffer(std::size_t n) {
  auto b = std::make_unique<std::byte[]>(n);  // zeroed: the pages are touched here
  std::memset(b.get(), 1, n);
  return b;
}

// Spins (yielding) until ready() holds; throws when nothing happens for kStall.
template <typename F>
void wait_for(F ready, const char* what) {
  const auto deadline = Clock::now() + kStall;
  for (unsigned spins = 0; !ready(); ++spins) {
    std::this_thread::yield();
    if ((spins & 1023) == 0 && Clock::now() > deadline)
      TANDEM_THROW(ErrorCode::Timeout, "bandwidth measurement: the {} made no progress for {} s",
                   what, kStall.count());
  }
}

struct Ring {
  alignas(64) std::atomic<std::size_t> produced{0};
  alignas(64) std::atomic<std::size_t> consumed{0};
  alignas(64) std::atomic<bool> failed{false};
  std::unique_ptr<std::byte[]> slots = buffer(kSlot * kSlots);
};

// Runs f on a thread pinned to cpus; rethrows what it threw.
class PinnedThread {
 public:
  template <typename F>
  PinnedThread(const tools_api::CpuList& cpus, F f)
      : thread_([this, cpus, f]() mutable {
          try {
            pin(cpus);
            f();
          } catch (...) {
            error_ = std::current_exception();
          }
        }) {}
  ~PinnedThread() {
    if (thread_.joinable()) thread_.join();
  }
  PinnedThread(const PinnedThread&) = delete;
  PinnedThread& operator=(const PinnedThread&) = delete;
  void join() {
    thread_.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace

double pair_bandwidth(const tools_api::CpuList& from, const tools_api::CpuList& to,
                      const MeasureOptions& o) {
  const std::size_t chunks = std::max<std::size_t>(1, o.bytes / kSlot);
  const std::size_t total = chunks * static_cast<std::size_t>(o.passes + 1);
  if (from == to) {
    double seconds = 0;
    PinnedThread t(from, [&] {
      auto src = buffer(chunks * kSlot);
      auto dst = buffer(chunks * kSlot);
      std::memcpy(dst.get(), src.get(), chunks * kSlot);  // warm-up
      const auto start = Clock::now();
      for (int p = 0; p < o.passes; ++p) {
        src[static_cast<std::size_t>(p)] = std::byte{2};
        std::memcpy(dst.get(), src.get(), chunks * kSlot);
        keep(dst.get());
      }
      seconds = std::chrono::duration<double>(Clock::now() - start).count();
    });
    t.join();
    return static_cast<double>(chunks * kSlot) * o.passes / seconds / 1e9;
  }
  Ring ring;
  std::atomic<long long> start_ns{0}, end_ns{0};
  const auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
  };
  PinnedThread sender(from, [&] {
    auto src = buffer(chunks * kSlot);
    for (std::size_t i = 0; i < total && !ring.failed; ++i) {
      wait_for(
          [&] { return ring.failed || i - ring.consumed.load(std::memory_order_acquire) < kSlots; },
          "receiver");
      std::memcpy(ring.slots.get() + (i % kSlots) * kSlot, src.get() + (i % chunks) * kSlot, kSlot);
      ring.produced.store(i + 1, std::memory_order_release);
    }
  });
  PinnedThread receiver(to, [&] {
    try {
      auto dst = buffer(chunks * kSlot);
      for (std::size_t i = 0; i < total; ++i) {
        if (i == chunks) start_ns = now_ns();  // after the warm-up pass
        wait_for([&] { return ring.produced.load(std::memory_order_acquire) > i; }, "sender");
        std::memcpy(dst.get() + (i % chunks) * kSlot, ring.slots.get() + (i % kSlots) * kSlot,
                    kSlot);
        keep(dst.get());
        ring.consumed.store(i + 1, std::memory_order_release);
      }
      end_ns = now_ns();
    } catch (...) {
      ring.failed = true;
      throw;
    }
  });
  receiver.join();
  sender.join();
  const double seconds = static_cast<double>(end_ns - start_ns) / 1e9;
  return static_cast<double>((total - chunks) * kSlot) / seconds / 1e9;
}

double node_bandwidth(const tools_api::Topology& t, const tools_api::NumaNode& node,
                      const MeasureOptions& o) {
  std::vector<const tools_api::Core*> cores;
  for (const tools_api::Core& c : t.cores)
    if (c.numa == node.os_index) cores.push_back(&c);
  if (cores.empty())
    TANDEM_THROW(ErrorCode::InvalidArgument, "NUMA node {} has no cores to measure from",
                 node.os_index);
  // Buffers of at least four times the node's caches, so that memory answers, not a cache.
  std::uint64_t cached = 0;
  for (const tools_api::Cache& c : t.caches)
    if (std::includes(node.cpus.begin(), node.cpus.end(), c.cpus.begin(), c.cpus.end()))
      cached += c.size;
  const std::size_t per_thread =
      std::max<std::size_t>({kSlot, o.bytes / cores.size(), 4 * cached / cores.size()});
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> seconds(cores.size());
  std::vector<std::unique_ptr<PinnedThread>> threads;
  for (std::size_t k = 0; k < cores.size(); ++k) {
    threads.push_back(std::make_unique<PinnedThread>(cores[k]->pus, [&, k] {
      auto src = buffer(per_thread);
      auto dst = buffer(per_thread);
      std::memcpy(dst.get(), src.get(), per_thread);
      ++ready;
      wait_for([&] { return go.load(); }, "start signal");
      const auto start = Clock::now();
      for (int p = 0; p < o.passes; ++p) {
        std::memcpy(dst.get(), src.get(), per_thread);
        keep(dst.get());
      }
      seconds[k] = std::chrono::duration<double>(Clock::now() - start).count();
    }));
  }
  wait_for([&] { return ready.load() == static_cast<int>(cores.size()); }, "buffer setup");
  go = true;
  for (auto& th : threads) th->join();
  double slowest = 0;
  for (double s : seconds) slowest = std::max(slowest, s);
  return 2.0 * static_cast<double>(per_thread * cores.size()) * o.passes / slowest / 1e9;
}

}  // namespace tandem::tools::topo_tool
