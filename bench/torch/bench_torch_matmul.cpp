// Times the torch plugin's matmul entry against at::linear on the same
// tensors: y[M, N] = x[M, K] W[N, K]^T, W given to the plugin as the strided
// view W^T. Prints one line per case with both times and their ratio.
//
// usage: bench_torch_matmul PLUGIN.so [threads] [M,K,N,dtype ...]
//   default cases: 1,4096,4096,f32 1,4096,4096,bf16 2048,4096,4096,f32
//                  2048,4096,4096,bf16
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "oslo_backend.h"

namespace {

oslo_bk_view view_of(const at::Tensor& t, oslo_dtype dt) {
  oslo_bk_view v;
  std::memset(&v, 0, sizeof v);
  v.data = t.data_ptr();
  v.dtype = dt;
  v.ndim = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) {
    v.shape[i] = t.size(i);
    v.strides[i] = t.stride(i);
  }
  return v;
}

// Median seconds of repeated calls: at least 3 and at least ~1 s (one warm-up
// call first, not counted).
double time_it(const std::function<void()>& f) {
  f();
  std::vector<double> ts;
  double total = 0;
  while (ts.size() < 3 || (total < 1.0 && ts.size() < 50)) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ts.push_back(s);
    total += s;
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s liboslo_backend_torch.so [threads] [M,K,N,dtype ...]\n",
                 argv[0]);
    return 2;
  }
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  auto entry = reinterpret_cast<oslo_backend_plugin_fn>(dlsym(h, OSLO_BACKEND_PLUGIN_SYMBOL));
  const oslo_backend_iface* bk = entry();
  const int threads = argc > 2 ? std::atoi(argv[2]) : 0;
  std::vector<std::string> cases;
  for (int i = 3; i < argc; ++i) cases.push_back(argv[i]);
  if (cases.empty())
    cases = {"1,4096,4096,f32", "1,4096,4096,bf16", "2048,4096,4096,f32", "2048,4096,4096,bf16"};

  oslo_backend_options o{sizeof o, 0, threads, "{}"};
  void* self = nullptr;
  const char* err = nullptr;
  if (bk->create(&self, &o, &err) != OSLO_OK) {
    std::fprintf(stderr, "create: %s\n", err);
    return 1;
  }
  if (threads > 0) at::set_num_threads(threads);
  std::printf("threads %d\n%-22s %12s %12s %8s %10s\n", at::get_num_threads(), "case (M,K,N,dtype)",
              "plugin ms", "linear ms", "ratio", "max |diff|");
  for (const std::string& c : cases) {
    long long M, K, N;
    char dts[8] = {0};
    if (std::sscanf(c.c_str(), "%lld,%lld,%lld,%7s", &M, &K, &N, dts) != 4) {
      std::fprintf(stderr, "bad case %s (M,K,N,dtype)\n", c.c_str());
      return 2;
    }
    const bool bf16 = std::strcmp(dts, "bf16") == 0;
    const at::ScalarType st = bf16 ? at::kBFloat16 : at::kFloat;
    const oslo_dtype dt = bf16 ? OSLO_DTYPE_BF16 : OSLO_DTYPE_F32;
    at::manual_seed(1);
    at::Tensor x = at::randn({M, K}).to(st), w = at::randn({N, K}).div_(64).to(st);
    at::Tensor y = at::empty({M, N}, x.options());
    oslo_bk_view yv = view_of(y, dt), xv = view_of(x, dt), wt = view_of(w.t(), dt);
    auto plugin = [&] {
      if (bk->matmul(self, &yv, &xv, &wt, nullptr, 1.f, 0.f) != OSLO_OK) {
        std::fprintf(stderr, "matmul: %s\n", bk->last_error(self));
        std::exit(1);
      }
    };
    at::Tensor ref;
    auto linear = [&] { ref = at::linear(x, w); };
    const double tp = time_it(plugin), tl = time_it(linear);
    const double diff = (y.to(at::kFloat) - ref.to(at::kFloat)).abs().max().item<double>();
    std::printf("%-22s %12.3f %12.3f %8.2f %10.3g\n", c.c_str(), tp * 1e3, tl * 1e3, tp / tl, diff);
    std::fflush(stdout);
  }
  bk->destroy(self);
  return 0;
}
