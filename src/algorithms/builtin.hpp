#pragma once
// Factories of the built-in algorithms, one per file under src/algorithms/<collective>/.

#include "algorithms/algorithm.hpp"

#include <memory>

namespace tandem::algorithms::detail {

std::unique_ptr<Algorithm> make_allreduce_ring();
std::unique_ptr<Algorithm> make_allreduce_recursive_doubling();
std::unique_ptr<Algorithm> make_allreduce_tree();
std::unique_ptr<Algorithm> make_allreduce_rabenseifner();
std::unique_ptr<Algorithm> make_allreduce_hierarchical();
std::unique_ptr<Algorithm> make_allreduce_direct();
std::unique_ptr<Algorithm> make_broadcast_tree();
std::unique_ptr<Algorithm> make_broadcast_ring();
std::unique_ptr<Algorithm> make_broadcast_direct();
std::unique_ptr<Algorithm> make_reduce_tree();
std::unique_ptr<Algorithm> make_reduce_ring();
std::unique_ptr<Algorithm> make_allgather_ring();
std::unique_ptr<Algorithm> make_allgather_recursive_doubling();
std::unique_ptr<Algorithm> make_allgather_bruck();
std::unique_ptr<Algorithm> make_allgather_direct();
std::unique_ptr<Algorithm> make_allgatherv_ring();
std::unique_ptr<Algorithm> make_reduce_scatter_ring();
std::unique_ptr<Algorithm> make_reduce_scatter_recursive_halving();
std::unique_ptr<Algorithm> make_reduce_scatter_direct();
std::unique_ptr<Algorithm> make_alltoall_pairwise();
std::unique_ptr<Algorithm> make_gather_linear();
std::unique_ptr<Algorithm> make_gather_binomial();
std::unique_ptr<Algorithm> make_scatter_linear();
std::unique_ptr<Algorithm> make_scatter_binomial();
std::unique_ptr<Algorithm> make_barrier_dissemination();
std::unique_ptr<Algorithm> make_send_direct();
std::unique_ptr<Algorithm> make_recv_direct();

}  // namespace tandem::algorithms::detail
