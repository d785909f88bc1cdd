// A tandem program that misbehaves on purpose, for the failure tests and the README's
// culprit report: `fault_worker MODE RANK STEP [STEPS]` runs STEPS allreduces of 1024
// floats, and at step STEP rank RANK
//   hang      never enters the allreduce (waits for a signal);
//   kill      SIGKILLs itself;
//   mismatch  calls broadcast instead;
//   exit      exits with code 3.
// `fault_worker shrink - - STEPS` runs allreduces of ones (each rank prints "rank R: ready"
// after the first) until one fails with PeerLost, then shrinks the world without the lost
// ranks (Communicator::shrink_lost, waiting up to SHRINK_WAIT_MS, default the timeout),
// prints "rank R: shrunk to rank r of n without [..]", checks 5 allreduces on the new
// communicator and prints "rank R: went on with n ranks"; any error ends it with code 1.
#include <tandem/communicator.hpp>
#include <tandem/error.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

// Allreduce of ones: the sum is the number of ranks.
bool sums_to_size(tandem::Communicator& comm, std::vector<float>& v) {
  std::fill(v.begin(), v.end(), 1.0f);
  comm.allreduce(tandem::BufferView::of(std::span<float>(v)), tandem::ReduceOp::sum);
  return v.front() == static_cast<float>(comm.size()) && v.back() == v.front();
}

int shrink(int steps) {
  int world_rank = -1;
  try {
    auto comm = tandem::Communicator::from_env();
    world_rank = comm->rank();
    std::vector<float> v(1024);
    try {
      for (int step = 0; step < steps; ++step) {
        if (!sums_to_size(*comm, v)) throw std::runtime_error("a wrong sum");
        if (step == 0) {
          std::printf("rank %d: ready\n", world_rank);
          std::fflush(stdout);
        }
      }
      std::printf("rank %d: %d steps done, nobody lost\n", world_rank, steps);
      return 0;
    } catch (const tandem::Error& e) {
      if (e.code() != tandem::ErrorCode::PeerLost) throw;
      std::printf("rank %d: %s\n", world_rank, e.what());
    }
    const char* wait_ms = std::getenv("SHRINK_WAIT_MS");
    std::optional<std::chrono::milliseconds> wait;
    if (wait_ms != nullptr) wait = std::chrono::milliseconds(std::atoll(wait_ms));
    std::vector<int> lost;
    auto small = comm->shrink_lost(wait, &lost);
    std::string list;
    for (const int r : lost) list += (list.empty() ? "" : ",") + std::to_string(r);
    std::printf("rank %d: shrunk to rank %d of %d without [%s]\n", world_rank, small->rank(),
                small->size(), list.c_str());
    std::fflush(stdout);
    for (int step = 0; step < 5; ++step)
      if (!sums_to_size(*small, v)) throw std::runtime_error("a wrong sum after the shrink");
    std::printf("rank %d: went on with %d ranks\n", world_rank, small->size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fault_worker: rank %d: %s\n", world_rank, e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: fault_worker hang|kill|mismatch|exit RANK STEP [STEPS]\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "shrink") return shrink(argc > 4 ? std::atoi(argv[4]) : 1000000);
  const int bad_rank = std::atoi(argv[2]);
  const int bad_step = std::atoi(argv[3]);
  const int steps = argc > 4 ? std::atoi(argv[4]) : bad_step + 3;
  try {
    auto comm = tandem::Communicator::from_env();
    std::vector<float> v(1024);
    auto view = tandem::BufferView::of(std::span<float>(v));
    for (int step = 0; step < steps; ++step) {
      if (comm->rank() == bad_rank && step == bad_step) {
        if (mode == "hang") {
          std::printf("rank %d: hanging before step %d\n", bad_rank, step);
          std::fflush(stdout);
          for (;;) ::pause();
        }
        if (mode == "kill") std::raise(SIGKILL);
        if (mode == "exit") std::exit(3);
        if (mode == "mismatch") {
          comm->broadcast(view, 0);
          continue;
        }
      }
      comm->allreduce(view, tandem::ReduceOp::sum);
    }
    std::printf("rank %d: %d steps done\n", comm->rank(), steps);
    return 0;
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "fault_worker: %s\n", e.what());
    return 1;
  }
}
