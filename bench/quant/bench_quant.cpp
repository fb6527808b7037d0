// bench_quant: products with block-quantized weights on the CPU backend
// (issue 35). Default: GEMV (M = 1) c = a @ w^T for weights [N, K] of
// 4096 x 4096, 768 x 3072 and 3072 x 768 stored as f32 and bf16 (the
// backend's matmul) and q8_0, q4_0, q4_k, q6_k (matmul_quant), at 1 and 2
// threads. The engines run interleaved, one after another in every round;
// each rotates over enough copies of its weight (>= 256 MiB in all) that
// every call reads it from memory, not from the caches. Per engine: best and
// median ms per product over the rounds, GB/s of weight bytes read (at the
// median) and the median time's ratio to f32's.
//
// --prefill: M = 16 .. 512 against a 4096 x 4096 weight (q8_0, q4_k) at 2
// threads, the CPU backend's integer path (quantized activations, tiles of
// four rows) against its dequantize + sgemm path, to pick quant_gemm_rows.
//
// Usage: bench_quant [--rounds R] [--prefill]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_quant.hpp"
#include "core/backend/backend.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/quant/quant.hpp"

using namespace oslo;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t g_seed = 12345;
float rndf() {
  g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<float>(static_cast<int64_t>(g_seed >> 11) % 2000001 - 1000000) * 1e-6f;
}

struct Engine {
  std::string name;
  oslo_dtype dt;
  size_t bytes = 0;  // of one weight
  std::vector<std::vector<uint8_t>> copies;
  std::vector<std::unique_ptr<PackedWeight>> packs;  // the packed engines' copies
  std::vector<double> ms;                            // per round
};

// The weight [N, K] in dtype dt from the f32 values x.
std::vector<uint8_t> encode(oslo_dtype dt, const std::vector<float>& x, int64_t N, int64_t K) {
  std::vector<uint8_t> out(dtype_bytes(dt, N * K));
  if (dt == OSLO_DTYPE_F32) {
    std::memcpy(out.data(), x.data(), out.size());
  } else if (dt == OSLO_DTYPE_BF16) {
    for (int64_t i = 0; i < N * K; ++i) {
      const uint16_t h = f32_to_bf16(x[static_cast<size_t>(i)]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else if (dt == OSLO_DTYPE_Q8_0 || dt == OSLO_DTYPE_Q4_0) {
    const quant::Format f = quant::format_of_dtype(dt);
    const size_t rb = dtype_bytes(dt, K);
    for (int64_t n = 0; n < N; ++n)
      quant::quantize_row(f, x.data() + n * K, out.data() + rb * n, static_cast<uint64_t>(K));
  } else {  // K-quants: random codes with sane scales (no quantizer yet)
    for (auto& b : out) b = static_cast<uint8_t>(rndf() * 127 + 128);
    int64_t be, bb;
    dtype_block(dt, &be, &bb);
    for (size_t o = 0; o < out.size(); o += static_cast<size_t>(bb)) {
      const uint16_t d = f32_to_f16(0.001f);
      if (dt == OSLO_DTYPE_Q4_K) {
        std::memcpy(out.data() + o, &d, 2);
        std::memcpy(out.data() + o + 2, &d, 2);
      } else {
        std::memcpy(out.data() + o + 208, &d, 2);
      }
    }
  }
  return out;
}

View view_of(void* p, oslo_dtype dt, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  View v = make_view(p, dt, shape);
  for (size_t i = 0; i < strides.size(); ++i) v.strides[i] = strides[i];
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void gemv(int rounds) {
  const int64_t shapes[][2] = {{4096, 4096}, {768, 3072}, {3072, 768}};
  const oslo_dtype dts[] = {OSLO_DTYPE_F32,  OSLO_DTYPE_BF16, OSLO_DTYPE_Q8_0,
                            OSLO_DTYPE_Q4_0, OSLO_DTYPE_Q4_K, OSLO_DTYPE_Q6_K};
  std::printf(
      "| threads | N x K | weight | bytes | best ms | median ms | GB/s (median) | "
      "time / f32 |\n|--:|---|---|--:|--:|--:|--:|--:|\n");
  for (int threads : {1, 2}) {
    BackendOptions o;
    o.num_threads = threads;
    std::shared_ptr<Backend> be = create_backend("cpu", o);
    for (auto& s : shapes) {
      const int64_t N = s[0], K = s[1];
      std::vector<float> x(static_cast<size_t>(N * K));
      for (auto& e : x) e = rndf();
      std::vector<float> a(static_cast<size_t>(K)), c(static_cast<size_t>(N));
      for (auto& e : a) e = rndf();
      std::vector<Engine> es;
      for (oslo_dtype dt : dts) {
        Engine e;
        e.name = dtype_name(dt);
        e.dt = dt;
        std::vector<uint8_t> w = encode(dt, x, N, K);
        e.bytes = w.size();
        const size_t copies = std::max<size_t>(2, (size_t(256) << 20) / e.bytes + 1);
        for (size_t i = 0; i < copies; ++i) e.copies.push_back(w);
        es.push_back(std::move(e));
      }
      // The packed copies (pack_weight: eight interleaved rows) of the
      // block dtypes the backend packs, as "<dtype> packed" engines.
      for (size_t k = 0, n = es.size(); k < n; ++k) {
        if (!dtype_is_block(es[k].dt) || !be->op_supported(OSLO_BK_OP_PACKED_MATMUL, es[k].dt))
          continue;
        Engine e;
        e.name = es[k].name + " packed";
        e.dt = es[k].dt;
        e.bytes = es[k].bytes;
        e.copies = es[k].copies;
        for (auto& w : e.copies) {
          e.packs.push_back(Backend::pack_weight(be, view_of(w.data(), e.dt, {N, K}, {K, 1})));
          if (!e.packs.back()) {
            std::fprintf(stderr, "pack_weight declined %s [%lld, %lld]\n", e.name.c_str(),
                         (long long)N, (long long)K);
            std::exit(1);
          }
        }
        es.push_back(std::move(e));
      }
      const View av = view_of(a.data(), OSLO_DTYPE_F32, {1, K}, {K, 1});
      const View cv = view_of(c.data(), OSLO_DTYPE_F32, {1, N}, {N, 1});
      for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up
        for (Engine& e : es) {
          const int iters = static_cast<int>(e.copies.size());
          const double t0 = now();
          for (int i = 0; i < iters; ++i) {
            void* wp = e.copies[static_cast<size_t>(i)].data();
            if (!e.packs.empty())
              be->matmul_packed(cv, av, view_of(wp, e.dt, {N, K}, {K, 1}),
                                *e.packs[static_cast<size_t>(i)], nullptr, nullptr, nullptr);
            else if (dtype_is_block(e.dt))
              be->matmul_quant(cv, av, view_of(wp, e.dt, {N, K}, {K, 1}), nullptr, nullptr,
                               nullptr);
            else
              be->matmul(cv, av, view_of(wp, e.dt, {K, N}, {1, K}));
          }
          if (r > 0) e.ms.push_back((now() - t0) * 1e3 / iters);
        }
      }
      const double f32_med = median(es[0].ms);
      for (Engine& e : es) {
        const double med = median(e.ms), best = *std::min_element(e.ms.begin(), e.ms.end());
        std::printf("| %d | %lld x %lld | %s | %.1f MB | %.3f | %.3f | %.1f | %.2f |\n", threads,
                    (long long)N, (long long)K, e.name.c_str(), e.bytes / 1e6, best, med,
                    e.bytes / (med * 1e-3) / 1e9, med / f32_med);
      }
      std::fflush(stdout);
    }
  }
}

void prefill(int rounds) {
  const int64_t N = 4096, K = 4096;
  const int threads = 2;
  std::printf(
      "| weight | M | integer ms (best, median) | dequantize + sgemm ms (best, median) | "
      "faster |\n|---|--:|---|---|---|\n");
  std::vector<float> x(static_cast<size_t>(N * K));
  for (auto& e : x) e = rndf();
  for (oslo_dtype dt : {OSLO_DTYPE_Q8_0, OSLO_DTYPE_Q4_K}) {
    std::vector<uint8_t> w = encode(dt, x, N, K);
    const View wv = view_of(w.data(), dt, {N, K}, {K, 1});
    for (int64_t M : {16, 32, 64, 128, 256, 512}) {
      std::vector<float> a(static_cast<size_t>(M * K)), c(static_cast<size_t>(M * N));
      for (auto& e : a) e = rndf();
      const View av = view_of(a.data(), OSLO_DTYPE_F32, {M, K}, {K, 1});
      const View cv = view_of(c.data(), OSLO_DTYPE_F32, {M, N}, {N, 1});
      std::vector<double> t[2];
      for (int r = 0; r < rounds + 1; ++r)
        for (int path = 0; path < 2; ++path) {
          const double t0 = now();
          cpu::matmul_quant(threads, cv, av, wv, nullptr, nullptr, path == 0 ? M + 1 : 0);
          if (r > 0) t[path].push_back((now() - t0) * 1e3);
        }
      const double m0 = median(t[0]), m1 = median(t[1]);
      std::printf("| %s | %lld | %.2f, %.2f | %.2f, %.2f | %s |\n", dtype_name(dt), (long long)M,
                  *std::min_element(t[0].begin(), t[0].end()), m0,
                  *std::min_element(t[1].begin(), t[1].end()), m1, m0 < m1 ? "integer" : "sgemm");
      std::fflush(stdout);
    }
  }
}

// Per-call cost of decode-sized products with the weight in cache: q8_0,
// q4_0 and q4_k packed, M = 1, the LLaMA-small shapes, at 1 and 2 threads; microseconds
// per call (median of the rounds, each the mean of many calls). What a
// decode step pays per linear beyond reading its weight.
void calls(int rounds) {
  const int64_t shapes[][2] = {{256, 768}, {768, 768}, {2048, 768}, {768, 2048}};
  std::printf("| threads | weight | N x K | us per call (best, median) |\n|--:|---|---|---|\n");
  for (int threads : {1, 2})
    for (oslo_dtype dt : {OSLO_DTYPE_Q8_0, OSLO_DTYPE_Q4_0, OSLO_DTYPE_Q4_K}) {
      BackendOptions o;
      o.num_threads = threads;
      std::shared_ptr<Backend> be = create_backend("cpu", o);
      for (auto& s : shapes) {
        const int64_t N = s[0], K = s[1];
        std::vector<float> x(static_cast<size_t>(N * K));
        for (auto& e : x) e = rndf();
        std::vector<uint8_t> w = encode(dt, x, N, K);
        const View wv = view_of(w.data(), dt, {N, K}, {K, 1});
        auto pk = Backend::pack_weight(be, wv);
        std::vector<float> a(static_cast<size_t>(K)), c(static_cast<size_t>(N));
        for (auto& e : a) e = rndf();
        const View av = view_of(a.data(), OSLO_DTYPE_F32, {1, K}, {K, 1});
        const View cv = view_of(c.data(), OSLO_DTYPE_F32, {1, N}, {N, 1});
        std::vector<double> us;
        const int iters = 2000;
        for (int r = 0; r < rounds + 1; ++r) {
          const double t0 = now();
          for (int i = 0; i < iters; ++i)
            be->matmul_packed(cv, av, wv, *pk, nullptr, nullptr, nullptr);
          if (r > 0) us.push_back((now() - t0) * 1e6 / iters);
        }
        std::printf("| %d | %s | %lld x %lld | %.2f, %.2f |\n", threads, dtype_name(dt),
                    (long long)N, (long long)K, *std::min_element(us.begin(), us.end()),
                    median(us));
        std::fflush(stdout);
      }
    }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  bool pre = false, call = false;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--rounds" && i + 1 < argc)
      rounds = std::max(1, std::atoi(argv[++i]));
    else if (s == "--prefill")
      pre = true;
    else if (s == "--calls")
      call = true;
    else {
      std::fprintf(stderr, "usage: %s [--rounds R] [--prefill | --calls]\n", argv[0]);
      return 2;
    }
  }
  try {
    std::printf("quant kernels: %s\n", cpu::quant_kernels()->isa);
    if (call)
      calls(rounds);
    else if (pre)
      prefill(rounds);
    else
      gemv(rounds);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_quant: %s\n", e.what());
    return 1;
  }
  return 0;
}
