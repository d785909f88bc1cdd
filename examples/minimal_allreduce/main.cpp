// The smallest tandem program: every rank contributes its rank number, and every rank
// checks the sum. Run it with: build/bin/tandemrun --nproc-per-node 4 build/bin/minimal_allreduce
#include <tandem/communicator.hpp>

#include <cstdio>
#include <vector>

int main() {
  try {
    auto comm = tandem::Communicator::from_env();
    std::vector<float> v(1024, static_cast<float>(comm->rank()));
    comm->allreduce(tandem::BufferView::of(std::span<float>(v)), tandem::ReduceOp::sum);
    const int n = comm->size();
    const float want = static_cast<float>(n * (n - 1) / 2);
    for (float x : v) {
      if (x != want) {
        std::fprintf(stderr, "rank %d: got %g, expected %g\n", comm->rank(), x, want);
        return 1;
      }
    }
    std::printf("rank %d of %d: allreduce ok (sum of ranks = %g)\n", comm->rank(), n, want);
    return 0;
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "minimal_allreduce: %s\n", e.what());
    return 1;
  }
}
