// A tandem program that misbehaves on purpose, for the failure tests and the README's
// culprit report: `fault_worker MODE RANK STEP [STEPS]` runs STEPS allreduces of 1024
// floats, and at step STEP rank RANK
//   hang      never enters the allreduce (waits for a signal);
//   kill      SIGKILLs itself;
//   mismatch  calls broadcast instead;
//   exit      exits with code 3.
#include <tandem/communicator.hpp>
#include <tandem/error.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: fault_worker hang|kill|mismatch|exit RANK STEP [STEPS]\n");
    return 2;
  }
  const std::string mode = argv[1];
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
