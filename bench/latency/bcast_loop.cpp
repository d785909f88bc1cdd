// tandem's side of bench/latency/run.sh: CALLS in-place broadcasts of 8 bytes from rank 0 in
// one loop without a clock read per call (after 10,000 untimed ones, a barrier and 10,000
// more); prints each rank's microseconds per call. The same loop as bcast_loop.c for Open MPI.
//
//   build/bin/tandemrun --nproc-per-node 2 bcast_loop [CALLS]

#include <tandem/communicator.hpp>
#include <tandem/error.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  try {
    auto comm = tandem::Communicator::from_env();
    const long calls = argc > 1 ? std::atol(argv[1]) : 1000000;
    float v[2] = {1, 2};
    const auto view = tandem::BufferView::of(std::span<float>(v, 2));
    for (int i = 0; i < 10000; ++i) comm->broadcast(view, 0);
    comm->barrier();
    // Untimed again after the barrier: a rank that slept in it (and is woken late by a busy
    // VM) catches up here, not inside the timed loop of the other.
    for (int i = 0; i < 10000; ++i) comm->broadcast(view, 0);
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < calls; ++i) comm->broadcast(view, 0);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        static_cast<double>(calls);
    comm->barrier();
    std::printf("tandem rank %d: %.4f us per 8 B in-place broadcast\n", comm->rank(), us);
    return 0;
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "bcast_loop: %s\n", e.what());
    return 1;
  }
}
