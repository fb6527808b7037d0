// Backend conformance, op level: every op of the backend table
// (core/backend/oslo_backend.h) on the backend named by argv[1] against an
// independent f64 reference computed here, in f32, f16 and bf16, with
// strided, transposed and broadcast views, plus the error paths. The same
// cases run on every backend that is built (ctest: conformance_<backend>_ops).
//
// Tolerances are relative to the largest reference magnitude: f32 1e-5
// (products: 1e-5 x sqrt(K)), f16 2e-3, bf16 1.6e-2 (outputs rounded to the
// dtype; inputs are generated already representable in their dtype, so the
// reference sees exactly what the backend sees).
//
// The cases are split by op family: test_ops_matmul.cpp,
// test_ops_elementwise.cpp, test_ops_reduce.cpp, test_ops_abi_v2.cpp,
// test_ops_fused.cpp, test_ops_attention_bw.cpp, test_ops_paged.cpp,
// test_ops_quant.cpp (block-quantized weights; its own bound, see there),
// test_ops_kv8.cpp (the int8 KV cache's rows, byte for byte)
// (helpers in ops_common.hpp); this file has the dtype conversions and main.
#include "ops_common.hpp"

using namespace oslo;

namespace conf {

// ---- cases ----------------------------------------------------------------

void test_convert(const std::shared_ptr<Backend>& be) {
  for (oslo_dtype src : kFloats)
    for (oslo_dtype dst : kFloats) {
      g_case = fmt("convert %s->%s", dtype_name(src), dtype_name(dst));
      Dev a(be, src, {7, 70000 / 7 + 3});
      auto h = random_in(static_cast<size_t>(a.v.numel()), src, 3.0);
      a.upload(h);
      Dev b(be, dst, {7, 70000 / 7 + 3});
      be->convert(b.v, a.v);
      std::vector<double> ref(h.size());
      for (size_t i = 0; i < h.size(); ++i) ref[i] = quant(h[i], dst);
      double e;
      {
        const bool ok_ = close(b.download(), ref, 1e-7, &e);
        check(ok_, fmt("err %g", e));
      }
    }
  // Transposed copy and broadcast of a row.
  g_case = "convert transpose";
  {
    Dev a(be, OSLO_DTYPE_F32, {5, 3});
    auto h = random_in(15, OSLO_DTYPE_F32);
    a.upload(h);
    Dev b(be, OSLO_DTYPE_BF16, {3, 5});
    View t = a.v;
    std::swap(t.shape[0], t.shape[1]);
    std::swap(t.strides[0], t.strides[1]);
    be->convert(b.v, t);
    std::vector<double> ref(15);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) ref[i * 5 + j] = quant(h[j * 3 + i], OSLO_DTYPE_BF16);
    check(close(b.download(), ref, 1e-7), "transposed values");
  }
  g_case = "convert broadcast";
  {
    Dev a(be, OSLO_DTYPE_F16, {4});
    auto h = random_in(4, OSLO_DTYPE_F16);
    a.upload(h);
    Dev b(be, OSLO_DTYPE_F32, {3, 4});
    be->convert(b.v, a.v);
    std::vector<double> ref(12);
    for (int i = 0; i < 12; ++i) ref[i] = h[i % 4];
    check(close(b.download(), ref, 0), "broadcast rows");
  }
  g_case = "convert ints";
  {
    Dev a(be, OSLO_DTYPE_I64, {5});
    a.upload({-3, 0, 7, 123456789, -2147483648.0});
    Dev b(be, OSLO_DTYPE_I32, {5});
    be->convert(b.v, a.v);
    check(b.download() == std::vector<double>({-3, 0, 7, 123456789, -2147483648.0}), "i64->i32");
    Dev f(be, OSLO_DTYPE_F32, {5});
    oslo_status st = OSLO_OK;
    try {
      be->convert(f.v, a.v);
    } catch (const Error& e) {
      st = e.status();
    }
    check(st == OSLO_ERR_DTYPE, "i64 -> f32 refused with OSLO_ERR_DTYPE");
  }
  g_case = "fill";
  for (oslo_dtype dt : kFloats) {
    Dev a(be, dt, {3, 5});
    be->fill(a.v, 0.5);
    check(a.download() == std::vector<double>(15, 0.5), fmt("fill %s", dtype_name(dt)));
  }
}

}  // namespace conf

using namespace conf;

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "cpu";
  std::shared_ptr<Backend> be;
  try {
    BackendOptions o;
    o.num_threads = 2;
    if (argc > 2) o.extra_json = argv[2];
    be = create_backend(name, o);
    g_name = name;
    g_options = o;
  } catch (const Error& e) {
    std::fprintf(stderr, "cannot create backend '%s': %s\n", name.c_str(), e.what());
    return 1;
  }
  const std::pair<const char*, void (*)(const std::shared_ptr<Backend>&)> groups[] = {
      {"convert", test_convert},
      {"matmul", test_matmul},
      {"elementwise", test_elementwise},
      {"reduce", test_reduce},
      {"softmax_norm", test_softmax_norm},
      {"gather_scatter", test_gather_scatter},
      {"abi_v2", test_abi_v2},
      {"fused", test_fused},
      {"attention_backward", test_attention_backward},
      {"paged_attention", test_paged_attention},
      {"quant", test_quant},
      {"kv8", test_kv8},
  };
  for (auto& g : groups) {
    g_case = g.first;
    try {
      g.second(be);
    } catch (const Error& e) {
      check(false, std::string("unexpected oslo::Error: ") + e.what());
    } catch (const std::exception& e) {
      check(false, std::string("unexpected exception: ") + e.what());
    }
  }
  std::printf("conformance ops on %s: %d passed, %d failed\n", name.c_str(), g_passed, g_failed);
  return g_failed ? 1 : 0;
}
