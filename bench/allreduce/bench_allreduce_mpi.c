/* MPI_Allreduce with the same sizes, data and statistics as
 * bench_allreduce_shm. Run: mpirun --bind-to none -np 2 bench_allreduce_mpi
 * (each rank pins itself to CPU = rank, as the shm benchmark does). */
#include "bench/allreduce/bench_common.h"

#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  bench_pin(rank);
  if (rank == 0) bench_print_header("Open MPI", n);
  const size_t max_count = kBenchSizes[BENCH_NSIZES - 1] / 4;
  float* in = aligned_alloc(64, max_count * 4);
  float* out = aligned_alloc(64, max_count * 4);
  if (!in || !out) MPI_Abort(MPI_COMM_WORLD, 1);
  for (size_t i = 0; i < max_count; ++i) in[i] = bench_value(rank, i);
  for (size_t s = 0; s < BENCH_NSIZES; ++s) {
    const size_t bytes = kBenchSizes[s], count = bytes / 4;
    if (!bench_size_wanted(bytes)) continue;
    const int iters = bench_iters(bytes);
    for (int i = 0; i < iters / 10 + 5; ++i)
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double trial[BENCH_TRIALS];
    for (int t = 0; t < BENCH_TRIALS; ++t) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = bench_now();
      for (int i = 0; i < iters; ++i)
        MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double mine = bench_now() - t0, worst = 0;
      MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      trial[t] = worst;
    }
    int ok = 1, all_ok = 0;
    for (size_t i = 0; i < count; ++i)
      if (out[i] != bench_expected(n, i)) ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) bench_print_row(bytes, n, trial, iters, all_ok);
  }
  free(in);
  free(out);
  MPI_Finalize();
  return 0;
}
