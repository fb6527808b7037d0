/* Shared by the shm and MPI all-reduce benchmarks, so that both measure the
 * same sizes, iteration counts, data and statistics (nccl-tests style:
 * out-of-place f32 SUM, busbw = algbw * 2 (n - 1) / n). Plain C so that the
 * MPI benchmark can be built with mpicc-free CMake and either language. */
#ifndef OSLO_BENCH_ALLREDUCE_COMMON_H
#define OSLO_BENCH_ALLREDUCE_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* sched_setaffinity, CPU_SET */
#endif
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* 8 B, then powers of 4 from 16 B to 64 MB (so 4 KB and 4 MB are in). */
static const size_t kBenchSizes[] = {8,       16,       64,       256,       1 << 10,
                                     4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20,
                                     4 << 20, 16 << 20, 64 << 20};
#define BENCH_NSIZES (sizeof kBenchSizes / sizeof kBenchSizes[0])
/* Each size is timed in BENCH_TRIALS trials of bench_iters() calls; the table
 * reports the fastest trial (other jobs share this machine, so the minimum is
 * the reproducible number) and the median one. */
#define BENCH_TRIALS 7

/* OSLO_BENCH_SIZES="4096,4194304" restricts a run to those sizes (for quick
 * A/B comparisons on a shared machine); unset means all of kBenchSizes. */
static inline int bench_size_wanted(size_t bytes) {
  const char* list = getenv("OSLO_BENCH_SIZES");
  if (!list || !*list) return 1;
  for (const char* p = list; *p;) {
    char* end;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p) return 0;
    if (v == bytes) return 1;
    p = *end == ',' ? end + 1 : end;
  }
  return 0;
}

static inline int bench_iters(size_t bytes) {
  size_t it = (size_t)(256u << 20) / bytes; /* ~256 MB of payload per trial */
  if (it < 10) it = 10;
  if (it > 5000) it = 5000;
  return (int)it;
}

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank r's input: small integers, so the SUM is exact and checkable. */
static inline float bench_value(int rank, size_t i) {
  return (float)((rank + 1) * (int)(i % 7 + 1));
}
static inline float bench_expected(int nranks, size_t i) {
  return (float)(nranks * (nranks + 1) / 2 * (int)(i % 7 + 1));
}

/* Pins the calling process to CPU `cpu` (modulo the CPUs it may use). */
static inline void bench_pin(int cpu) {
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  int n = CPU_COUNT(&allowed), k = cpu % (n > 0 ? n : 1), seen = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (seen++ == k) {
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      sched_setaffinity(0, sizeof one, &one);
      return;
    }
  }
}

static int bench_cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* One table line; run.sh parses the lines starting with "row". */
static inline void bench_print_header(const char* name, int nranks) {
  printf(
      "# %s all-reduce, %d ranks, f32 sum, out of place; time = fastest of %d trials "
      "(median in brackets)\n",
      name, nranks, BENCH_TRIALS);
  printf("#%11s %12s %10s %10s %10s %10s %6s\n", "bytes", "count", "time_us", "median_us",
         "algbw_GB/s", "busbw_GB/s", "check");
}
static inline void bench_print_row(size_t bytes, int nranks, double* trial_s, int iters, int ok) {
  qsort(trial_s, BENCH_TRIALS, sizeof(double), bench_cmp_double);
  double best = trial_s[0] / iters, median = trial_s[BENCH_TRIALS / 2] / iters;
  double algbw = (double)bytes / best / 1e9;
  double busbw = algbw * 2.0 * (nranks - 1) / nranks;
  printf("row %8zu %12zu %10.3f %10.3f %10.3f %10.3f %6s\n", bytes, bytes / 4, best * 1e6,
         median * 1e6, algbw, busbw, ok ? "ok" : "WRONG");
  fflush(stdout);
}

#endif
