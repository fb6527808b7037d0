// bench_linear: overhead of oslo's column-parallel linear forward at TP=1
// against the same product called directly on the GEMM library.
//
//   oslo  : oslo_parallel_linear_forward(y, layer, x)     (public C API only)
//   direct: dnnl_sgemm('N', 'T', M, N, K, 1, x, K, W, K, 0, y, N)
//           i.e. y[M,N] = x[M,K] * W[N,K]^T, row-major, the layout oslo uses
//
// All variants use the same thread count (oslo: config "num_threads";
// direct: omp_set_num_threads on the calling thread), the same input buffer,
// and preallocated outputs reused across iterations. Two direct references:
// "same" runs on the layer's own weight memory (the headline: identical
// operands, so the ratio is pure layer overhead), "own" on a separate
// 64-byte-aligned copy of W, as a plain GEMM-library user would hold it.
//
// The variants run back to back in every round, in rotating order, so slow
// drifts of the shared machine hit all alike; ratios are taken per round
// (direct_time / oslo_time, >= 0.95 is the goal) and summarised by their
// median and min..max spread. Wall time is the headline; process CPU time is
// reported too (it does not count time other jobs held our cores).
//
// Correctness: oslo's output is compared with both direct outputs (whole
// tensor) and a sample of entries with a double-precision dot product.
//
// Usage: bench_linear [--threads 1,2] [--rounds R] [--quick]
//   R rounds for the M = 2048 rows (default 7), 3 R for the cheap M = 1 rows.
//   Rows: M = 2048 and M = 1 without bias (the headline, same FLOPs as the
//   plain GEMM) for every thread count; with bias (information) at 1 thread.
//        bench_linear --dtypes [--threads 1,2] [--rounds R]
//   weights stored as f32, bf16 and f16 against each other (benchmark 4).
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <sched.h>
#include <sys/resource.h>
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

#define CHECK(call)                                                               \
  do {                                                                            \
    oslo_status st_ = (call);                                                     \
    if (st_ != OSLO_OK) {                                                         \
      std::fprintf(stderr, "%s failed: %s: %s\n", #call, oslo_status_string(st_), \
                   oslo_last_error());                                            \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
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

std::string stat_text(const Stat& st) {
  char b[64];
  std::snprintf(b, sizeof b, "%.3f [%.3f..%.3f]", st.med, st.lo, st.hi);
  return b;
}

// Round-to-nearest-even f32 -> bf16 / f16 bits, and back (the benchmark's own
// conversions, independent of oslo's).
uint16_t to_half(float f, oslo_dtype dt) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (dt == OSLO_DTYPE_BF16) {
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
  // f16 for the benchmark's range (|f| < 2): normal values by bits,
  // subnormal ones (|f| < 2^-14) as multiples of 2^-24 (nearbyint: ties to
  // even).
  const uint32_t sign = (u >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((u >> 23) & 0xffu) - 127 + 15;
  if (exp <= 0)
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(
                                            std::ldexp(std::fabs(static_cast<double>(f)), 24))));
  uint32_t man = u & 0x7fffffu;
  uint32_t r = (static_cast<uint32_t>(exp) << 10) | (man >> 13);
  const uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}
double from_half(uint16_t h, oslo_dtype dt) {
  if (dt == OSLO_DTYPE_BF16) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v = exp == 0 ? std::ldexp(man, -24) : std::ldexp(1024 + man, exp - 25);
  return (h & 0x8000u) ? -v : v;
}

struct Row {
  int threads;
  int64_t m, k, n;
  bool bias;
  int rounds, inner;
  double t_oslo, t_same, t_own;  // median wall seconds per call
  double best_ratio;             // fastest direct(same) sample / fastest oslo sample
  Stat ratio_same;               // direct(same W memory) / oslo, wall time, per round
  Stat cpu_ratio_same;           // the same with process CPU time
  Stat ratio_own;                // direct(own W copy) / oslo, wall time, per round
  double util;                   // median CPU time / wall time of the oslo samples
  double max_diff_vs_direct, max_rel_vs_double;
};

// Runs one shape: oslo's forward and two direct dnnl_sgemm references,
//   same: on the layer's own weight memory (borrowed through
//         oslo_parallel_linear_params + oslo_tensor_data): identical
//         operands at identical addresses, so the ratio is the layer's
//         overhead and nothing else (the headline);
//   own:  on a separate 64-byte-aligned copy of W, as a plain GEMM user
//         would hold it (on this VM the physical placement of a 64 MB
//         buffer alone moves the memory-bound M = 1 case by up to ~25%).
Row run_case(oslo_context* ctx, int threads, int64_t M, int64_t K, int64_t N, bool with_bias,
             int rounds) {
  oslo_parallel_linear_options o;
  oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
  o.kind = OSLO_LINEAR_COLUMN;
  o.in_features = K;
  o.out_features = N;
  o.bias = with_bias ? 1 : 0;
  o.gather_output = 0;
  o.dtype = OSLO_DTYPE_F32;
  oslo_parallel_linear* layer = nullptr;
  CHECK(oslo_parallel_linear_create(ctx, &o, &layer));

  const float wscale = 1.0f / std::sqrt(static_cast<float>(K));
  float* W = alloc_f32(static_cast<size_t>(N * K));  // the "own" reference's weight
  for (int64_t i = 0; i < N * K; ++i) W[i] = hashval(i, 1) * wscale;
  float* B = alloc_f32(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) B[i] = hashval(i, 2);
  float* X = alloc_f32(static_cast<size_t>(M * K));
  for (int64_t i = 0; i < M * K; ++i) X[i] = hashval(i, 3);
  float* Yo = alloc_f32(static_cast<size_t>(M * N));  // oslo's output (wrapped)
  float* Ys = alloc_f32(static_cast<size_t>(M * N));  // direct output, same W memory
  float* Yw = alloc_f32(static_cast<size_t>(M * N));  // direct output, own W copy

  {  // load the full weight (and bias) through the API; TP=1 keeps it all
    int64_t ws[2] = {N, K}, bs[1] = {N};
    oslo_tensor *wt = nullptr, *bt = nullptr;
    CHECK(oslo_tensor_wrap(ctx, W, OSLO_DTYPE_F32, 2, ws, &wt));
    if (with_bias) CHECK(oslo_tensor_wrap(ctx, B, OSLO_DTYPE_F32, 1, bs, &bt));
    CHECK(oslo_parallel_linear_load_full(layer, wt, bt));
    oslo_tensor_destroy(wt);
    oslo_tensor_destroy(bt);
  }
  const float* Wl = nullptr;  // the layer's weight memory
  {
    oslo_tensor* lw = nullptr;
    CHECK(oslo_parallel_linear_params(layer, &lw, nullptr, nullptr, nullptr));
    void* p = nullptr;
    CHECK(oslo_tensor_data(lw, &p));
    Wl = static_cast<const float*>(p);
  }
  int64_t xs[2] = {M, K}, ys[2] = {M, N};
  oslo_tensor *xt = nullptr, *yt = nullptr;
  CHECK(oslo_tensor_wrap(ctx, X, OSLO_DTYPE_F32, 2, xs, &xt));
  CHECK(oslo_tensor_wrap(ctx, Yo, OSLO_DTYPE_F32, 2, ys, &yt));

  auto call_oslo = [&] { CHECK(oslo_parallel_linear_forward(layer, xt, yt)); };
  auto direct = [&](const float* w, float* y) {
    omp_set_num_threads(threads);
    dnnl_status_t st = dnnl_sgemm('N', 'T', M, N, K, 1.0f, X, K, w, K, 0.0f, y, N);
    if (st != dnnl_success) {
      std::fprintf(stderr, "dnnl_sgemm failed: %d\n", static_cast<int>(st));
      std::exit(1);
    }
    if (with_bias) {  // same work as oslo's bias epilogue, written the plain way
                      // (threads only when there is enough work, as oslo does: waking a second
                      // thread for the 4096 adds of M = 1 would cost more than the adds)
#pragma omp parallel for num_threads(threads) if (M * N > (1 << 15))
      for (int64_t r = 0; r < M; ++r) {
        float* yr = y + r * N;
        for (int64_t c = 0; c < N; ++c) yr[c] += B[c];
      }
    }
  };
  auto call_same = [&] { direct(Wl, Ys); };
  auto call_own = [&] { direct(W, Yw); };

  // Warm-up (first-call setup of oneDNN, page faults), then enough calls per
  // sample that one sample lasts >= ~0.15 s.
  call_oslo();
  call_own();
  call_same();
  double t0 = now();
  call_same();
  double one = now() - t0;
  const int inner = std::max(1, static_cast<int>(0.15 / std::max(one, 1e-6)));

  struct Sample {
    double wall, cpu;
  };
  auto sample = [&](int which) {
    double c = cpu_now(), s = now();
    for (int i = 0; i < inner; ++i) {
      if (which == 0)
        call_oslo();
      else if (which == 1)
        call_same();
      else
        call_own();
    }
    double w = now() - s;
    return Sample{w / inner, (cpu_now() - c) / inner};
  };
  // The three variants run back to back in every round; the order cycles
  // through all 6 permutations so no variant always goes first or last.
  static const int orders[6][3] = {{0, 1, 2}, {1, 2, 0}, {2, 0, 1},
                                   {2, 1, 0}, {1, 0, 2}, {0, 2, 1}};
  std::vector<double> to, ts, tw, rs, rcs, rw, util;
  for (int r = 0; r < rounds; ++r) {
    Sample smp[3];
    for (int j = 0; j < 3; ++j) smp[orders[r % 6][j]] = sample(orders[r % 6][j]);
    to.push_back(smp[0].wall);
    ts.push_back(smp[1].wall);
    tw.push_back(smp[2].wall);
    rs.push_back(smp[1].wall / smp[0].wall);
    rcs.push_back(smp[1].cpu / smp[0].cpu);
    rw.push_back(smp[2].wall / smp[0].wall);
    util.push_back(smp[0].cpu / smp[0].wall);
  }

  // --- correctness ---------------------------------------------------------
  double maxdiff = 0, ymax = 0;
  for (int64_t i = 0; i < M * N; ++i) {
    maxdiff = std::max(maxdiff, static_cast<double>(std::fabs(Yo[i] - Ys[i])));
    maxdiff = std::max(maxdiff, static_cast<double>(std::fabs(Yo[i] - Yw[i])));
    ymax = std::max(ymax, static_cast<double>(std::fabs(Yw[i])));
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
  for (float* p : {W, B, X, Yo, Ys, Yw}) std::free(p);

  return Row{threads,
             M,
             K,
             N,
             with_bias,
             rounds,
             inner,
             median(to),
             median(ts),
             median(tw),
             *std::min_element(ts.begin(), ts.end()) / *std::min_element(to.begin(), to.end()),
             stat(rs),
             stat(rcs),
             stat(rw),
             median(util),
             maxdiff / (ymax > 0 ? ymax : 1.0),
             maxrel};
}

// --dtypes: the column linear forward with the weight stored as f32, bf16
// and f16 (the input in the weight's dtype, the output f32), at 1 x 4096 x
// 4096 (decode: memory-bound, bf16 reads half the bytes) and 2048 x 4096 x
// 4096 (compute-bound: oneDNN's bf16 matmul uses AVX512_BF16). The three
// dtypes run back to back in every round; ratio = dtype time / f32 time per
// round, median [min..max] (goal bf16 <= 0.6 at M = 1 and <= 1.0 at M = 2048).
// Each output is checked against a double-precision product of the stored
// (rounded) operands on sampled entries.
int dtype_bench(const std::vector<int>& threads_list, int rounds) {
  const int64_t K = 4096, N = 4096;
  std::printf(
      "\n| threads | M x K x N | f32 ms | bf16 ms | f16 ms | bf16 / f32 | f16 / f32 | max rel err "
      "(bf16, f16) |\n");
  std::printf("|--:|---|--:|--:|--:|---|---|---|\n");
  for (int threads : threads_list) {
    std::vector<int> cpus;
    for (int c = 0; c < threads; ++c) cpus.push_back(c);
    pin_to(cpus);
    char cfg[64];
    std::snprintf(cfg, sizeof cfg, "{\"num_threads\": %d}", threads);
    oslo_context* ctx = nullptr;
    CHECK(oslo_context_create(cfg, &ctx));
    float* W = alloc_f32(static_cast<size_t>(N * K));
    for (int64_t i = 0; i < N * K; ++i) W[i] = hashval(i, 1) / 64.0f;
    int64_t ws[2] = {N, K};
    oslo_tensor* wt = nullptr;
    CHECK(oslo_tensor_wrap(ctx, W, OSLO_DTYPE_F32, 2, ws, &wt));
    const oslo_dtype dts[3] = {OSLO_DTYPE_F32, OSLO_DTYPE_BF16, OSLO_DTYPE_F16};
    oslo_parallel_linear* layers[3];
    for (int d = 0; d < 3; ++d) {
      oslo_parallel_linear_options o;
      oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
      o.in_features = K;
      o.out_features = N;
      o.bias = 0;
      o.dtype = dts[d];
      CHECK(oslo_parallel_linear_create(ctx, &o, &layers[d]));
      CHECK(oslo_parallel_linear_load_full(layers[d], wt, nullptr));
    }
    for (int64_t M : {int64_t(1), int64_t(2048)}) {
      float* X = alloc_f32(static_cast<size_t>(M * K));
      for (int64_t i = 0; i < M * K; ++i) X[i] = hashval(i, 3);
      int64_t xs[2] = {M, K}, ys[2] = {M, N};
      oslo_tensor *x32 = nullptr, *xin[3], *y[3];
      CHECK(oslo_tensor_wrap(ctx, X, OSLO_DTYPE_F32, 2, xs, &x32));
      for (int d = 0; d < 3; ++d) {
        CHECK(oslo_tensor_create(ctx, dts[d], 2, xs, &xin[d]));
        // x in the layer dtype: a column layer of tp 1 with identity weight
        // would do; a plain conversion through the host is simpler.
        std::vector<uint16_t> h(static_cast<size_t>(M * K));
        if (dts[d] == OSLO_DTYPE_F32) {
          CHECK(oslo_tensor_copy_from_host(xin[d], X, static_cast<size_t>(M * K) * 4));
        } else {
          for (int64_t i = 0; i < M * K; ++i) h[i] = to_half(X[i], dts[d]);
          CHECK(oslo_tensor_copy_from_host(xin[d], h.data(), static_cast<size_t>(M * K) * 2));
        }
        CHECK(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 2, ys, &y[d]));
        CHECK(oslo_parallel_linear_forward(layers[d], xin[d], y[d]));  // warm-up
      }
      const int inner = M == 1 ? 20 : 1;
      const int R = M == 1 ? 3 * rounds : rounds;
      std::vector<double> t[3], r16, r8;
      for (int r = 0; r < R; ++r) {
        double tt[3];
        for (int k = 0; k < 3; ++k) {
          int d = (r + k) % 3;  // rotating order
          double st = now();
          for (int i = 0; i < inner; ++i)
            CHECK(oslo_parallel_linear_forward(layers[d], xin[d], y[d]));
          tt[d] = (now() - st) / inner;
          t[d].push_back(tt[d]);
        }
        r16.push_back(tt[1] / tt[0]);
        r8.push_back(tt[2] / tt[0]);
      }
      // Check sampled entries against f64 of the rounded operands.
      double err[3] = {0, 0, 0};
      for (int d = 1; d < 3; ++d) {
        std::vector<float> out(static_cast<size_t>(M * N));
        CHECK(oslo_tensor_copy_to_host(y[d], out.data(), out.size() * 4));
        double ymax = 0, emax = 0;
        for (int sidx = 0; sidx < 64; ++sidx) {
          int64_t i = (sidx * 7919) % M, j = (sidx * 104729) % N;
          double ref = 0;
          for (int64_t k = 0; k < K; ++k)
            ref += static_cast<double>(from_half(to_half(X[i * K + k], dts[d]), dts[d])) *
                   from_half(to_half(W[j * K + k], dts[d]), dts[d]);
          ymax = std::max(ymax, std::fabs(ref));
          emax = std::max(emax, std::fabs(out[i * N + j] - ref));
        }
        err[d] = emax / (ymax > 0 ? ymax : 1);
      }
      std::printf("| %d | %lld x 4096 x 4096 | %.2f | %.2f | %.2f | %s | %s | %.1e, %.1e |\n",
                  threads, static_cast<long long>(M), median(t[0]) * 1e3, median(t[1]) * 1e3,
                  median(t[2]) * 1e3, stat_text(stat(r16)).c_str(), stat_text(stat(r8)).c_str(),
                  err[1], err[2]);
      std::fflush(stdout);
      for (int d = 0; d < 3; ++d) {
        oslo_tensor_destroy(xin[d]);
        oslo_tensor_destroy(y[d]);
      }
      oslo_tensor_destroy(x32);
      std::free(X);
    }
    for (auto* l : layers) oslo_parallel_linear_destroy(l);
    oslo_tensor_destroy(wt);
    oslo_context_destroy(ctx);
    std::free(W);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> thread_counts = {1, 2};
  int rounds = 7;
  bool quick = false, dtypes = false;
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
    } else if (a == "--dtypes") {
      dtypes = true;
    } else {
      std::fprintf(stderr, "usage: %s [--threads 1,2] [--rounds R] [--quick] [--dtypes]\n",
                   argv[0]);
      return 2;
    }
  }
  if (quick) rounds = 3;
  if (dtypes) return dtype_bench(thread_counts, rounds);

  struct Shape {
    int64_t m, k, n;
    bool bias;
  };
  const Shape shapes[] = {
      {2048, 4096, 4096, false},
      {1, 4096, 4096, false},  // headline (same FLOPs)
      {2048, 4096, 4096, true},
      {1, 4096, 4096, true},  // bias epilogue included
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
    CHECK(oslo_context_create(cfg.c_str(), &ctx));
    for (const Shape& s : shapes) {
      if (s.bias && t != thread_counts.front()) continue;  // bias rows: first thread count only
      // M = 1 samples are short: more rounds for the same wall time.
      rows.push_back(run_case(ctx, t, s.m, s.k, s.n, s.bias, s.m == 1 ? 3 * rounds : rounds));
      const Row& r = rows.back();
      std::fprintf(stderr, "  done: threads=%d %lldx%lldx%lld bias=%d ratio=%.3f\n", t,
                   static_cast<long long>(r.m), static_cast<long long>(r.k),
                   static_cast<long long>(r.n), r.bias ? 1 : 0, r.ratio_same.med);
    }
    oslo_context_destroy(ctx);
  }

  std::printf(
      "\n| threads | M x K x N          | bias | oslo ms | direct ms | direct/oslo, wall: median "
      "[min..max] | goal   | met | direct/oslo, CPU time: median [min..max] | best direct / best "
      "oslo | own-W direct ms | own-W/oslo median | oslo CPU/wall | max|oslo-direct|/max|y| | max "
      "err vs fp64 |\n");
  std::printf(
      "|--------:|--------------------|------|--------:|----------:|------------------------------"
      "-----|--------|-----|-----------------------------------------|------------------------:|--"
      "--------------:|------------------:|--------------:|------------------------:|------------"
      "----:|\n");
  bool all_ok = true, goal_ok = true;
  for (const Row& r : rows) {
    char shape[64];
    std::snprintf(shape, sizeof shape, "%lld x %lld x %lld", static_cast<long long>(r.m),
                  static_cast<long long>(r.k), static_cast<long long>(r.n));
    bool met = r.ratio_same.med >= 0.95;
    if (!r.bias) goal_ok = goal_ok && met;
    bool ok = r.max_diff_vs_direct <= 1e-5 && r.max_rel_vs_double <= 1e-4;
    all_ok = all_ok && ok;
    std::printf(
        "| %7d | %-18s | %-4s | %7.2f | %9.2f | %5.3f [%5.3f..%5.3f]             | %-6s | %-3s "
        "| %5.3f [%5.3f..%5.3f]                   | %23.3f | %15.2f | %17.3f | %13.2f | %23.1e | "
        "%15.1e |\n",
        r.threads, shape, r.bias ? "yes" : "no", r.t_oslo * 1e3, r.t_same * 1e3, r.ratio_same.med,
        r.ratio_same.lo, r.ratio_same.hi, r.bias ? "(info)" : ">=0.95",
        r.bias ? "-" : (met ? "yes" : "NO"), r.cpu_ratio_same.med, r.cpu_ratio_same.lo,
        r.cpu_ratio_same.hi, r.best_ratio, r.t_own * 1e3, r.ratio_own.med, r.util,
        r.max_diff_vs_direct, r.max_rel_vs_double);
  }
  std::printf(
      "\n(%d rounds per M = 2048 row, %d per M = 1 row, the 3 variants back to back in rotating "
      "order; each sample averages enough calls to last >= 0.15 s (one call for M = 2048);"
      " direct/oslo = dnnl_sgemm time on the layer's own weight memory / oslo time within a round; "
      "best = ratio of the fastest samples; own-W = dnnl_sgemm on a separate copy of W; oslo "
      "CPU/wall = CPU seconds the"
      " process got per wall second during the oslo samples (= threads when no other job shares "
      "its cores))\n",
      rounds, 3 * rounds);
  std::printf(
      "correctness: %s (oslo vs direct <= 1e-5, sampled entries vs fp64 <= 1e-4, relative to "
      "max|y|)\n",
      all_ok ? "PASS" : "FAIL");
  std::printf("headline goal (no bias, direct/oslo >= 0.95): %s\n", goal_ok ? "MET" : "NOT MET");
  return all_ok ? 0 : 1;
}
