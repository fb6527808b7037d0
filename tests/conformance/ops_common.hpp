// Shared by the files of conf_ops, the op-level backend conformance test
// (test_ops.cpp says what it checks and how): the pass/fail counters, the
// f64 reference helpers, device buffers (Dev), the fused-op helpers and the
// groups of cases.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/backend.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

using namespace oslo;

namespace conf {

inline int g_passed = 0, g_failed = 0;
inline std::string g_case;

inline void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  std::fprintf(stderr, "FAIL [%s] %s\n", g_case.c_str(), what.c_str());
}

inline double tol(oslo_dtype dt) {
  return dt == OSLO_DTYPE_BF16 ? 1.6e-2 : dt == OSLO_DTYPE_F16 ? 2e-3 : 1e-5;
}

inline uint64_t g_seed = 1;
inline double rnd() {
  uint64_t x = (g_seed++) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) / static_cast<double>(1ull << 53) * 2.0 - 1.0;
}

// The value as stored in dt.
inline double quant(double v, oslo_dtype dt) {
  float f = static_cast<float>(v);
  if (dt == OSLO_DTYPE_BF16) return bf16_to_f32(f32_to_bf16(f));
  if (dt == OSLO_DTYPE_F16) return f16_to_f32(f32_to_f16(f));
  return f;
}

// A device buffer holding a host array, contiguous, with its view.
struct Dev {
  std::shared_ptr<Backend> be;
  void* p = nullptr;
  size_t bytes = 0;
  View v;
  Dev(std::shared_ptr<Backend> b, oslo_dtype dt, std::vector<int64_t> shape) : be(std::move(b)) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    bytes = static_cast<size_t>(n) * dtype_size(dt);
    p = be->allocate(bytes);
    v = make_view(p, dt, shape);
  }
  ~Dev() { be->deallocate(p, bytes); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;

  void upload(const std::vector<double>& host) {
    const size_t n = host.size();
    std::vector<char> raw(bytes);
    for (size_t i = 0; i < n; ++i) {
      switch (v.dtype) {
        case OSLO_DTYPE_F32: {
          float f = static_cast<float>(host[i]);
          std::memcpy(raw.data() + 4 * i, &f, 4);
          break;
        }
        case OSLO_DTYPE_BF16: {
          uint16_t h = f32_to_bf16(static_cast<float>(host[i]));
          std::memcpy(raw.data() + 2 * i, &h, 2);
          break;
        }
        case OSLO_DTYPE_F16: {
          uint16_t h = f32_to_f16(static_cast<float>(host[i]));
          std::memcpy(raw.data() + 2 * i, &h, 2);
          break;
        }
        case OSLO_DTYPE_I32: {
          int32_t x = static_cast<int32_t>(host[i]);
          std::memcpy(raw.data() + 4 * i, &x, 4);
          break;
        }
        case OSLO_DTYPE_I8: raw[i] = static_cast<char>(static_cast<int8_t>(host[i])); break;
        default: {
          int64_t x = static_cast<int64_t>(host[i]);
          std::memcpy(raw.data() + 8 * i, &x, 8);
        }
      }
    }
    be->copy(p, raw.data(), bytes, CopyKind::HostToDevice);
  }
  std::vector<double> download() const {
    std::vector<char> raw(bytes);
    be->copy(raw.data(), p, bytes, CopyKind::DeviceToHost);
    const size_t n = bytes / dtype_size(v.dtype);
    std::vector<double> out(n);
    for (size_t i = 0; i < n; ++i) {
      switch (v.dtype) {
        case OSLO_DTYPE_F32: {
          float f;
          std::memcpy(&f, raw.data() + 4 * i, 4);
          out[i] = f;
          break;
        }
        case OSLO_DTYPE_BF16: {
          uint16_t h;
          std::memcpy(&h, raw.data() + 2 * i, 2);
          out[i] = bf16_to_f32(h);
          break;
        }
        case OSLO_DTYPE_F16: {
          uint16_t h;
          std::memcpy(&h, raw.data() + 2 * i, 2);
          out[i] = f16_to_f32(h);
          break;
        }
        case OSLO_DTYPE_I32: {
          int32_t x;
          std::memcpy(&x, raw.data() + 4 * i, 4);
          out[i] = x;
          break;
        }
        default: {
          int64_t x;
          std::memcpy(&x, raw.data() + 8 * i, 8);
          out[i] = static_cast<double>(x);
        }
      }
    }
    return out;
  }
};

inline std::vector<double> random_in(size_t n, oslo_dtype dt, double scale = 1.0) {
  std::vector<double> v(n);
  for (auto& x : v) x = quant(scale * rnd(), dt);
  return v;
}

// max |got - ref| <= rel * max(|ref|, floor)
inline bool close(const std::vector<double>& got, const std::vector<double>& ref, double rel,
                  double* err = nullptr, double floor = 1.0) {
  if (got.size() != ref.size()) {
    if (err) *err = INFINITY;
    return false;
  }
  double mref = 0, merr = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isfinite(ref[i])) mref = std::max(mref, std::fabs(ref[i]));
    double e = got[i] == ref[i] ? 0.0 : std::fabs(got[i] - ref[i]);
    if (std::isnan(got[i]) != std::isnan(ref[i])) e = INFINITY;
    if (std::isnan(got[i]) && std::isnan(ref[i])) e = 0;
    if (!(e <= merr)) merr = e;
  }
  double scale = std::max(mref, floor * 1e-3);
  if (err) *err = merr / (scale > 0 ? scale : 1);
  return merr <= rel * (scale > 0 ? scale : 1);
}

inline std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
inline std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

inline const oslo_dtype kFloats[] = {OSLO_DTYPE_F32, OSLO_DTYPE_F16, OSLO_DTYPE_BF16};

// A fused-op error case: fn must throw oslo::Error with status want (on
// the fused path when fused, else on the composed one).
template <typename F>
inline void expect_refused(bool fused, const char* what, oslo_status want, F fn) {
  try {
    fn();
    check(false, fmt("%s (fused %d): accepted", what, fused));
  } catch (const Error& e) {
    check(e.status() == want, fmt("%s (fused %d): %s", what, fused, e.what()));
  }
}

inline View strided_view(void* data, oslo_dtype dt, std::vector<int64_t> shape,
                         std::vector<int64_t> strides) {
  View v = make_view(data, dt, shape);
  for (size_t i = 0; i < strides.size(); ++i) v.strides[i] = strides[i];
  return v;
}

// One case of the attention tables (attention, attention_backward,
// attention_kv8): shapes, the causal offset and whether a mask is given.
struct AttnCase {
  int64_t B, Hq, Hkv, S, T, D;
  bool causal;
  int64_t off;
  bool mask;
};

inline std::string attn_case_name(const char* op, oslo_dtype dt, const AttnCase& c) {
  return fmt("%s %s B%lld Hq%lld Hkv%lld S%lld T%lld D%lld causal %d off %lld mask %d", op,
             dtype_name(dt), (long long)c.B, (long long)c.Hq, (long long)c.Hkv, (long long)c.S,
             (long long)c.T, (long long)c.D, c.causal, (long long)c.off, c.mask);
}

// f64 attention of every query head: out [B, S, Hq, D] row-major, from the
// values q(b, h, i, d), k(b, kh, j, d), v(b, kh, j, d) and the additive
// mask(b, j) (0 without one); key j is left out for query i when causal and
// j > i + off; a query with no key (or every key at -inf) gets 0.
template <class Q, class K, class Vv, class M>
std::vector<double> attention_f64(const AttnCase& c, double scale, Q q, K k, Vv v, M mask) {
  const int64_t g = c.Hq / c.Hkv;
  std::vector<double> ref(static_cast<size_t>(c.B * c.S * c.Hq * c.D), 0.0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.S; ++i) {
        const int64_t kh = h / g;
        std::vector<double> z(static_cast<size_t>(c.T), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.T; ++j) {
          if (c.causal && j > i + c.off) continue;
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d) dot += q(b, h, i, d) * k(b, kh, j, d);
          z[static_cast<size_t>(j)] = scale * dot + mask(b, j);
          mx = std::max(mx, z[static_cast<size_t>(j)]);
        }
        if (mx == -INFINITY) continue;  // no key: 0
        double sum = 0;
        for (auto& e : z) sum += (e = std::exp(e - mx));
        for (int64_t d = 0; d < c.D; ++d) {
          double o = 0;
          for (int64_t j = 0; j < c.T; ++j) o += z[static_cast<size_t>(j)] * v(b, kh, j, d);
          ref[static_cast<size_t>(((b * c.S + i) * c.Hq + h) * c.D + d)] = o / sum;
        }
      }
  return ref;
}

struct FusedToggle {  // restores the backend's setting
  Backend& be;
  bool was;
  FusedToggle(Backend& b, bool on) : be(b), was(b.fused_enabled()) { be.set_fused_enabled(on); }
  ~FusedToggle() { be.set_fused_enabled(was); }
};

// The backend (its name and options) under test: test_abi_v2 starts a second
// instance of it.
inline std::string g_name;
inline BackendOptions g_options;

// The groups of cases (each file says what it checks); main (test_ops.cpp)
// runs them in turn on the backend under test.
void test_convert(const std::shared_ptr<Backend>& be);             // test_ops.cpp
void test_matmul(const std::shared_ptr<Backend>& be);              // test_ops_matmul.cpp
void test_matmul_mixed(const std::shared_ptr<Backend>& be);        // test_ops_matmul.cpp
void test_matmul_act(const std::shared_ptr<Backend>& be);          // test_ops_matmul.cpp
void test_packed_matmul(const std::shared_ptr<Backend>& be);       // test_ops_matmul.cpp
void test_elementwise(const std::shared_ptr<Backend>& be);         // test_ops_elementwise.cpp
void test_reduce(const std::shared_ptr<Backend>& be);              // test_ops_reduce.cpp
void test_softmax_norm(const std::shared_ptr<Backend>& be);        // test_ops_reduce.cpp
void test_gather_scatter(const std::shared_ptr<Backend>& be);      // test_ops_reduce.cpp
void test_abi_v2(const std::shared_ptr<Backend>& be);              // test_ops_abi_v2.cpp
void test_argmax(const std::shared_ptr<Backend>& be);              // test_ops_fused.cpp
void test_norm_backward(const std::shared_ptr<Backend>& be);       // test_ops_fused.cpp
void test_adamw(const std::shared_ptr<Backend>& be);               // test_ops_fused.cpp
void test_fused(const std::shared_ptr<Backend>& be);               // test_ops_fused.cpp
void test_attention_backward(const std::shared_ptr<Backend>& be);  // test_ops_attention_bw.cpp
void test_paged_attention(const std::shared_ptr<Backend>& be);     // test_ops_paged.cpp
void test_quant(const std::shared_ptr<Backend>& be);               // test_ops_quant.cpp
void test_kv8(const std::shared_ptr<Backend>& be);                 // test_ops_kv8.cpp

}  // namespace conf
