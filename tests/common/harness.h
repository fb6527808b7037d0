/*
 * A tiny harness for the multi-rank tests, which run as several processes
 * (under oslo-run) or as several threads of one process. CMocka keeps global
 * state and cannot run in several threads at once, so the multi-rank checks
 * count their own results and end with the "N passed, N failed" line.
 */
#ifndef OSLO_TEST_HARNESS_H
#define OSLO_TEST_HARNESS_H

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oslo.h"

typedef struct {
  int rank;
  int passed;
  int failed;
} th_state;

static pthread_mutex_t th_lock = PTHREAD_MUTEX_INITIALIZER;
static int th_total_passed, th_total_failed;

static inline void th_result(th_state *s, int ok, const char *file, int line, const char *fmt,
                             ...) {
  if (ok) {
    s->passed++;
    return;
  }
  s->failed++;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[rank %d] FAIL %s:%d: %s\n", s->rank, file, line, msg);
}

#define TH_CHECK(s, cond, ...) th_result((s), (cond) ? 1 : 0, __FILE__, __LINE__, __VA_ARGS__)
/* Checks an oslo call; on failure reports the status and last error. */
#define TH_OK(s, call)                                                         \
  do {                                                                         \
    oslo_status st_ = (call);                                                  \
    th_result((s), st_ == OSLO_OK, __FILE__, __LINE__, "%s -> %s (%s)", #call, \
              oslo_status_string(st_), oslo_last_error());                     \
  } while (0)

static inline void th_add_totals(th_state *s) {
  pthread_mutex_lock(&th_lock);
  th_total_passed += s->passed;
  th_total_failed += s->failed;
  pthread_mutex_unlock(&th_lock);
}

/* Prints the closing line and returns the exit status. */
static inline int th_finish(const char *label) {
  printf("%s: %d passed, %d failed\n", label, th_total_passed, th_total_failed);
  return th_total_failed ? 1 : 0;
}

/* Deterministic values in [-1, 1) from an index and a seed (no RNG state). */
static inline float th_value(uint64_t seed, uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (seed * 0xBF58476D1CE4E5B9ull);
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return (float)((double)(x >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static inline void th_fill(float *p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = th_value(seed, i);
}

/*
 * Compares with the tolerance: largest absolute error <= rel x the
 * largest magnitude in the reference. Returns 1 when close.
 */
static inline int th_close(const float *got, const double *ref, size_t n, double rel,
                           double *err_out) {
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < n; ++i) {
    if (fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
    double e = fabs((double)got[i] - ref[i]);
    if (!(e <= max_err)) max_err = e; /* NaN counts as an error */
  }
  if (err_out) *err_out = max_ref > 0 ? max_err / max_ref : max_err;
  return max_err <= rel * (max_ref > 0 ? max_ref : 1.0);
}

#endif
