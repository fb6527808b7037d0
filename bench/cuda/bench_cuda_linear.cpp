// The CUDA plugin's linear, y[M, N] = x[M, K] W[N, K]^T in bf16 (W given to
// the plugin's matmul entry as the strided view W^T, as oslo's layers do),
// against the same product called directly through cuBLASLt (its heuristic's
// first algorithm, a 32 MiB workspace) on the same GPU. Prints one JSON line
// per case with both times and direct / plugin (>= 0.95 is the goal).
//
// usage: bench_cuda_linear PLUGIN.so [M ...]   (default M = 1 2048; K = N = 4096)
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "oslo_backend.h"

namespace {

void die(const char* what) {
  std::fprintf(stderr, "bench_cuda_linear: %s\n", what);
  std::exit(1);
}

oslo_bk_view view2(void* p, int64_t r, int64_t c, int64_t s0, int64_t s1) {
  oslo_bk_view v;
  std::memset(&v, 0, sizeof v);
  v.data = p;
  v.dtype = OSLO_DTYPE_BF16;
  v.ndim = 2;
  v.shape[0] = r;
  v.shape[1] = c;
  v.strides[0] = s0;
  v.strides[1] = s1;
  return v;
}

// Mean seconds per call over `iters` calls after warm-ups; sync() waits for the GPU.
double time_it(const std::function<void()>& f, const std::function<void()>& sync, int iters) {
  for (int i = 0; i < 10; ++i) f();
  sync();
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) f();
    sync();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s / iters);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) die("usage: bench_cuda_linear PLUGIN.so [M ...]");
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) die(dlerror());
  auto entry = reinterpret_cast<oslo_backend_plugin_fn>(dlsym(h, OSLO_BACKEND_PLUGIN_SYMBOL));
  if (!entry) die("no plugin symbol");
  const oslo_backend_iface* T = entry();
  oslo_backend_options o{};
  o.struct_size = sizeof o;
  o.extra_json = "{}";
  void* self = nullptr;
  const char* err = nullptr;
  if (T->create(&self, &o, &err) != OSLO_OK) die(err ? err : "create failed");
  std::vector<int64_t> Ms;
  for (int i = 2; i < argc; ++i) Ms.push_back(std::atoll(argv[i]));
  if (Ms.empty()) Ms = {1, 2048};
  const int64_t K = 4096, N = 4096;
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) die("cublasLtCreate");
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  void* ws = nullptr;
  const size_t ws_bytes = size_t{32} << 20;
  cudaMalloc(&ws, ws_bytes);
  for (int64_t M : Ms) {
    void *x, *w, *y;
    if (T->alloc(self, M * K * 2, &x) || T->alloc(self, N * K * 2, &w) ||
        T->alloc(self, M * N * 2, &y))
      die("alloc");
    std::vector<uint16_t> hx(static_cast<size_t>(M * K)), hw(static_cast<size_t>(N * K));
    uint32_t s = 12345;
    auto rnd = [&] {
      s = s * 1664525u + 1013904223u;
      const float f = (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * 0.1f;
      uint32_t b;
      std::memcpy(&b, &f, 4);
      return static_cast<uint16_t>(b >> 16);
    };
    for (auto& v : hx) v = rnd();
    for (auto& v : hw) v = rnd();
    T->copy(self, x, hx.data(), hx.size() * 2, OSLO_BK_HOST_TO_DEVICE);
    T->copy(self, w, hw.data(), hw.size() * 2, OSLO_BK_HOST_TO_DEVICE);
    const oslo_bk_view yv = view2(y, M, N, N, 1), xv = view2(x, M, K, K, 1);
    const oslo_bk_view wt = view2(w, K, N, 1, K);  // W^T as a strided view
    const int iters = M == 1 ? 2000 : 200;
    const double t_oslo = time_it(
        [&] {
          if (T->matmul(self, &yv, &xv, &wt, nullptr, 1.f, 0.f) != OSLO_OK)
            die(T->last_error(self));
        },
        [&] { T->synchronize(self); }, iters);
    // Direct cuBLASLt: D^T [N, M] = W (col-major K x N, transposed) x^T (K x M).
    cublasLtMatmulDesc_t op;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB);
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, N, M, N);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    const uint64_t wsb = ws_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                         sizeof wsb);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &found) !=
            CUBLAS_STATUS_SUCCESS ||
        found == 0)
      die("no cuBLASLt algorithm");
    const float alpha = 1.f, beta = 0.f;
    const double t_ref = time_it(
        [&] {
          cublasLtMatmul(lt, op, &alpha, w, la, x, lb, &beta, y, lc, y, lc, &res.algo, ws, wsb,
                         stream);
        },
        [&] { cudaStreamSynchronize(stream); }, iters);
    const double flops = 2.0 * M * N * K, bytes = 2.0 * (M * K + N * K + M * N);
    std::printf(
        "{\"bench\": \"linear\", \"gpu\": \"%s\", \"M\": %lld, \"K\": %lld, \"N\": %lld, "
        "\"dtype\": \"bf16\", \"oslo_us\": %.2f, \"cublaslt_us\": %.2f, \"ratio\": %.3f, "
        "\"oslo_tflops\": %.1f, \"oslo_gb_s\": %.0f}\n",
        prop.name, static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N),
        t_oslo * 1e6, t_ref * 1e6, t_ref / t_oslo, flops / t_oslo / 1e12, bytes / t_oslo / 1e9);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
    T->free(self, x, 0);
    T->free(self, w, 0);
    T->free(self, y, 0);
  }
  T->destroy(self);
  return 0;
}
