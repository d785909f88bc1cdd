/* Open MPI reference for tandem-perf: MPI_Allreduce, MPI_Bcast and MPI_Allgather timed the
 * same way and printed in the same columns (float, sum).
 *
 *   mpirun -np 2 ./mpi_bench -c allreduce -b 8 -e 128M -f 4 -n 20 -w 5
 *
 * For each size: WARMUP untimed iterations, a barrier, ITERS back-to-back iterations each
 * timed on every rank, the per-iteration times gathered once at the end; a row reports the
 * mean and the median over iterations of the slowest rank's time, algbw = size / mean time,
 * busbw = algbw x 2(n-1)/n (allreduce), x (n-1)/n (allgather), x 1 (broadcast). Sizes of
 * allgather are the whole output buffer (count per rank = size / ranks / 4). Then one checked
 * iteration counts wrong elements (#wrong). In-place uses MPI_IN_PLACE. -a NAME only sets the
 * label of the last column (the algorithm, chosen by the caller through the MPI library's own
 * variables; default "mpi"). Builds with Open MPI's mpicc and with MPICH's mpicc.mpich. */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum coll { ALLREDUCE, BCAST, ALLGATHER };

static size_t parse_size(const char* s) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (end == s || v < 0) {
    fprintf(stderr, "mpi_bench: bad size '%s'\n", s);
    exit(2);
  }
  switch (*end) {
    case 'k': case 'K': v *= 1024.0; break;
    case 'm': case 'M': v *= 1024.0 * 1024.0; break;
    case 'g': case 'G': v *= 1024.0 * 1024.0 * 1024.0; break;
    case '\0': break;
    default: fprintf(stderr, "mpi_bench: bad size '%s'\n", s); exit(2);
  }
  return (size_t)v;
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Deterministic, exact in float: small integers depending on rank and index. */
static float value(int src, size_t i) { return (float)((src * 31 + i * 7 + 1) % 97); }

static void run_once(enum coll c, float* in, float* out, size_t per, int in_place) {
  switch (c) {
    case ALLREDUCE:
      MPI_Allreduce(in_place ? MPI_IN_PLACE : in, out, (int)per, MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      break;
    case BCAST:
      MPI_Bcast(in_place ? out : in, (int)per, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
    case ALLGATHER:
      MPI_Allgather(in_place ? MPI_IN_PLACE : in, (int)per, MPI_FLOAT, out, (int)per, MPI_FLOAT,
                    MPI_COMM_WORLD);
      break;
  }
}

/* One checked iteration; returns wrong elements summed over ranks. */
static long check(enum coll c, float* in, float* out, size_t per, int in_place, int rank,
                  int world) {
  long wrong = 0;
  size_t i;
  size_t n_out = c == ALLGATHER ? per * (size_t)world : per;
  /* MPI_Bcast has one buffer: out-of-place it is `in`. */
  float* res = c == BCAST && !in_place ? in : out;
  float* src = in_place ? (c == ALLGATHER ? out + (size_t)rank * per : out) : in;
  for (i = 0; i < n_out; ++i) res[i] = 123.0f;
  if (c != BCAST || rank == 0)
    for (i = 0; i < per; ++i)
      src[i] = c == ALLREDUCE ? (float)((int)((rank + i) % 5) - 2) : value(rank, i);
  run_once(c, in, out, per, in_place);
  for (i = 0; i < n_out; ++i) {
    float want;
    if (c == ALLREDUCE) {
      int r;
      want = 0;
      for (r = 0; r < world; ++r) want += (float)((int)((r + i) % 5) - 2);
    } else if (c == BCAST) {
      want = value(0, i);
    } else {
      want = value((int)(i / per), i % per);
    }
    if (res[i] != want) ++wrong;
  }
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return wrong;
}

static void measure(enum coll c, float* in, float* out, size_t per, size_t bytes, int in_place,
                    int iters, int warmup, int rank, int world, double factor, long* wrong_total,
                    double* bw_sum, int* bw_n) {
  double* times = malloc(sizeof(double) * (size_t)iters);
  double* stamps = malloc(sizeof(double) * ((size_t)iters + 1));
  double* all = malloc(sizeof(double) * (size_t)iters * (size_t)world);
  double* slowest = malloc(sizeof(double) * (size_t)iters);
  double sum = 0, mean, p50, algbw, busbw;
  long wrong;
  int i, r;
  for (i = 0; i < warmup; ++i) run_once(c, in, out, per, in_place);
  MPI_Barrier(MPI_COMM_WORLD);
  /* One clock read per iteration, as tandem-perf: each iteration ends where the next begins. */
  stamps[0] = MPI_Wtime();
  for (i = 0; i < iters; ++i) {
    run_once(c, in, out, per, in_place);
    stamps[i + 1] = MPI_Wtime();
  }
  for (i = 0; i < iters; ++i) times[i] = (stamps[i + 1] - stamps[i]) * 1e6;
  MPI_Allgather(times, iters, MPI_DOUBLE, all, iters, MPI_DOUBLE, MPI_COMM_WORLD);
  for (i = 0; i < iters; ++i) {
    slowest[i] = 0;
    for (r = 0; r < world; ++r)
      if (all[(size_t)r * (size_t)iters + (size_t)i] > slowest[i])
        slowest[i] = all[(size_t)r * (size_t)iters + (size_t)i];
    sum += slowest[i];
  }
  mean = sum / iters;
  qsort(slowest, (size_t)iters, sizeof(double), cmp_double);
  p50 = slowest[(iters - 1) / 2];
  algbw = mean > 0 ? (double)bytes / (mean * 1e3) : 0;
  busbw = algbw * factor;
  wrong = check(c, in, out, per, in_place, rank, world);
  *wrong_total += wrong;
  *bw_sum += busbw;
  ++*bw_n;
  if (rank == 0) printf("  %9.2f %9.2f %7.2f %7.2f %6ld", mean, p50, algbw, busbw, wrong);
  free(times);
  free(stamps);
  free(all);
  free(slowest);
}

int main(int argc, char** argv) {
  enum coll c = ALLREDUCE;
  const char* cname = "allreduce";
  const char* label = "mpi";
  size_t minb = 8, maxb = 128u << 20, size;
  double step = 4, factor;
  int iters = 20, warmup = 5, rank, world, i, bw_n = 0;
  long wrong_total = 0;
  double bw_sum = 0;
  float *in, *out;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-c")) {
      cname = argv[i + 1];
      if (!strcmp(cname, "allreduce")) c = ALLREDUCE;
      else if (!strcmp(cname, "broadcast")) c = BCAST;
      else if (!strcmp(cname, "allgather")) c = ALLGATHER;
      else { if (rank == 0) fprintf(stderr, "mpi_bench: -c allreduce|broadcast|allgather\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    } else if (!strcmp(argv[i], "-b")) minb = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-e")) maxb = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-f")) step = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-w")) warmup = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-a")) label = argv[i + 1];
    else { if (rank == 0) fprintf(stderr, "mpi_bench: unknown flag %s\n", argv[i]); MPI_Abort(MPI_COMM_WORLD, 2); }
  }
  if (step <= 1 || iters < 1 || warmup < 0 || maxb < minb) {
    if (rank == 0) fprintf(stderr, "mpi_bench: need -f > 1, -n >= 1, -w >= 0, -e >= -b\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  factor = c == ALLREDUCE ? 2.0 * (world - 1) / world : c == ALLGATHER ? (double)(world - 1) / world : 1.0;
  in = aligned_alloc(4096, (maxb / 4096 + 1) * 4096);
  out = aligned_alloc(4096, (maxb / 4096 + 1) * 4096);
  memset(in, 0, (maxb / 4096 + 1) * 4096);
  memset(out, 0, (maxb / 4096 + 1) * 4096);
  if (rank == 0) {
    printf("# mpi_bench: %s, %d ranks, float sum, iters %d, warmup %d\n", cname, world, iters, warmup);
    printf("# %10s  %12s  %6s  %6s  %4s  %27s%-16s  %23s%-20s\n", "", "", "", "", "", "out-of-place", "",
           "in-place", "");
    printf("# %10s  %12s  %6s  %6s  %4s  %9s %9s %7s %7s %6s  %9s %9s %7s %7s %6s\n", "size",
           "count", "type", "redop", "root", "time", "p50", "algbw", "busbw", "#wrong", "time",
           "p50", "algbw", "busbw", "#wrong");
  }
  for (size = minb; size <= maxb;) {
    const size_t per = c == ALLGATHER ? size / 4 / (size_t)world : size / 4;
    const size_t bytes = c == ALLGATHER ? per * (size_t)world * 4 : per * 4;
    if (per > 0) {
      if (rank == 0)
        printf("  %10zu  %12zu  %6s  %6s  %4d", bytes, per, "f32", c == ALLREDUCE ? "sum" : "none",
               c == BCAST ? 0 : -1);
      measure(c, in, out, per, bytes, 0, iters, warmup, rank, world, factor, &wrong_total, &bw_sum, &bw_n);
      measure(c, in, out, per, bytes, 1, iters, warmup, rank, world, factor, &wrong_total, &bw_sum, &bw_n);
      if (rank == 0) {
        printf("  %s\n", label);
        fflush(stdout);
      }
    }
    {
      const size_t next = (size_t)((double)size * step);
      size = next > size ? next : size + 1;
    }
  }
  if (rank == 0) {
    printf("# Out of bounds values : %ld %s\n", wrong_total, wrong_total == 0 ? "OK" : "FAILED");
    printf("# Avg bus bandwidth : %.4f\n#\n", bw_n ? bw_sum / bw_n : 0.0);
  }
  free(in);
  free(out);
  MPI_Finalize();
  return wrong_total == 0 ? 0 : 1;
}
