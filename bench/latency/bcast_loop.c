/* Open MPI's side of bench/latency/run.sh: the loop of bcast_loop.cpp with MPI_Bcast. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const long calls = argc > 1 ? atol(argv[1]) : 1000000;
  float v[2] = {1, 2};
  for (int i = 0; i < 10000; ++i) MPI_Bcast(v, 2, MPI_FLOAT, 0, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < 10000; ++i) MPI_Bcast(v, 2, MPI_FLOAT, 0, MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (long i = 0; i < calls; ++i) MPI_Bcast(v, 2, MPI_FLOAT, 0, MPI_COMM_WORLD);
  const double us = (MPI_Wtime() - t0) * 1e6 / (double)calls;
  MPI_Barrier(MPI_COMM_WORLD);
  printf("Open MPI rank %d: %.4f us per 8 B broadcast\n", rank, us);
  MPI_Finalize();
  return 0;
}
