// bench_linear: overhead of oslo's column-parallel linear forward at TP=1
// against the same product called directly on the GEMM library.
//
//   oslo  : oslo_parallel_linear_forward(y, layer, x)     (public C API only)
//   direct: dnnl_sgemm('N', 'T', M, N, K, 1, x, K, W, K, 0, y, N)
//           i.e. y[M,N] = x[M,K] * W[N,K]^T, row-major, the layout oslo uses
//
// Both use the same thread count (oslo: config "num_threads"; direct:
// omp_set_num_threads on the calling thread), the same input buffer, and
// preallocated outputs reused across iterations. The direct call uses its own
// 64-byte-aligned copy of the weight (as a plain GEMM-library user would), so
// any layout/allocation problem in oslo shows up as overhead.
//
// Timed samples alternate oslo and direct (order flipped every round: ABBA)
// so slow drifts of the shared machine hit both alike; the ratio is taken per
// round (direct_time / oslo_time, >= 0.95 is the goal) and summarised by its
// median and min..max spread.
//
// Correctness: oslo's output is compared with the direct output (whole
// tensor) and a sample of entries with a double-precision dot product.
//
// Usage: bench_linear [--threads 1,2] [--rounds R] [--quick]
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "oslo.h"

#define CHECK(call)                                                                         \
  do {                                                                                      \
    oslo_status st_ = (call);                                                               \
    if (st_ != OSLO_OK) {                                                                   \
      std::fprintf(stderr, "%s failed: %s: %s\n", #call, oslo_status_string(st_),           \
                   oslo_last_error());                                                      \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU time of the whole process (all its threads): unlike wall time it does
// not count the time other jobs of the shared machine hold our cores.
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Deterministic values in [-1, 1).
inline float hashval(uint64_t i, uint64_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

float* alloc_f32(size_t n) {
  size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!p) {
    std::fprintf(stderr, "out of memory\n");
    std::exit(1);
  }
  std::memset(p, 0, bytes);  // touch every page before timing
  return p;
}

void pin_to(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) std::perror("sched_setaffinity");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Stat {
  double med, lo, hi;
};

Stat stat(const std::vector<double>& v) {
  return {median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

struct Row {
  int threads;
  int64_t m, k, n;
  bool bias;
  int rounds, inner;
  double t_oslo, t_direct;  // median wall seconds per call
  Stat ratio;               // direct / oslo, wall time, per round
  Stat cpu_ratio;           // direct / oslo, process CPU time, per round
  double max_diff_vs_direct, max_rel_vs_double;
};

Row run_case(oslo_context* ctx, int threads, int64_t M, int64_t K, int64_t N, bool with_bias,
             int rounds) {
  // --- oslo layer -------------------------------------------------------
  oslo_linear_options o = oslo_linear_default_options();
  o.kind = OSLO_COLUMN_PARALLEL;
  o.in_features = K;
  o.out_features = N;
  o.bias = with_bias ? 1 : 0;
  o.gather_output = 0;
  o.dtype = OSLO_F32;
  oslo_parallel_linear* layer = nullptr;
  CHECK(oslo_parallel_linear_create(&layer, ctx, &o));

  const float wscale = 1.0f / std::sqrt(static_cast<float>(K));
  float* W = alloc_f32(static_cast<size_t>(N * K));  // the direct call's weight
  for (int64_t i = 0; i < N * K; ++i) W[i] = hashval(i, 1) * wscale;
  float* B = alloc_f32(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) B[i] = hashval(i, 2);
  float* X = alloc_f32(static_cast<size_t>(M * K));
  for (int64_t i = 0; i < M * K; ++i) X[i] = hashval(i, 3);
  float* Yo = alloc_f32(static_cast<size_t>(M * N));  // oslo's output (wrapped)
  float* Yd = alloc_f32(static_cast<size_t>(M * N));  // direct output

  {  // load the full weight (and bias) through the API; TP=1 keeps it all
    int64_t ws[2] = {N, K}, bs[1] = {N};
    oslo_tensor *wt = nullptr, *bt = nullptr;
    CHECK(oslo_tensor_wrap(&wt, ctx, W, OSLO_F32, 2, ws));
    if (with_bias) CHECK(oslo_tensor_wrap(&bt, ctx, B, OSLO_F32, 1, bs));
    CHECK(oslo_parallel_linear_load_full(layer, wt, bt));
    oslo_tensor_destroy(wt);
    oslo_tensor_destroy(bt);
  }
  int64_t xs[2] = {M, K}, ys[2] = {M, N};
  oslo_tensor *xt = nullptr, *yt = nullptr;
  CHECK(oslo_tensor_wrap(&xt, ctx, X, OSLO_F32, 2, xs));
  CHECK(oslo_tensor_wrap(&yt, ctx, Yo, OSLO_F32, 2, ys));

  auto call_oslo = [&] { CHECK(oslo_parallel_linear_forward(yt, layer, xt)); };
  auto call_direct = [&] {
    omp_set_num_threads(threads);
    dnnl_status_t st = dnnl_sgemm('N', 'T', M, N, K, 1.0f, X, K, W, K, 0.0f, Yd, N);
    if (st != dnnl_success) {
      std::fprintf(stderr, "dnnl_sgemm failed: %d\n", static_cast<int>(st));
      std::exit(1);
    }
    if (with_bias) {  // same work as oslo's bias epilogue, written the plain way
#pragma omp parallel for num_threads(threads)
      for (int64_t r = 0; r < M; ++r) {
        float* y = Yd + r * N;
        for (int64_t c = 0; c < N; ++c) y[c] += B[c];
      }
    }
  };

  // Enough calls per sample that one sample lasts >= ~0.15 s.
  call_oslo();  // warm-up (first-call setup of oneDNN, page faults)
  call_direct();
  double t0 = now();
  call_direct();
  double one = now() - t0;
  int inner = std::max(1, static_cast<int>(0.15 / std::max(one, 1e-6)));

  std::vector<double> to, td, ratio, cpu_ratio;
  struct Sample {
    double wall, cpu;
  };
  auto sample = [&](auto&& f) {
    double c = cpu_now(), s = now();
    for (int i = 0; i < inner; ++i) f();
    double w = now() - s;
    return Sample{w / inner, (cpu_now() - c) / inner};
  };
  for (int r = 0; r < rounds; ++r) {
    Sample a, b;
    if (r % 2 == 0) {
      a = sample(call_oslo);
      b = sample(call_direct);
    } else {
      b = sample(call_direct);
      a = sample(call_oslo);
    }
    to.push_back(a.wall);
    td.push_back(b.wall);
    ratio.push_back(b.wall / a.wall);
    cpu_ratio.push_back(b.cpu / a.cpu);
  }

  // --- correctness ---------------------------------------------------------
  double maxdiff = 0, ymax = 0;
  for (int64_t i = 0; i < M * N; ++i) {
    maxdiff = std::max(maxdiff, static_cast<double>(std::fabs(Yo[i] - Yd[i])));
    ymax = std::max(ymax, static_cast<double>(std::fabs(Yd[i])));
  }
  double maxrel = 0;
  for (int s = 0; s < 256; ++s) {
    int64_t r = static_cast<int64_t>((hashval(s, 7) + 1.0f) * 0.5f * M) % M;
    int64_t c = static_cast<int64_t>((hashval(s, 8) + 1.0f) * 0.5f * N) % N;
    double acc = with_bias ? B[c] : 0.0;
    for (int64_t kk = 0; kk < K; ++kk)
      acc += static_cast<double>(X[r * K + kk]) * static_cast<double>(W[c * K + kk]);
    maxrel = std::max(maxrel, std::fabs(Yo[r * N + c] - acc) / (ymax > 0 ? ymax : 1.0));
  }

  oslo_tensor_destroy(xt);
  oslo_tensor_destroy(yt);
  oslo_parallel_linear_destroy(layer);
  std::free(W);
  std::free(B);
  std::free(X);
  std::free(Yo);
  std::free(Yd);

  Row row{threads, M, K, N, with_bias, rounds, inner, median(to), median(td), stat(ratio),
          stat(cpu_ratio), maxdiff / (ymax > 0 ? ymax : 1.0), maxrel};
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> thread_counts = {1, 2};
  int rounds = 7;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      thread_counts.clear();
      std::string s = argv[++i];
      size_t p = 0;
      while (p < s.size()) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        thread_counts.push_back(std::atoi(s.substr(p, q - p).c_str()));
        p = q + 1;
      }
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--threads 1,2] [--rounds R] [--quick]\n", argv[0]);
      return 2;
    }
  }
  if (quick) rounds = 3;

  struct Shape {
    int64_t m, k, n;
    bool bias;
  };
  const Shape shapes[] = {
      {2048, 4096, 4096, false}, {1, 4096, 4096, false},  // headline (same FLOPs)
      {2048, 4096, 4096, true},  {1, 4096, 4096, true},   // bias epilogue included
  };

  std::vector<Row> rows;
  for (int t : thread_counts) {
    // One rank, t compute threads; pin to the first t cores so oneDNN's
    // threads (created on first use, inheriting the mask) stay put.
    std::vector<int> cpus;
    for (int c = 0; c < t; ++c) cpus.push_back(c);
    pin_to(cpus);
    oslo_context* ctx = nullptr;
    std::string cfg = "{\"num_threads\": " + std::to_string(t) + "}";
    CHECK(oslo_context_create(&ctx, cfg.c_str()));
    for (const Shape& s : shapes) {
      rows.push_back(run_case(ctx, t, s.m, s.k, s.n, s.bias, rounds));
      const Row& r = rows.back();
      std::fprintf(stderr, "  done: threads=%d %lldx%lldx%lld bias=%d ratio=%.3f\n", t,
                   static_cast<long long>(r.m), static_cast<long long>(r.k),
                   static_cast<long long>(r.n), r.bias ? 1 : 0, r.ratio.med);
    }
    oslo_context_destroy(ctx);
  }

  std::printf("\n| threads | M x K x N          | bias | oslo ms | direct ms | oslo GFLOP/s | direct/oslo wall: median [min..max] | goal   | met | direct/oslo CPU time: median [min..max] | max|oslo-direct|/max|y| | max err vs fp64 |\n");
  std::printf("|--------:|--------------------|------|--------:|----------:|-------------:|-------------------------------------|--------|-----|-----------------------------------------|------------------------:|----------------:|\n");
  bool all_ok = true, goal_ok = true;
  for (const Row& r : rows) {
    char shape[64];
    std::snprintf(shape, sizeof shape, "%lld x %lld x %lld", static_cast<long long>(r.m),
                  static_cast<long long>(r.k), static_cast<long long>(r.n));
    bool met = r.ratio.med >= 0.95;
    if (!r.bias) goal_ok = goal_ok && met;
    bool ok = r.max_diff_vs_direct <= 1e-5 && r.max_rel_vs_double <= 1e-4;
    all_ok = all_ok && ok;
    std::printf("| %7d | %-18s | %-4s | %7.3f | %9.3f | %12.1f | %5.3f [%5.3f..%5.3f]               | %-6s | %-3s | %5.3f [%5.3f..%5.3f]                   | %23.1e | %15.1e |\n",
                r.threads, shape, r.bias ? "yes" : "no", r.t_oslo * 1e3, r.t_direct * 1e3,
                2.0 * r.m * r.n * r.k / r.t_oslo * 1e-9, r.ratio.med, r.ratio.lo, r.ratio.hi,
                r.bias ? "(info)" : ">=0.95", r.bias ? "-" : (met ? "yes" : "NO"), r.cpu_ratio.med,
                r.cpu_ratio.lo, r.cpu_ratio.hi, r.max_diff_vs_direct, r.max_rel_vs_double);
  }
  std::printf("\n(%d alternating rounds per row; each sample averages enough calls to last >= 0.15 s;"
              " direct/oslo = direct time / oslo time per round)\n",
              rows.empty() ? 0 : rows[0].rounds);
  std::printf("correctness: %s (oslo vs direct <= 1e-5, sampled entries vs fp64 <= 1e-4, relative to max|y|)\n",
              all_ok ? "PASS" : "FAIL");
  std::printf("headline goal (no bias, direct/oslo >= 0.95): %s\n", goal_ok ? "MET" : "NOT MET");
  return all_ok ? 0 : 1;
}
