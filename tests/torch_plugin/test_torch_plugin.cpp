// Tests of the libtorch backend plugin through its C table only: the plugin
// is dlopen'ed (path in argv[1]), and every op runs on small tensors in f32,
// bf16 and f16 against a double-precision reference computed here in plain
// C++ (independent of ATen). Also the error paths, strided and broadcast
// views, and c10d Gloo communicators between two threads.
//
// usage: test_torch_plugin PLUGIN.so [cmocka name filter]
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// cmocka needs these first.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

extern "C" {  // cmocka.h declares its functions without C linkage for C++
#include <cmocka.h>
}

#include "oslo_backend.h"

namespace {

const oslo_backend_iface* g_bk = nullptr;

// Failure details, to stderr.
__attribute__((format(printf, 1, 2))) void report(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
}
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// -- dtypes (reference conversions, not ATen's) ---------------------------------

size_t dtype_size(oslo_dtype dt) {
  return dt == OSLO_DTYPE_F32 || dt == OSLO_DTYPE_I32 ? 4 : dt == OSLO_DTYPE_I64 ? 8 : 2;
}

uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

const char* dname(oslo_dtype dt) {
  switch (dt) {
    case OSLO_DTYPE_F32: return "f32";
    case OSLO_DTYPE_F16: return "f16";
    case OSLO_DTYPE_BF16: return "bf16";
    case OSLO_DTYPE_I32: return "i32";
    default: return "i64";
  }
}

// Half an ulp at 1 (relative rounding error of one rounding) per dtype.
double rel_eps(oslo_dtype dt) {
  return dt == OSLO_DTYPE_BF16 ? 1.0 / 256 : dt == OSLO_DTYPE_F16 ? 1.0 / 2048 : 1e-6;
}

// A host tensor (the CPU instance's memory is host memory).
struct Tensor {
  oslo_dtype dt = OSLO_DTYPE_F32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> mem;

  Tensor() = default;
  Tensor(oslo_dtype d, std::vector<int64_t> s) : dt(d), shape(std::move(s)) {
    mem.assign(std::max<size_t>(numel(), 1) * dtype_size(dt), 0);
  }
  size_t numel() const {
    size_t n = 1;
    for (int64_t e : shape) n *= static_cast<size_t>(e);
    return n;
  }
  double get(size_t i) const {
    const unsigned char* p = mem.data() + i * dtype_size(dt);
    switch (dt) {
      case OSLO_DTYPE_F32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      case OSLO_DTYPE_BF16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return bf16_to_f32(h);
      }
      case OSLO_DTYPE_F16: {
        _Float16 h;
        std::memcpy(&h, p, 2);
        return static_cast<float>(h);
      }
      case OSLO_DTYPE_I32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        return v;
      }
      default: {
        int64_t v;
        std::memcpy(&v, p, 8);
        return static_cast<double>(v);
      }
    }
  }
  void set(size_t i, double v) {
    unsigned char* p = mem.data() + i * dtype_size(dt);
    switch (dt) {
      case OSLO_DTYPE_F32: {
        float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case OSLO_DTYPE_BF16: {
        uint16_t h = f32_to_bf16(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case OSLO_DTYPE_F16: {
        _Float16 h = static_cast<_Float16>(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case OSLO_DTYPE_I32: {
        int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      default: {
        int64_t x = static_cast<int64_t>(v);
        std::memcpy(p, &x, 8);
        break;
      }
    }
  }
  std::vector<double> values() const {
    std::vector<double> v(numel());
    for (size_t i = 0; i < v.size(); ++i) v[i] = get(i);
    return v;
  }
  void fill_random(uint64_t seed, double lo = -1, double hi = 1) {
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (size_t i = 0; i < numel(); ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const double u = static_cast<double>(s >> 11) / 9007199254740992.0;
      set(i, lo + (hi - lo) * u);
    }
  }
  void fill_values(const std::vector<double>& v) {
    for (size_t i = 0; i < v.size(); ++i) set(i, v[i]);
  }
  // Contiguous view of the whole tensor.
  oslo_bk_view view() const {
    std::vector<int64_t> st(shape.size());
    int64_t s = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      st[i] = s;
      s *= shape[i];
    }
    return view_as(shape, st, 0);
  }
  // Any view into this tensor's memory (element offset, strides in elements).
  oslo_bk_view view_as(const std::vector<int64_t>& sh, const std::vector<int64_t>& st,
                       size_t offset) const {
    oslo_bk_view v;
    std::memset(&v, 0, sizeof v);
    v.data = const_cast<unsigned char*>(mem.data()) + offset * dtype_size(dt);
    v.dtype = dt;
    v.ndim = static_cast<int32_t>(sh.size());
    for (size_t i = 0; i < sh.size(); ++i) {
      v.shape[i] = sh[i];
      v.strides[i] = st[i];
    }
    return v;
  }
};

Tensor random_tensor(oslo_dtype dt, std::vector<int64_t> shape, uint64_t seed, double lo = -1,
                     double hi = 1) {
  Tensor t(dt, std::move(shape));
  t.fill_random(seed, lo, hi);
  return t;
}

void expect_close(const Tensor& out, const std::vector<double>& ref, double abs_tol, double rel_tol,
                  const std::string& what) {
  assert_int_equal(out.numel(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    const double got = out.get(i), want = ref[i];
    bool ok;
    if (std::isnan(want))
      ok = std::isnan(got);
    else if (std::isinf(want))
      ok = got == want;
    else
      ok = std::fabs(got - want) <= abs_tol + rel_tol * std::fabs(want);
    if (!ok) {
      report("%s: element %zu is %.9g, expected %.9g (abs %.3g + rel %.3g)\n", what.c_str(), i, got,
             want, abs_tol, rel_tol);
      fail();
    }
  }
}

// Tolerance of a result computed in f32 and rounded once to dt.
void expect_dt(const Tensor& out, const std::vector<double>& ref, const std::string& what,
               double abs_tol = 1e-5) {
  expect_close(out, ref, abs_tol, 2 * rel_eps(out.dt) + 1e-6, what + " (" + dname(out.dt) + ")");
}

// -- instance -------------------------------------------------------------------

struct Instance {
  void* self = nullptr;
  explicit Instance(const char* json = "{}", int threads = 1) {
    oslo_backend_options o;
    o.struct_size = sizeof o;
    o.local_rank = 0;
    o.num_threads = threads;
    o.extra_json = json;
    const char* err = nullptr;
    oslo_status s = g_bk->create(&self, &o, &err);
    if (s != OSLO_OK) {
      report("create(%s) failed: %d %s\n", json, s, err ? err : "(null)");
      fail();
    }
  }
  ~Instance() { g_bk->destroy(self); }
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;
  const char* error() const { return g_bk->last_error(self); }
  void ok(oslo_status s, const char* what) const {
    if (s != OSLO_OK) {
      report("%s failed: status %d: %s\n", what, s, error());
      fail();
    }
  }
  // A failing call: the status and a message containing `needle`.
  void fails(oslo_status s, oslo_status want, const char* needle, const char* what) const {
    if (s != want || std::strstr(error(), needle) == nullptr) {
      report("%s: status %d (want %d), message \"%s\" (want it to contain \"%s\")\n", what, s, want,
             error(), needle);
      fail();
    }
  }
};

const oslo_dtype kFloats[] = {OSLO_DTYPE_F32, OSLO_DTYPE_BF16, OSLO_DTYPE_F16};

// -- table, instance, memory -----------------------------------------------------

void test_table(void**) {
  assert_non_null(g_bk);
  assert_int_equal(g_bk->struct_size, sizeof(oslo_backend_iface));
  assert_int_equal(g_bk->abi_version, OSLO_BACKEND_ABI_VERSION);
  assert_string_equal(g_bk->name, "torch");
  const void* required[] = {(void*)g_bk->create,
                            (void*)g_bk->destroy,
                            (void*)g_bk->last_error,
                            (void*)g_bk->device_type,
                            (void*)g_bk->device_id,
                            (void*)g_bk->host_accessible,
                            (void*)g_bk->alloc,
                            (void*)g_bk->free,
                            (void*)g_bk->copy,
                            (void*)g_bk->synchronize,
                            (void*)g_bk->set_num_threads,
                            (void*)g_bk->convert,
                            (void*)g_bk->fill,
                            (void*)g_bk->matmul,
                            (void*)g_bk->binary,
                            (void*)g_bk->unary,
                            (void*)g_bk->unary_backward,
                            (void*)g_bk->reduce,
                            (void*)g_bk->sum_rows,
                            (void*)g_bk->softmax,
                            (void*)g_bk->softmax_backward,
                            (void*)g_bk->norm,
                            (void*)g_bk->gather_rows,
                            (void*)g_bk->scatter_add_rows,
                            (void*)g_bk->gather_cols,
                            (void*)g_bk->scatter_add_cols,
                            (void*)g_bk->comm_create,
                            (void*)g_bk->comm_destroy,
                            (void*)g_bk->comm_name,
                            (void*)g_bk->comm_last_error,
                            (void*)g_bk->comm_all_reduce,
                            (void*)g_bk->comm_all_gather,
                            (void*)g_bk->comm_reduce_scatter,
                            (void*)g_bk->comm_broadcast,
                            (void*)g_bk->comm_send,
                            (void*)g_bk->comm_recv,
                            (void*)g_bk->comm_barrier,
                            (void*)g_bk->comm_abort};
  for (const void* p : required) assert_non_null(p);
}

void test_create_errors(void**) {
  struct Case {
    const char* json;
    oslo_status want;
    const char* needle;
  } cases[] = {
      {"{", OSLO_ERR_FORMAT, "not valid JSON"},
      {"[]", OSLO_ERR_FORMAT, "object"},
      {"{\"colour\": 1}", OSLO_ERR_CONFIG, "colour"},
      {"{\"device\": \"tpu\"}", OSLO_ERR_CONFIG, "device"},
      {"{\"comm\": \"mpi\"}", OSLO_ERR_CONFIG, "comm"},
      {"{\"device\": \"cuda\"}", OSLO_ERR_BACKEND_UNAVAILABLE, "CUDA"},  // no GPU in CI
  };
  for (const Case& c : cases) {
    oslo_backend_options o{sizeof o, 0, 1, c.json};
    void* self = reinterpret_cast<void*>(1);
    const char* err = nullptr;
    oslo_status s = g_bk->create(&self, &o, &err);
    if (s != c.want || err == nullptr || std::strstr(err, c.needle) == nullptr) {
      report("create(%s): status %d, error %s\n", c.json, s, err ? err : "(null)");
      fail();
    }
    assert_null(self);
  }
  // Options from an older caller (struct_size ends before extra_json): the
  // fields beyond it are not read.
  {
    oslo_backend_options o{offsetof(oslo_backend_options, extra_json), 0, 1, "{"};
    void* self = nullptr;
    const char* err = nullptr;
    assert_int_equal(g_bk->create(&self, &o, &err), OSLO_OK);
    g_bk->destroy(self);
  }
  // NULL options: defaults.
  void* self = nullptr;
  const char* err = nullptr;
  assert_int_equal(g_bk->create(&self, nullptr, &err), OSLO_OK);
  assert_int_equal(g_bk->device_type(self), 1);
  assert_int_equal(g_bk->device_id(self), 0);
  assert_int_equal(g_bk->host_accessible(self), 1);
  assert_non_null(g_bk->last_error(self));
  g_bk->destroy(self);
}

void test_memory(void**) {
  Instance in;
  std::vector<void*> ps;
  for (size_t bytes : {0, 1, 3, 64, 1000, 1 << 20}) {
    void* p = nullptr;
    in.ok(g_bk->alloc(in.self, bytes, &p), "alloc");
    assert_non_null(p);
    assert_int_equal(reinterpret_cast<uintptr_t>(p) % 64, 0);
    std::memset(p, 0xab, bytes);
    ps.push_back(p);
  }
  void *a = ps[4], *b = ps[3];
  std::vector<unsigned char> host(1000), back(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 7);
  in.ok(g_bk->copy(in.self, a, host.data(), 1000, OSLO_BK_HOST_TO_DEVICE), "copy h2d");
  in.ok(g_bk->copy(in.self, b, a, 64, OSLO_BK_DEVICE_TO_DEVICE), "copy d2d");
  in.ok(g_bk->copy(in.self, back.data(), a, 1000, OSLO_BK_DEVICE_TO_HOST), "copy d2h");
  assert_memory_equal(back.data(), host.data(), 1000);
  assert_memory_equal(b, host.data(), 64);
  in.ok(g_bk->copy(in.self, nullptr, nullptr, 0, OSLO_BK_DEVICE_TO_DEVICE), "copy 0 bytes");
  in.fails(g_bk->copy(in.self, a, host.data(), 4, static_cast<oslo_bk_copy_kind>(7)),
           OSLO_ERR_INVALID_ARGUMENT, "kind", "copy bad kind");
  in.ok(g_bk->synchronize(in.self), "synchronize");
  in.ok(g_bk->set_num_threads(in.self, 2), "set_num_threads");
  in.fails(g_bk->set_num_threads(in.self, 0), OSLO_ERR_INVALID_ARGUMENT, "set_num_threads",
           "set_num_threads 0");
  in.fails(g_bk->alloc(in.self, 8, nullptr), OSLO_ERR_INVALID_ARGUMENT, "NULL", "alloc NULL");
  // free() from other threads, concurrently.
  std::vector<std::thread> ts;
  for (size_t i = 0; i < ps.size(); ++i) ts.emplace_back([&, i] { g_bk->free(in.self, ps[i], 0); });
  for (auto& t : ts) t.join();
  g_bk->free(in.self, nullptr, 0);
  g_bk->free(in.self, host.data(), 4);  // unknown pointer: ignored
}

// Instances on two threads at once, with their own thread counts.
void test_instances_on_threads(void**) {
  std::atomic<int> failures{0};
  auto work = [&](int threads) {
    oslo_backend_options o{sizeof o, 0, threads, "{}"};
    void* self = nullptr;
    const char* err = nullptr;
    if (g_bk->create(&self, &o, &err) != OSLO_OK) {
      ++failures;
      return;
    }
    Tensor a = random_tensor(OSLO_DTYPE_F32, {64, 96}, 7),
           b = random_tensor(OSLO_DTYPE_F32, {96, 80}, 8);
    Tensor c(OSLO_DTYPE_F32, {64, 80});
    oslo_bk_view av = a.view(), bv = b.view(), cv = c.view();
    for (int i = 0; i < 20; ++i)
      if (g_bk->matmul(self, &cv, &av, &bv, nullptr, 1.f, 0.f) != OSLO_OK) ++failures;
    double want = 0;
    for (int k = 0; k < 96; ++k) want += a.get(k) * b.get(k * 80);
    if (std::fabs(c.get(0) - want) > 1e-4) ++failures;
    g_bk->destroy(self);
  };
  std::thread t1(work, 1), t2(work, 2);
  t1.join();
  t2.join();
  assert_int_equal(failures.load(), 0);
}

// -- convert and fill -----------------------------------------------------------

void test_convert(void**) {
  Instance in;
  for (oslo_dtype from : kFloats)
    for (oslo_dtype to : kFloats) {
      Tensor x = random_tensor(from, {3, 5}, 11, -4, 4);
      Tensor out(to, {3, 5});
      oslo_bk_view o = out.view(), xv = x.view();
      in.ok(g_bk->convert(in.self, &o, &xv), "convert");
      expect_dt(out, x.values(), std::string("convert from ") + dname(from), 0);
    }
  // Transposed (strided) input: out[i][j] = x[j][i].
  Tensor x = random_tensor(OSLO_DTYPE_F32, {4, 3}, 12);
  Tensor out(OSLO_DTYPE_BF16, {3, 4});
  oslo_bk_view o = out.view(), xt = x.view_as({3, 4}, {1, 3}, 0);
  in.ok(g_bk->convert(in.self, &o, &xt), "convert transposed");
  std::vector<double> ref(12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) ref[i * 4 + j] = x.get(j * 3 + i);
  expect_dt(out, ref, "convert transposed", 0);
  // Strided output (every other column of a [3, 8]) from a broadcast row.
  Tensor big(OSLO_DTYPE_F32, {3, 8});
  Tensor row = random_tensor(OSLO_DTYPE_F32, {4}, 13);
  oslo_bk_view ob = big.view_as({3, 4}, {8, 2}, 1), rb = row.view_as({3, 4}, {0, 1}, 0);
  in.ok(g_bk->convert(in.self, &ob, &rb), "convert broadcast");
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 8; ++j)
      assert_true(big.get(i * 8 + j) == (j % 2 == 1 ? row.get(j / 2) : 0.0));
  // Integers.
  Tensor i32(OSLO_DTYPE_I32, {4}), i64(OSLO_DTYPE_I64, {4});
  i32.fill_values({-3, 0, 7, 2147483647});
  oslo_bk_view v32 = i32.view(), v64 = i64.view();
  in.ok(g_bk->convert(in.self, &v64, &v32), "convert i32 -> i64");
  assert_true(i64.get(3) == 2147483647.0 && i64.get(0) == -3);
  // Errors.
  Tensor f(OSLO_DTYPE_F32, {4});
  oslo_bk_view vf = f.view();
  in.fails(g_bk->convert(in.self, &vf, &v32), OSLO_ERR_DTYPE, "i32", "convert i32 -> f32");
  Tensor f5(OSLO_DTYPE_F32, {5});
  oslo_bk_view v5 = f5.view();
  in.fails(g_bk->convert(in.self, &v5, &vf), OSLO_ERR_SHAPE, "broadcast", "convert [4] -> [5]");
  oslo_bk_view bad = vf;
  bad.dtype = static_cast<oslo_dtype>(42);
  in.fails(g_bk->convert(in.self, &bad, &vf), OSLO_ERR_DTYPE, "42", "convert bad dtype");
  in.fails(g_bk->convert(in.self, nullptr, &vf), OSLO_ERR_INVALID_ARGUMENT, "NULL", "convert NULL");
  oslo_bk_view neg = f.view_as({4}, {-1}, 3);
  in.fails(g_bk->convert(in.self, &vf, &neg), OSLO_ERR_INVALID_ARGUMENT, "negative",
           "convert negative stride");
  oslo_bk_view bcast_out = f.view_as({4}, {0}, 0);
  in.fails(g_bk->convert(in.self, &bcast_out, &vf), OSLO_ERR_INVALID_ARGUMENT, "stride 0",
           "convert into a broadcast view");
}

void test_fill(void**) {
  Instance in;
  for (oslo_dtype dt :
       {OSLO_DTYPE_F32, OSLO_DTYPE_BF16, OSLO_DTYPE_F16, OSLO_DTYPE_I32, OSLO_DTYPE_I64}) {
    Tensor t(dt, {2, 3});
    oslo_bk_view v = t.view();
    in.ok(g_bk->fill(in.self, &v, 3.0), "fill");
    for (size_t i = 0; i < 6; ++i) assert_true(t.get(i) == 3.0);
  }
  Tensor h(OSLO_DTYPE_F16, {2});
  oslo_bk_view hv = h.view();
  in.ok(g_bk->fill(in.self, &hv, 1e10), "fill f16 overflow");
  assert_true(std::isinf(h.get(0)));
  Tensor e(OSLO_DTYPE_F32, {0, 3});
  oslo_bk_view ev = e.view();
  ev.data = nullptr;
  in.ok(g_bk->fill(in.self, &ev, 1.0), "fill empty");
  Tensor i(OSLO_DTYPE_I32, {2});
  oslo_bk_view iv = i.view();
  in.fails(g_bk->fill(in.self, &iv, 1e20), OSLO_ERR_INVALID_ARGUMENT, "fit", "fill i32 1e20");
  in.fails(g_bk->fill(in.self, &iv, kNaN), OSLO_ERR_INVALID_ARGUMENT, "fit", "fill i32 NaN");
}

// -- matmul ---------------------------------------------------------------------

// c[b][m][n] = alpha * sum_k a[b][m][k] b[b][k][n] + beta * c + bias[n]
struct MatmulCase {
  int64_t batch, M, K, N;  // batch 0: 2-D
  bool b_transposed, b_batch_broadcast, with_bias, nan_in_c;
  float alpha, beta;
};

void run_matmul(Instance& in, oslo_dtype dt, oslo_dtype cdt, const MatmulCase& mc) {
  const bool three = mc.batch > 0;
  const int64_t B = three ? mc.batch : 1;
  Tensor a = random_tensor(
      dt, three ? std::vector<int64_t>{B, mc.M, mc.K} : std::vector<int64_t>{mc.M, mc.K}, 21);
  // b stored as [N, K] (transposed) or [K, N]; one batch if broadcast.
  const int64_t Bb = mc.b_batch_broadcast ? 1 : B;
  std::vector<int64_t> bs =
      mc.b_transposed ? std::vector<int64_t>{Bb, mc.N, mc.K} : std::vector<int64_t>{Bb, mc.K, mc.N};
  Tensor bt = random_tensor(dt, bs, 22);
  Tensor c = random_tensor(
      cdt, three ? std::vector<int64_t>{B, mc.M, mc.N} : std::vector<int64_t>{mc.M, mc.N}, 23);
  if (mc.nan_in_c && c.numel() > 0) c.set(0, kNaN);
  Tensor bias = random_tensor(cdt, {mc.N}, 24);
  auto bval = [&](int64_t bi, int64_t k, int64_t n) {
    const int64_t base = (mc.b_batch_broadcast ? 0 : bi) * mc.K * mc.N;
    return mc.b_transposed ? bt.get(base + n * mc.K + k) : bt.get(base + k * mc.N + n);
  };
  std::vector<double> ref(c.numel());
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t m = 0; m < mc.M; ++m)
      for (int64_t n = 0; n < mc.N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < mc.K; ++k) s += a.get((bi * mc.M + m) * mc.K + k) * bval(bi, k, n);
        const size_t ci = (bi * mc.M + m) * mc.N + n;
        double r = mc.alpha * s;
        if (mc.beta != 0.f) r += mc.beta * c.get(ci);
        if (mc.with_bias) r += bias.get(n);
        ref[ci] = r;
      }
  oslo_bk_view av = a.view(), cv = c.view(), biv = bias.view(), bv;
  // b's view in [.., K, N] order: transposed storage swaps strides.
  const int64_t bstride = mc.b_batch_broadcast ? 0 : mc.K * mc.N;
  if (three)
    bv = mc.b_transposed ? bt.view_as({B, mc.K, mc.N}, {bstride, 1, mc.K}, 0)
                         : bt.view_as({B, mc.K, mc.N}, {bstride, mc.N, 1}, 0);
  else
    bv = mc.b_transposed ? bt.view_as({mc.K, mc.N}, {1, mc.K}, 0)
                         : bt.view_as({mc.K, mc.N}, {mc.N, 1}, 0);
  in.ok(g_bk->matmul(in.self, &cv, &av, &bv, mc.with_bias ? &biv : nullptr, mc.alpha, mc.beta),
        "matmul");
  // Inputs rounded to dt are exact in the reference; f32 accumulation error
  // grows with K, the output rounds once to c's dtype.
  expect_close(c, ref, 1e-5 * static_cast<double>(mc.K + 1), 2 * rel_eps(cdt) + 1e-6,
               std::string("matmul ") + dname(dt) + " -> " + dname(cdt) + " M" +
                   std::to_string(mc.M) + " K" + std::to_string(mc.K) + " N" +
                   std::to_string(mc.N) + (three ? " batched" : "") +
                   (mc.b_transposed ? " b^T" : "") + (mc.with_bias ? " +bias" : ""));
}

void test_matmul(void**) {
  Instance in;
  const MatmulCase cases[] = {
      {0, 5, 7, 3, false, false, false, false, 1.f, 0.f},
      {0, 5, 7, 3, true, false, true, false, 0.5f, 0.25f},
      {0, 4, 16, 6, true, false, true, true, 1.f, 0.f},  // beta 0 ignores NaN in c
      {0, 4, 16, 6, false, false, false, true, 2.f, 0.f},
      {3, 4, 5, 6, false, false, true, false, 1.f, 1.f},
      {3, 4, 5, 6, true, true, false, false, 1.f, 0.5f},  // b broadcast over the batch
      {2, 3, 9, 2, false, true, true, true, 1.5f, 0.f},
      {0, 0, 4, 3, false, false, true, false, 1.f, 0.f},   // 0 rows
      {0, 3, 0, 4, false, false, true, false, 1.f, 0.5f},  // K == 0: c = beta c + bias
      {0, 3, 0, 4, false, false, false, true, 1.f, 0.f},   // K == 0, beta 0: zeros
  };
  for (oslo_dtype dt : kFloats)
    for (const MatmulCase& mc : cases) {
      run_matmul(in, dt, dt, mc);
      run_matmul(in, dt, OSLO_DTYPE_F32, mc);  // c (and bias) in another dtype
    }
  run_matmul(in, OSLO_DTYPE_F32, OSLO_DTYPE_BF16, cases[1]);

  // Large enough for libtorch's own bf16 GEMM (oneDNN) to be used.
  run_matmul(in, OSLO_DTYPE_BF16, OSLO_DTYPE_BF16,
             {0, 48, 64, 40, true, false, true, false, 1.f, 0.f});
  run_matmul(in, OSLO_DTYPE_BF16, OSLO_DTYPE_BF16,
             {0, 48, 64, 40, false, false, true, true, 0.5f, 0.f});
  run_matmul(in, OSLO_DTYPE_BF16, OSLO_DTYPE_BF16,
             {2, 48, 64, 40, true, true, false, false, 1.f, 0.5f});

  // Products accumulate in f32: 1 + 256 * 2^-9 is 1.5 in f32 (exact in
  // bf16), but 1 if each partial sum were rounded to bf16. Small and large
  // (M, N) take different paths.
  for (oslo_dtype dt : {OSLO_DTYPE_BF16, OSLO_DTYPE_F16})
    for (int64_t MN : {1, 64}) {
      const int64_t K = 257;
      Tensor a(dt, {MN, K}), b(dt, {K, MN}), c(dt, {MN, MN});
      for (int64_t k = 0; k < K; ++k) {
        a.set(k, 1.0);
        b.set(k * MN, k == 0 ? 1.0 : (dt == OSLO_DTYPE_BF16 ? 1.0 / 512 : 1.0 / 4096));
      }
      oslo_bk_view av = a.view(), bv = b.view(), cv = c.view();
      in.ok(g_bk->matmul(in.self, &cv, &av, &bv, nullptr, 1.f, 0.f), "matmul accumulation");
      const double want = dt == OSLO_DTYPE_BF16 ? 1.5 : 1.0 + 256.0 / 4096;
      if (c.get(0) != want) {
        report("matmul %s [%lld x %lld] accumulation: %.9g, want %.9g\n", dname(dt),
               static_cast<long long>(MN), static_cast<long long>(MN), c.get(0), want);
        fail();
      }
    }

  // A column block of c (strided output): c[:, 2:5] of a [4, 8].
  Tensor a = random_tensor(OSLO_DTYPE_F32, {4, 6}, 31),
         b = random_tensor(OSLO_DTYPE_F32, {6, 3}, 32);
  Tensor c(OSLO_DTYPE_F32, {4, 8});
  c.fill_values(std::vector<double>(32, 7.0));
  oslo_bk_view av = a.view(), bv = b.view(), cv = c.view_as({4, 3}, {8, 1}, 2);
  in.ok(g_bk->matmul(in.self, &cv, &av, &bv, nullptr, 1.f, 0.f), "matmul strided c");
  for (int64_t m = 0; m < 4; ++m)
    for (int64_t j = 0; j < 8; ++j) {
      double want = 7.0;
      if (j >= 2 && j < 5) {
        want = 0;
        for (int64_t k = 0; k < 6; ++k) want += a.get(m * 6 + k) * b.get(k * 3 + (j - 2));
      }
      assert_true(std::fabs(c.get(m * 8 + j) - want) < 1e-5);
    }

  // Errors.
  Tensor b5(OSLO_DTYPE_F32, {5, 3});
  oslo_bk_view b5v = b5.view(), cfull = Tensor(OSLO_DTYPE_F32, {4, 3}).view();
  Tensor c43(OSLO_DTYPE_F32, {4, 3});
  cfull = c43.view();
  in.fails(g_bk->matmul(in.self, &cfull, &av, &b5v, nullptr, 1.f, 0.f), OSLO_ERR_SHAPE,
           "shapes do not match", "matmul K mismatch");
  Tensor bh(OSLO_DTYPE_BF16, {6, 3});
  oslo_bk_view bhv = bh.view();
  in.fails(g_bk->matmul(in.self, &cfull, &av, &bhv, nullptr, 1.f, 0.f), OSLO_ERR_DTYPE,
           "share one dtype", "matmul a/b dtypes");
  Tensor bi(OSLO_DTYPE_I32, {6, 3});
  Tensor ai(OSLO_DTYPE_I32, {4, 6});
  oslo_bk_view biv = bi.view(), aiv = ai.view();
  in.fails(g_bk->matmul(in.self, &cfull, &aiv, &biv, nullptr, 1.f, 0.f), OSLO_ERR_DTYPE, "i32",
           "matmul int");
  Tensor bias4(OSLO_DTYPE_F32, {4});
  oslo_bk_view b4v = bias4.view();
  in.fails(g_bk->matmul(in.self, &cfull, &av, &bv, &b4v, 1.f, 0.f), OSLO_ERR_SHAPE, "bias",
           "matmul bias shape");
}

// -- element-wise -----------------------------------------------------------------

double ref_binary(oslo_bk_binary op, double a, double b) {
  switch (op) {
    case OSLO_BK_ADD: return a + b;
    case OSLO_BK_SUB: return a - b;
    case OSLO_BK_MUL: return a * b;
    case OSLO_BK_DIV: return a / b;
    case OSLO_BK_MAXIMUM: return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
    default: return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
  }
}

void test_binary(void**) {
  Instance in;
  const oslo_bk_binary ops[] = {OSLO_BK_ADD, OSLO_BK_SUB,     OSLO_BK_MUL,
                                OSLO_BK_DIV, OSLO_BK_MAXIMUM, OSLO_BK_MINIMUM};
  for (oslo_dtype dt : kFloats)
    for (oslo_bk_binary op : ops) {
      // a [3, 4]; b a row [4] broadcast over rows by stride 0; out [3, 4].
      Tensor a = random_tensor(dt, {3, 4}, 41), b = random_tensor(dt, {4}, 42, 0.5, 2);
      a.set(5, kNaN);
      Tensor out(dt, {3, 4});
      oslo_bk_view av = a.view(), bv = b.view_as({3, 4}, {0, 1}, 0), ov = out.view();
      in.ok(g_bk->binary(in.self, op, &ov, &av, &bv), "binary");
      std::vector<double> ref(12);
      for (size_t i = 0; i < 12; ++i) ref[i] = ref_binary(op, a.get(i), b.get(i % 4));
      expect_dt(out, ref, "binary op " + std::to_string(op));
      // Mixed: out f32 from a (dt) and b f32, and in place (out == a) for f32.
      Tensor b32 = random_tensor(OSLO_DTYPE_F32, {3, 4}, 43, 0.5, 2);
      Tensor o32(OSLO_DTYPE_F32, {3, 4});
      oslo_bk_view b32v = b32.view(), o32v = o32.view();
      in.ok(g_bk->binary(in.self, op, &o32v, &av, &b32v), "binary mixed");
      for (size_t i = 0; i < 12; ++i) ref[i] = ref_binary(op, a.get(i), b32.get(i));
      expect_dt(o32, ref, "binary mixed op " + std::to_string(op));
      in.ok(g_bk->binary(in.self, op, &o32v, &o32v, &b32v), "binary in place");
      for (size_t i = 0; i < 12; ++i) ref[i] = ref_binary(op, ref[i], b32.get(i));
      expect_close(o32, ref, 1e-5, 1e-5, "binary in place op " + std::to_string(op));
    }
  // Integers; DIV of integers and int/float mixes are refused.
  Tensor ia(OSLO_DTYPE_I64, {3}), ib(OSLO_DTYPE_I32, {3}), io(OSLO_DTYPE_I64, {3});
  ia.fill_values({1, -5, 1LL << 40});
  ib.fill_values({2, 3, 1});
  oslo_bk_view iav = ia.view(), ibv = ib.view(), iov = io.view();
  in.ok(g_bk->binary(in.self, OSLO_BK_ADD, &iov, &iav, &ibv), "binary int add");
  assert_true(io.get(0) == 3 && io.get(1) == -2 && io.get(2) == std::ldexp(1.0, 40) + 1);
  in.fails(g_bk->binary(in.self, OSLO_BK_DIV, &iov, &iav, &ibv), OSLO_ERR_DTYPE, "DIV",
           "binary int div");
  Tensor f(OSLO_DTYPE_F32, {3});
  oslo_bk_view fv = f.view();
  in.fails(g_bk->binary(in.self, OSLO_BK_ADD, &fv, &fv, &ibv), OSLO_ERR_DTYPE, "integer",
           "binary float + int");
  Tensor f4(OSLO_DTYPE_F32, {4});
  oslo_bk_view f4v = f4.view();
  in.fails(g_bk->binary(in.self, OSLO_BK_ADD, &fv, &fv, &f4v), OSLO_ERR_SHAPE, "broadcast",
           "binary shapes");
  in.fails(g_bk->binary(in.self, static_cast<oslo_bk_binary>(99), &fv, &fv, &fv),
           OSLO_ERR_INVALID_ARGUMENT, "99", "binary bad op");
}

const double kSqrt2OverPi = 0.7978845608028654;

double ref_unary(oslo_bk_unary op, double x, double alpha) {
  switch (op) {
    case OSLO_BK_SCALE: return alpha * x;
    case OSLO_BK_EXP: return std::exp(x);
    case OSLO_BK_GELU: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case OSLO_BK_GELU_TANH:
      return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
    case OSLO_BK_SILU: return x / (1 + std::exp(-x));
    case OSLO_BK_RELU: return x > 0 ? x : 0;
    case OSLO_BK_TANH: return std::tanh(x);
    case OSLO_BK_SQUARE: return x * x;
    case OSLO_BK_ABS_POW: return std::pow(std::fabs(x), alpha);
    default: return std::fabs(x);
  }
}

double ref_unary_grad(oslo_bk_unary op, double x, double alpha) {
  switch (op) {
    case OSLO_BK_SCALE: return alpha;
    case OSLO_BK_GELU:
      return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
             x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    case OSLO_BK_GELU_TANH: {
      const double u = kSqrt2OverPi * (x + 0.044715 * x * x * x);
      const double t = std::tanh(u);
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kSqrt2OverPi * (1 + 3 * 0.044715 * x * x);
    }
    case OSLO_BK_SILU: {
      const double s = 1 / (1 + std::exp(-x));
      return s * (1 + x * (1 - s));
    }
    case OSLO_BK_RELU: return x > 0 ? 1 : 0;
    default: {
      const double t = std::tanh(x);
      return 1 - t * t;
    }
  }
}

void test_unary(void**) {
  Instance in;
  for (oslo_dtype dt : kFloats)
    for (int op = OSLO_BK_SCALE; op <= OSLO_BK_ABS; ++op) {
      const float alpha = op == OSLO_BK_ABS_POW ? 1.5f : -0.75f;
      Tensor x = random_tensor(dt, {2, 3, 5}, 51 + op, -3, 3);
      x.set(0, 0.0);
      Tensor out(dt, {2, 3, 5});
      oslo_bk_view xv = x.view(), ov = out.view();
      in.ok(g_bk->unary(in.self, static_cast<oslo_bk_unary>(op), &ov, &xv, alpha), "unary");
      std::vector<double> ref(x.numel());
      for (size_t i = 0; i < ref.size(); ++i)
        ref[i] = ref_unary(static_cast<oslo_bk_unary>(op), x.get(i), alpha);
      expect_dt(out, ref, "unary op " + std::to_string(op));
      // Into f32 from a transposed view of x's first [3, 5] block.
      Tensor o2(OSLO_DTYPE_F32, {5, 3});
      oslo_bk_view xt = x.view_as({5, 3}, {1, 5}, 0), o2v = o2.view();
      in.ok(g_bk->unary(in.self, static_cast<oslo_bk_unary>(op), &o2v, &xt, alpha),
            "unary strided");
      std::vector<double> r2(15);
      for (int i = 0; i < 5; ++i)
        for (int j = 0; j < 3; ++j)
          r2[i * 3 + j] = ref_unary(static_cast<oslo_bk_unary>(op), x.get(j * 5 + i), alpha);
      expect_dt(o2, r2, "unary strided op " + std::to_string(op));
    }
  Tensor i(OSLO_DTYPE_I32, {2});
  oslo_bk_view iv = i.view();
  in.fails(g_bk->unary(in.self, OSLO_BK_EXP, &iv, &iv, 0.f), OSLO_ERR_DTYPE, "i32", "unary int");
}

void test_unary_backward(void**) {
  Instance in;
  const oslo_bk_unary ops[] = {OSLO_BK_GELU, OSLO_BK_GELU_TANH, OSLO_BK_SILU,
                               OSLO_BK_RELU, OSLO_BK_TANH,      OSLO_BK_SCALE};
  for (oslo_dtype dt : kFloats)
    for (oslo_bk_unary op : ops) {
      Tensor x = random_tensor(dt, {4, 6}, 61 + op, -3, 3), g = random_tensor(dt, {4, 6}, 62);
      x.set(0, 0.0);
      Tensor gx(dt, {4, 6});
      oslo_bk_view xv = x.view(), gv = g.view(), gxv = gx.view();
      in.ok(g_bk->unary_backward(in.self, op, &gxv, &xv, &gv, 0.5f), "unary_backward");
      std::vector<double> ref(24);
      for (size_t i = 0; i < 24; ++i) ref[i] = g.get(i) * ref_unary_grad(op, x.get(i), 0.5);
      expect_dt(gx, ref, "unary_backward op " + std::to_string(op));
    }
  Tensor t(OSLO_DTYPE_F32, {2});
  oslo_bk_view tv = t.view();
  in.fails(g_bk->unary_backward(in.self, OSLO_BK_EXP, &tv, &tv, &tv, 1.f),
           OSLO_ERR_INVALID_ARGUMENT, "no backward", "unary_backward EXP");
}

// -- reductions -----------------------------------------------------------------

void test_reduce(void**) {
  Instance in;
  for (oslo_dtype dt : kFloats)
    for (int op = OSLO_BK_REDUCE_SUM; op <= OSLO_BK_REDUCE_MAX_ABS; ++op)
      for (int64_t valid : {-1, 5, 0})
        for (int acc : {0, 1}) {
          const int64_t R0 = 2, R1 = 3, C = 7;
          Tensor x = random_tensor(dt, {R0, R1, C}, 71 + op, -2, 2);
          Tensor shift = random_tensor(OSLO_DTYPE_F32, {R0, R1}, 72);
          Tensor out = random_tensor(dt, {R0, R1}, 73);
          if (op == OSLO_BK_REDUCE_MAX) x.set(C + 1, kNaN);  // row 1: NaN wins
          const std::vector<double> before = out.values();
          oslo_bk_view xv = x.view(), sv = shift.view(), ov = out.view();
          in.ok(g_bk->reduce(in.self, static_cast<oslo_bk_reduce>(op), &ov, &xv, &sv, valid, acc),
                "reduce");
          const int64_t n = valid < 0 ? C : valid;
          std::vector<double> ref(R0 * R1);
          for (int64_t r = 0; r < R0 * R1; ++r) {
            double v = op == OSLO_BK_REDUCE_MAX ? -kInf : 0;
            for (int64_t c = 0; c < n; ++c) {
              const double e = x.get(r * C + c);
              switch (op) {
                case OSLO_BK_REDUCE_SUM: v += e; break;
                case OSLO_BK_REDUCE_SUM_EXP: v += std::exp(e - shift.get(r)); break;
                case OSLO_BK_REDUCE_MAX:
                  v = std::isnan(e) || std::isnan(v) ? kNaN : std::max(v, e);
                  break;
                default: v = std::max(v, std::fabs(e)); break;
              }
            }
            // accumulate combines with the op's own combiner (oslo_backend.h).
            const bool is_max = op == OSLO_BK_REDUCE_MAX || op == OSLO_BK_REDUCE_MAX_ABS;
            if (acc)
              v = !is_max                                  ? before[r] + v
                  : std::isnan(v) || std::isnan(before[r]) ? kNaN
                                                           : std::max(before[r], v);
            ref[r] = v;
          }
          expect_dt(out, ref,
                    "reduce op " + std::to_string(op) + " valid " + std::to_string(valid) +
                        (acc ? " accumulate" : ""));
        }
  Tensor x(OSLO_DTYPE_F32, {2, 3}), o(OSLO_DTYPE_F32, {3});
  oslo_bk_view xv = x.view(), ov = o.view();
  in.fails(g_bk->reduce(in.self, OSLO_BK_REDUCE_SUM, &ov, &xv, nullptr, -1, 0), OSLO_ERR_SHAPE,
           "without its last", "reduce shape");
  Tensor o2(OSLO_DTYPE_F32, {2});
  oslo_bk_view o2v = o2.view();
  in.fails(g_bk->reduce(in.self, OSLO_BK_REDUCE_SUM, &o2v, &xv, nullptr, 4, 0),
           OSLO_ERR_INVALID_ARGUMENT, "valid 4", "reduce valid > cols");
  in.fails(g_bk->reduce(in.self, OSLO_BK_REDUCE_SUM_EXP, &o2v, &xv, nullptr, -1, 0),
           OSLO_ERR_INVALID_ARGUMENT, "shift", "reduce SUM_EXP without shift");
}

void test_sum_rows(void**) {
  Instance in;
  for (oslo_dtype dt : kFloats)
    for (int acc : {0, 1}) {
      Tensor x = random_tensor(dt, {9, 4}, 81), out = random_tensor(dt, {4}, 82);
      const std::vector<double> before = out.values();
      // x transposed: a [4, 9] storage read as [9, 4].
      Tensor xt = random_tensor(dt, {4, 9}, 83);
      oslo_bk_view xv = xt.view_as({9, 4}, {1, 9}, 0), ov = out.view();
      in.ok(g_bk->sum_rows(in.self, &ov, &xv, acc), "sum_rows");
      std::vector<double> ref(4);
      for (int c = 0; c < 4; ++c) {
        double s = 0;
        for (int r = 0; r < 9; ++r) s += xt.get(c * 9 + r);
        ref[c] = acc ? before[c] + s : s;
      }
      expect_dt(out, ref, std::string("sum_rows") + (acc ? " accumulate" : ""));
      (void)x;
    }
}

// -- softmax --------------------------------------------------------------------

void test_softmax(void**) {
  Instance in;
  for (oslo_dtype dt : kFloats)
    for (int causal : {0, 1})
      for (int64_t offset : {0, 2, -1})
        for (bool with_mask : {false, true}) {
          if (!causal && offset != 0) continue;
          const int64_t H = 2, S = 4, T = 5;
          Tensor x = random_tensor(dt, {H, S, T}, 91, -3, 3);
          Tensor mask = random_tensor(OSLO_DTYPE_F32, {T}, 92, -1, 0);
          Tensor out(dt, {H, S, T});
          const float scale = 0.7f;
          oslo_bk_view xv = x.view(), ov = out.view();
          oslo_bk_view mv = mask.view_as({S, T}, {0, 1}, 0);  // a row, broadcast
          in.ok(g_bk->softmax(in.self, &ov, &xv, with_mask ? &mv : nullptr, scale, causal, offset),
                "softmax");
          std::vector<double> ref(H * S * T);
          for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < S; ++i) {
              std::vector<double> z(T);
              double m = -kInf;
              for (int64_t j = 0; j < T; ++j) {
                z[j] = scale * x.get((h * S + i) * T + j) + (with_mask ? mask.get(j) : 0.0);
                if (causal && j > i + offset) z[j] = -kInf;
                m = std::max(m, z[j]);
              }
              double s = 0;
              for (int64_t j = 0; j < T; ++j) s += std::exp(z[j] - m);
              // Nothing left in the row (all masked): 0, as oslo_backend.h says.
              for (int64_t j = 0; j < T; ++j)
                ref[(h * S + i) * T + j] = m == -kInf ? 0.0 : std::exp(z[j] - m) / s;
            }
          expect_dt(out, ref,
                    "softmax causal " + std::to_string(causal) + " offset " +
                        std::to_string(offset) + (with_mask ? " mask" : ""));
        }
  Tensor x(OSLO_DTYPE_F32, {4});
  oslo_bk_view xv = x.view();
  in.fails(g_bk->softmax(in.self, &xv, &xv, nullptr, 1.f, 1, 0), OSLO_ERR_SHAPE, "causal",
           "softmax causal 1-D");
}

void test_softmax_backward(void**) {
  Instance in;
  for (oslo_dtype dt : kFloats) {
    Tensor y = random_tensor(dt, {3, 6}, 101, 0, 1), gy = random_tensor(dt, {3, 6}, 102);
    Tensor gx(dt, {3, 6});
    oslo_bk_view yv = y.view(), gyv = gy.view(), gxv = gx.view();
    in.ok(g_bk->softmax_backward(in.self, &gxv, &yv, &gyv, 0.5f), "softmax_backward");
    std::vector<double> ref(18);
    for (int r = 0; r < 3; ++r) {
      double dot = 0;
      for (int c = 0; c < 6; ++c) dot += gy.get(r * 6 + c) * y.get(r * 6 + c);
      for (int c = 0; c < 6; ++c)
        ref[r * 6 + c] = 0.5 * y.get(r * 6 + c) * (gy.get(r * 6 + c) - dot);
    }
    expect_dt(gx, ref, "softmax_backward");
  }
}

// -- norm -----------------------------------------------------------------------

void test_norm(void**) {
  Instance in;
  for (oslo_dtype dt : kFloats)
    for (int rms : {0, 1})
      for (int affine : {0, 1}) {
        const int64_t R = 3, H = 8;
        Tensor x = random_tensor(dt, {R, H}, 111, -2, 3);
        Tensor gamma = random_tensor(dt, {H}, 112, 0.5, 1.5), beta = random_tensor(dt, {H}, 113);
        Tensor out(dt, {R, H});
        const float eps = 1e-5f;
        oslo_bk_view xv = x.view(), gv = gamma.view(), bv = beta.view(), ov = out.view();
        in.ok(
            g_bk->norm(in.self, &ov, &xv, affine ? &gv : nullptr, affine ? &bv : nullptr, eps, rms),
            "norm");
        std::vector<double> ref(R * H);
        for (int64_t r = 0; r < R; ++r) {
          double mean = 0, sq = 0;
          for (int64_t h = 0; h < H; ++h) mean += x.get(r * H + h) / H;
          for (int64_t h = 0; h < H; ++h) {
            const double d = rms ? x.get(r * H + h) : x.get(r * H + h) - mean;
            sq += d * d / H;
          }
          const double inv = 1 / std::sqrt(sq + eps);
          for (int64_t h = 0; h < H; ++h) {
            double v = (rms ? x.get(r * H + h) : x.get(r * H + h) - mean) * inv;
            if (affine) v = v * gamma.get(h) + (rms ? 0.0 : beta.get(h));
            ref[r * H + h] = v;
          }
        }
        expect_dt(out, ref,
                  std::string(rms ? "rms" : "layer") + " norm" + (affine ? " affine" : ""), 1e-4);
      }
}

// -- gathers and scatters ------------------------------------------------------------

void test_gather_rows(void**) {
  Instance in;
  for (oslo_dtype dt : kFloats)
    for (oslo_dtype idt : {OSLO_DTYPE_I32, OSLO_DTYPE_I64}) {
      // This rank holds rows [10, 14) of a vocabulary of 20.
      const int64_t offset = 10, rows = 4, H = 3, limit = 20;
      Tensor table = random_tensor(dt, {rows, H}, 121);
      Tensor ids(idt, {6});
      ids.fill_values({10, 13, 0, 19, 11, 10});
      Tensor out = random_tensor(dt, {6, H}, 122);
      oslo_bk_view tv = table.view(), iv = ids.view(), ov = out.view();
      in.ok(g_bk->gather_rows(in.self, &ov, &tv, &iv, offset, limit), "gather_rows");
      std::vector<double> ref(6 * H);
      for (int t = 0; t < 6; ++t)
        for (int h = 0; h < H; ++h) {
          const int64_t l = static_cast<int64_t>(ids.get(t)) - offset;
          ref[t * H + h] = l >= 0 && l < rows ? table.get(l * H + h) : 0.0;
        }
      expect_dt(out, ref, std::string("gather_rows ids ") + dname(idt), 0);
      // A bad id fails, naming it and its position.
      ids.set(4, 20);
      in.fails(g_bk->gather_rows(in.self, &ov, &tv, &iv, offset, limit), OSLO_ERR_INVALID_ARGUMENT,
               "id 20 at position 4", "gather_rows bad id");
      ids.set(4, -3);
      in.fails(g_bk->gather_rows(in.self, &ov, &tv, &iv, offset, limit), OSLO_ERR_INVALID_ARGUMENT,
               "id -3 at position 4", "gather_rows negative id");
    }
  Tensor table(OSLO_DTYPE_F32, {4, 3}), fids(OSLO_DTYPE_F32, {2}), out(OSLO_DTYPE_F32, {2, 3});
  oslo_bk_view tv = table.view(), fv = fids.view(), ov = out.view();
  in.fails(g_bk->gather_rows(in.self, &ov, &tv, &fv, 0, 4), OSLO_ERR_DTYPE, "i32 or i64",
           "gather_rows float ids");
}

void test_scatter_add_rows(void**) {
  Instance in;
  for (oslo_dtype dt : kFloats)
    for (oslo_dtype sdt : {dt, OSLO_DTYPE_F32}) {
      const int64_t offset = 5, rows = 3, H = 4;
      Tensor table = random_tensor(dt, {rows, H}, 131);
      const std::vector<double> before = table.values();
      Tensor ids(OSLO_DTYPE_I64, {6});
      ids.fill_values({5, 7, 5, 0, 8, 5});  // repeated, and out of this table
      Tensor src = random_tensor(sdt, {6, H}, 132);
      oslo_bk_view tv = table.view(), iv = ids.view(), sv = src.view();
      in.ok(g_bk->scatter_add_rows(in.self, &tv, &iv, &sv, offset), "scatter_add_rows");
      std::vector<double> ref = before;
      for (int t = 0; t < 6; ++t) {
        const int64_t l = static_cast<int64_t>(ids.get(t)) - offset;
        if (l < 0 || l >= rows) continue;
        for (int h = 0; h < H; ++h) ref[l * H + h] += src.get(t * H + h);
      }
      // Same dtypes round after every add (in t order): up to 3 roundings.
      expect_close(table, ref, 1e-5, 4 * rel_eps(dt) + 1e-6,
                   std::string("scatter_add_rows ") + dname(dt) + " += " + dname(sdt));
    }
}

void test_gather_cols(void**) {
  Instance in;
  for (oslo_dtype dt : kFloats) {
    // Columns [4, 8) of a vocabulary of 12; ignore index -100.
    const int64_t offset = 4, C = 4, limit = 12, ignore = -100;
    Tensor x = random_tensor(dt, {5, C}, 141);
    Tensor idx(OSLO_DTYPE_I32, {5});
    idx.fill_values({4, 7, 0, -100, 11});
    Tensor out = random_tensor(dt, {5}, 142);
    oslo_bk_view xv = x.view(), iv = idx.view(), ov = out.view();
    in.ok(g_bk->gather_cols(in.self, &ov, &xv, &iv, offset, limit, ignore), "gather_cols");
    std::vector<double> ref(5);
    for (int t = 0; t < 5; ++t) {
      const int64_t i = static_cast<int64_t>(idx.get(t)), l = i - offset;
      ref[t] = i != ignore && l >= 0 && l < C ? x.get(t * C + l) : 0.0;
    }
    expect_dt(out, ref, "gather_cols", 0);
    idx.set(2, 12);
    in.fails(g_bk->gather_cols(in.self, &ov, &xv, &iv, offset, limit, ignore),
             OSLO_ERR_INVALID_ARGUMENT, "index 12 at position 2", "gather_cols bad index");
    idx.set(2, -1);
    in.fails(g_bk->gather_cols(in.self, &ov, &xv, &iv, offset, limit, ignore),
             OSLO_ERR_INVALID_ARGUMENT, "-1", "gather_cols negative index");
  }
}

void test_scatter_add_cols(void**) {
  Instance in;
  for (oslo_dtype dt : kFloats) {
    const int64_t offset = 4, C = 4, ignore = -100;
    Tensor x = random_tensor(dt, {5, C}, 151);
    x.set(2 * C, -0.0);
    const std::vector<double> before = x.values();
    Tensor idx(OSLO_DTYPE_I64, {5});
    idx.fill_values({4, 7, 0, -100, 11});
    oslo_bk_view xv = x.view(), iv = idx.view();
    in.ok(g_bk->scatter_add_cols(in.self, &xv, &iv, offset, ignore, -1.0f), "scatter_add_cols");
    std::vector<double> ref = before;
    for (int t = 0; t < 5; ++t) {
      const int64_t i = static_cast<int64_t>(idx.get(t)), l = i - offset;
      if (i != ignore && l >= 0 && l < C) ref[t * C + l] += -1.0;
    }
    expect_dt(x, ref, "scatter_add_cols");
    assert_true(std::signbit(x.get(2 * C)));  // untouched rows keep -0
  }
}

// -- communicators --------------------------------------------------------------

void test_comm_declines_on_cpu(void**) {
  Instance in;
  void* comm = reinterpret_cast<void*>(1);
  const int members[2] = {0, 1};
  oslo_bk_group g{sizeof g, "tensor.0", 0, 2, members, 1, 5.0};
  in.ok(g_bk->comm_create(in.self, &comm, &g, nullptr), "comm_create");
  assert_null(comm);
}

// An in-process rendezvous store for ranks that are threads.
struct MemStore {
  std::mutex m;
  std::condition_variable cv;
  std::map<std::string, std::vector<char>> kv;
  static oslo_status set(void* self, const char* key, const void* value, size_t bytes) {
    auto* s = static_cast<MemStore*>(self);
    std::lock_guard<std::mutex> l(s->m);
    s->kv[key].assign(static_cast<const char*>(value), static_cast<const char*>(value) + bytes);
    s->cv.notify_all();
    return OSLO_OK;
  }
  static oslo_status get(void* self, const char* key, void* value, size_t cap, size_t* bytes,
                         double timeout) {
    auto* s = static_cast<MemStore*>(self);
    std::unique_lock<std::mutex> l(s->m);
    if (!s->cv.wait_for(l, std::chrono::duration<double>(timeout),
                        [&] { return s->kv.count(key) > 0; }))
      return OSLO_ERR_TIMEOUT;
    const auto& v = s->kv[key];
    std::memcpy(value, v.data(), std::min(cap, v.size()));
    *bytes = v.size();
    return OSLO_OK;
  }
  static const char* last_error(void*) { return "timed out"; }
};

void test_comm_gloo_threads(void**) {
  MemStore ms;
  const oslo_bk_store store{&ms, MemStore::set, MemStore::get, MemStore::last_error};
  const int members[2] = {0, 1};
  std::atomic<int> failures{0};
  auto rank_main = [&](int rank) {
    auto check = [&](bool ok, const char* what, void* comm) {
      if (!ok) {
        std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, what,
                     comm ? g_bk->comm_last_error(comm) : "");
        ++failures;
      }
      return ok;
    };
    oslo_backend_options o{sizeof o, rank, 1,
                           "{\"comm\": \"gloo\", \"gloo_address\": \"127.0.0.1\"}"};
    void* self = nullptr;
    const char* err = nullptr;
    if (!check(g_bk->create(&self, &o, &err) == OSLO_OK, "create", nullptr)) return;
    oslo_bk_group g{sizeof g, "tensor.0", rank, 2, members, 1, 20.0};
    void* comm = nullptr;
    if (!check(g_bk->comm_create(self, &comm, &g, &store) == OSLO_OK && comm != nullptr,
               g_bk->last_error(self), nullptr)) {
      g_bk->destroy(self);
      return;
    }
    check(std::strstr(g_bk->comm_name(comm), "gloo") != nullptr, "comm_name", comm);
    // all_reduce SUM/AVG/MAX in f32 and bf16; in place and out of place.
    for (oslo_dtype dt : {OSLO_DTYPE_F32, OSLO_DTYPE_BF16}) {
      Tensor a(dt, {5}), b(dt, {5});
      for (int i = 0; i < 5; ++i) a.set(i, (rank + 1) * (i + 1));
      check(g_bk->comm_all_reduce(comm, a.mem.data(), b.mem.data(), 5, dt, OSLO_REDUCE_SUM) ==
                OSLO_OK,
            "all_reduce sum", comm);
      for (int i = 0; i < 5; ++i) check(b.get(i) == 3.0 * (i + 1), "all_reduce sum value", comm);
      check(g_bk->comm_all_reduce(comm, a.mem.data(), a.mem.data(), 5, dt, OSLO_REDUCE_AVG) ==
                OSLO_OK,
            "all_reduce avg", comm);
      for (int i = 0; i < 5; ++i) check(a.get(i) == 1.5 * (i + 1), "all_reduce avg value", comm);
      Tensor m(dt, {1});
      m.set(0, rank == 0 ? 4.0 : -2.0);
      check(g_bk->comm_all_reduce(comm, m.mem.data(), m.mem.data(), 1, dt, OSLO_REDUCE_MAX) ==
                OSLO_OK,
            "all_reduce max", comm);
      check(m.get(0) == 4.0, "all_reduce max value", comm);
    }
    // all_gather, reduce_scatter, broadcast.
    Tensor mine(OSLO_DTYPE_I64, {3}), all(OSLO_DTYPE_I64, {6});
    for (int i = 0; i < 3; ++i) mine.set(i, rank * 10 + i);
    check(
        g_bk->comm_all_gather(comm, mine.mem.data(), all.mem.data(), 3, OSLO_DTYPE_I64) == OSLO_OK,
        "all_gather", comm);
    for (int i = 0; i < 6; ++i) check(all.get(i) == (i / 3) * 10 + i % 3, "all_gather value", comm);
    Tensor full(OSLO_DTYPE_F32, {4}), part(OSLO_DTYPE_F32, {2});
    for (int i = 0; i < 4; ++i) full.set(i, i + rank);
    check(g_bk->comm_reduce_scatter(comm, full.mem.data(), part.mem.data(), 2, OSLO_DTYPE_F32,
                                    OSLO_REDUCE_SUM) == OSLO_OK,
          "reduce_scatter", comm);
    for (int i = 0; i < 2; ++i)
      check(part.get(i) == 2.0 * (rank * 2 + i) + 1, "reduce_scatter value", comm);
    Tensor bc(OSLO_DTYPE_F16, {3});
    for (int i = 0; i < 3; ++i) bc.set(i, rank == 1 ? 0.5 * i : 99);
    check(g_bk->comm_broadcast(comm, bc.mem.data(), 3, OSLO_DTYPE_F16, 1) == OSLO_OK, "broadcast",
          comm);
    for (int i = 0; i < 3; ++i) check(bc.get(i) == 0.5 * i, "broadcast value", comm);
    // send/recv both ways, then a barrier.
    char msg[16] = {0};
    if (rank == 0) {
      check(g_bk->comm_send(comm, "hello, rank 1", 14, 1) == OSLO_OK, "send", comm);
      check(g_bk->comm_recv(comm, msg, 5, 1) == OSLO_OK, "recv", comm);
      check(std::strcmp(msg, "back") == 0, "recv value", comm);
    } else {
      check(g_bk->comm_recv(comm, msg, 14, 0) == OSLO_OK, "recv", comm);
      check(std::strcmp(msg, "hello, rank 1") == 0, "recv value", comm);
      check(g_bk->comm_send(comm, "back", 5, 0) == OSLO_OK, "send", comm);
    }
    check(g_bk->comm_send(comm, msg, 1, rank) == OSLO_ERR_INVALID_ARGUMENT, "send to self", comm);
    check(g_bk->comm_barrier(comm) == OSLO_OK, "barrier", comm);
    // Abort: later calls fail at once.
    g_bk->comm_abort(comm);
    check(g_bk->comm_barrier(comm) == OSLO_ERR_COMM, "barrier after abort", comm);
    check(std::strstr(g_bk->comm_last_error(comm), "aborted") != nullptr, "abort message", comm);
    g_bk->comm_destroy(comm);
    g_bk->destroy(self);
  };
  std::thread t0(rank_main, 0), t1(rank_main, 1);
  t0.join();
  t1.join();
  assert_int_equal(failures.load(), 0);
}

void test_comm_gloo_timeout(void**) {
  // One rank of two: connecting times out (the store never sees the peer).
  MemStore ms;
  const oslo_bk_store store{&ms, MemStore::set, MemStore::get, MemStore::last_error};
  const int members[2] = {0, 1};
  Instance in("{\"comm\": \"gloo\", \"gloo_address\": \"127.0.0.1\"}");
  oslo_bk_group g{sizeof g, "tensor.0", 0, 2, members, 1, 1.0};
  void* comm = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  oslo_status s = g_bk->comm_create(in.self, &comm, &g, &store);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  assert_null(comm);
  if (s == OSLO_OK || secs > 30) {
    report("comm_create alone: status %d after %.1f s: %s\n", s, secs, in.error());
    fail();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s liboslo_backend_torch.so [test filter]\n", argv[0]);
    return 2;
  }
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  auto entry = reinterpret_cast<oslo_backend_plugin_fn>(dlsym(h, OSLO_BACKEND_PLUGIN_SYMBOL));
  if (entry == nullptr) {
    std::fprintf(stderr, "dlsym(%s): %s\n", OSLO_BACKEND_PLUGIN_SYMBOL, dlerror());
    return 1;
  }
  g_bk = entry();
  if (argc > 2) cmocka_set_test_filter(argv[2]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_create_errors),
      cmocka_unit_test(test_memory),
      cmocka_unit_test(test_instances_on_threads),
      cmocka_unit_test(test_convert),
      cmocka_unit_test(test_fill),
      cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_binary),
      cmocka_unit_test(test_unary),
      cmocka_unit_test(test_unary_backward),
      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_sum_rows),
      cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_softmax_backward),
      cmocka_unit_test(test_norm),
      cmocka_unit_test(test_gather_rows),
      cmocka_unit_test(test_scatter_add_rows),
      cmocka_unit_test(test_gather_cols),
      cmocka_unit_test(test_scatter_add_cols),
      cmocka_unit_test(test_comm_declines_on_cpu),
      cmocka_unit_test(test_comm_gloo_threads),
      cmocka_unit_test(test_comm_gloo_timeout),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
