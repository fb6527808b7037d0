// What the model training tests share: a rank's local slice of a reference
// tensor by placement, the comparison of a model's gradients with
// transformers' (grad.<name> entries of a safetensors reference), and
// running a body on N tensor-parallel ranks as threads or as this process
// under oslo-run.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/model/model.hpp"
#include "tests/common/safetensors_ref.hpp"
#include "tests/common/temp_dir.hpp"
#include "tests/common/test_backend.hpp"

namespace oslo_test {

// This rank's local slice of a global tensor (HF layout, row-major), as
// the placement lays it out: segments along split_dim, padding as zeros,
// transposed when the placement says so.
inline std::vector<float> local_slice(const oslo::Placement& p, const std::vector<float>& full) {
  const std::vector<int64_t>& gs = p.global_shape;
  const int nd = static_cast<int>(gs.size());
  std::vector<int64_t> ls = gs;  // HF layout, before the transpose
  if (p.split_dim >= 0) ls[p.split_dim] = p.local_extent;
  int64_t ln = 1;
  for (int64_t s : ls) ln *= s;
  std::vector<float> out(static_cast<size_t>(ln), 0.f);
  if (p.split_dim < 0) {
    out = full;
  } else {
    // Index arithmetic over (outer, split, inner).
    const int d = p.split_dim;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < d; ++i) outer *= gs[i];
    for (int i = d + 1; i < nd; ++i) inner *= gs[i];
    for (const oslo::Segment& s : p.segments)
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < s.length; ++j)
          for (int64_t in = 0; in < inner; ++in)
            out[static_cast<size_t>((o * ls[d] + s.local_start + j) * inner + in)] =
                full[static_cast<size_t>((o * gs[d] + s.global_start + j) * inner + in)];
  }
  if (p.transpose && nd == 2) {
    std::vector<float> t(out.size());
    for (int64_t i = 0; i < ls[0]; ++i)
      for (int64_t j = 0; j < ls[1]; ++j)
        t[static_cast<size_t>(j * ls[0] + i)] = out[static_cast<size_t>(i * ls[1] + j)];
    out.swap(t);
  }
  return out;
}

inline std::vector<float> download(oslo::Context& ctx, const oslo::Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  ctx.backend().copy(v.data(), t.data(), t.nbytes(), oslo::CopyKind::DeviceToHost);
  return v;
}

struct GradCheck {
  int failures = 0;
  double worst = 0;  // largest max |grad - ref| / max |ref| over the parameters
  std::string worst_name;
};

// Compares every gradient of `m` (this rank's slices) with the reference's
// grad.<name>: max |grad - ref| <= tol * max(max |ref|, 1e-3 * the largest
// reference gradient of the model) per parameter. The floor keeps
// gradients that are zero in exact arithmetic (a key bias: softmax ignores
// a score shift shared by every key) from comparing round-off with
// round-off. Prints each failure.
inline GradCheck check_grads(oslo::Context& ctx, const oslo::Model& m, const SafetensorsRef& ref,
                             double tol) {
  GradCheck c;
  const int r = ctx.topology().tp_rank();
  const auto& params = m.tensors();
  double global = 0;
  for (const auto& pt : params)
    if (ref.has("grad." + pt.placement.name))
      for (float v : ref.get<float>("grad." + pt.placement.name))
        global = std::max(global, static_cast<double>(std::fabs(v)));
  for (size_t i = 0; i < params.size(); ++i) {
    const oslo::Placement& p = params[i].placement;
    const std::string key = "grad." + p.name;
    if (!ref.has(key)) {
      std::printf("[rank %d] %s: no reference gradient FAIL\n", r, p.name.c_str());
      ++c.failures;
      continue;
    }
    const std::vector<float> want = local_slice(p, ref.get<float>(key));
    const std::vector<float> got = download(ctx, m.training().grads()[i]);
    if (got.size() != want.size()) {
      std::printf("[rank %d] %s: %zu gradient elements, reference slice %zu FAIL\n", r,
                  p.name.c_str(), got.size(), want.size());
      ++c.failures;
      continue;
    }
    double mref = 0, merr = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      mref = std::max(mref, static_cast<double>(std::fabs(want[k])));
      const double e = std::fabs(static_cast<double>(got[k]) - want[k]);
      if (!(e <= merr)) merr = e;
    }
    const double rel = merr / std::max({mref, 1e-3 * global, 1e-12});
    if (!(rel <= tol)) {
      std::printf("[rank %d] %s: max |grad - ref| %.3g of max |ref| %.3g (rel %.3g) FAIL\n", r,
                  p.name.c_str(), merr, mref, rel);
      ++c.failures;
    }
    if (!(rel <= c.worst)) {
      c.worst = rel;
      c.worst_name = p.name;
    }
  }
  return c;
}

// Runs body(ctx) on `tp` tensor-parallel ranks: threads of this process
// (file:// rendezvous), or, with procs, once in this process as the rank
// oslo-run made it. Returns the number of ranks whose body threw (each
// error printed).
inline int run_tp(bool procs, int tp, const std::function<void(oslo::Context&)>& body) {
  std::atomic<int> failed{0};
  if (procs) {
    try {
      const std::string cfg = "{\"tensor_parallel_size\": " + std::to_string(tp) +
                              ", \"timeout_seconds\": 120, \"num_threads\": 1" +
                              test_backend_members() + "}";
      oslo::Context ctx(oslo::Config::parse(cfg.c_str()));
      body(ctx);
    } catch (const oslo::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      ++failed;
    }
    return failed;
  }
  const std::string store = temp_dir("oslo-train");
  std::vector<std::thread> th;
  for (int r = 0; r < tp; ++r)
    th.emplace_back([&, r] {
      try {
        const std::string cfg =
            "{\"rank\": " + std::to_string(r) + ", \"world_size\": " + std::to_string(tp) +
            ", \"tensor_parallel_size\": " + std::to_string(tp) + ", \"init_method\": \"file://" +
            store + "/rdv\", \"timeout_seconds\": 60, \"num_threads\": 1" + test_backend_members() +
            "}";
        oslo::Context ctx(oslo::Config::parse(cfg.c_str()));
        body(ctx);
      } catch (const oslo::Error& e) {
        std::fprintf(stderr, "[rank %d] error: %s\n", r, e.what());
        ++failed;
      }
    });
  for (auto& t : th) t.join();
  remove_tree(store);
  return failed;
}

}  // namespace oslo_test
