// The model-side GPTQ/AWQ check (run by gptq_model_ref.py): test_gptq_model
// WORK_DIR loads WORK_DIR/gptq, gptq_v2 and awq with oslo_model_load (no
// dtype: the quantized linears stay q4_g128, multiplied by the backend's
// matmul_quant) and WORK_DIR/dense (their dequantization, f32), runs the
// ids in WORK_DIR/ids.i64 and compares the logits with transformers' forward
// on the dense weights (WORK_DIR/logits.f32): within 1e-4, as the model
// tests compare f32 models, and the quantized folders equal the dense one
// to 1e-5 (the same f32 weights). The GPTQ model saved as an oslo
// checkpoint (q4_g128 blocks) loads back to the same logits. The act-order
// folder (gptq_actorder) is refused by name without a dtype and matches
// transformers on its own dense weights (WORK_DIR/logits_actorder.f32) when
// loaded as f32.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "oslo.h"

namespace {

void ok_or_die(oslo_status st, const std::string& what) {
  if (st != OSLO_OK) {
    std::fprintf(stderr, "%s: %s: %s\n", what.c_str(), oslo_status_string(st), oslo_last_error());
    std::exit(1);
  }
}

template <typename T>
std::vector<T> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  std::vector<char> b((std::istreambuf_iterator<char>(in)), {});
  std::vector<T> v(b.size() / sizeof(T));
  std::copy(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(v.size() * sizeof(T)),
            reinterpret_cast<char*>(v.data()));
  return v;
}

std::vector<float> run(oslo_context* ctx, const std::string& path, const std::vector<int64_t>& ids,
                       int64_t b, int64_t s, std::string* dtype, const std::string& save = "",
                       const oslo_model_options* opts = nullptr) {
  oslo_model* m = nullptr;
  ok_or_die(oslo_model_load(ctx, path.c_str(), opts, &m), "load " + path);
  if (!save.empty()) ok_or_die(oslo_model_save(m, save.c_str()), "save " + save);
  oslo_model_info info;
  ok_or_die(oslo_model_get_info(m, &info, nullptr), "info");
  std::vector<float> out(static_cast<size_t>(b * s * info.vocab_size));
  ok_or_die(oslo_model_forward(m, ids.data(), nullptr, nullptr, b, s, OSLO_MODEL_OUTPUT_LOGITS,
                               out.data(), out.size()),
            "forward " + path);
  *dtype = info.dtype == OSLO_DTYPE_Q4_G128
               ? "q4_g128"
               : "dtype " + std::to_string(static_cast<int>(info.dtype));
  oslo_model_destroy(m);
  return out;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::fmax(d, std::fabs(a[i] - b[i]));
  return a.size() == b.size() ? d : INFINITY;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: test_gptq_model WORK_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const std::vector<int64_t> ids = slurp<int64_t>(dir + "/ids.i64");
  const std::vector<float> want = slurp<float>(dir + "/logits.f32");
  const int64_t b = 2, s = static_cast<int64_t>(ids.size()) / 2;
  oslo_context* ctx = nullptr;
  ok_or_die(oslo_context_create(nullptr, &ctx), "context");
  std::string dt;
  const std::vector<float> dense = run(ctx, dir + "/dense", ids, b, s, &dt);
  int bad = 0;
  const float dd = max_diff(dense, want);
  std::printf("dense (%s): max |oslo - transformers| = %g\n", dt.c_str(), dd);
  bad += !(dd <= 1e-4f);
  for (const char* v : {"gptq", "gptq_v2", "awq"}) {
    const std::vector<float> got = run(ctx, dir + "/" + v, ids, b, s, &dt);
    const float d = max_diff(got, want), e = max_diff(got, dense);
    std::printf("%s (weights %s): max |oslo - transformers| = %g, |quantized - dense| = %g\n", v,
                dt.c_str(), d, e);
    bad += !(d <= 1e-4f) + !(e <= 1e-5f) + (dt != "q4_g128");
  }
  // An oslo checkpoint saved from the GPTQ model keeps the q4_g128 blocks
  // and loads back to the same logits.
  const std::string saved = dir + "/gptq_saved";
  const std::vector<float> a = run(ctx, dir + "/gptq", ids, b, s, &dt, saved);
  const std::vector<float> c = run(ctx, saved, ids, b, s, &dt);
  std::printf("gptq saved and loaded (weights %s): max |difference| = %g\n", dt.c_str(),
              max_diff(a, c));
  bad += !(max_diff(a, c) == 0.0f) + (dt != "q4_g128");
  // Act-order (desc_act): kept quantized it is refused, naming the tensor
  // and the way out; loaded with dtype f32 its linears are read
  // dequantized in input order and the logits are transformers'.
  {
    const std::string act = dir + "/gptq_actorder";
    oslo_model* m = nullptr;
    const oslo_status st = oslo_model_load(ctx, act.c_str(), nullptr, &m);
    const std::string err = oslo_last_error();
    const bool named = st == OSLO_ERR_NOT_SUPPORTED && err.find("act-order") != std::string::npos &&
                       err.find("model.layers.0.mlp.down_proj") != std::string::npos &&
                       err.find("float dtype") != std::string::npos;
    std::printf("gptq_actorder without a dtype: %s (%s)\n", oslo_status_string(st), err.c_str());
    bad += !named;
    if (m) oslo_model_destroy(m);
    oslo_model_options o;
    ok_or_die(oslo_model_options_init(&o, OSLO_MODEL_OPTIONS_VERSION), "options");
    o.dtype = OSLO_DTYPE_F32;
    const std::vector<float> want_act = slurp<float>(dir + "/logits_actorder.f32");
    const std::vector<float> got = run(ctx, act, ids, b, s, &dt, "", &o);
    const float d = max_diff(got, want_act);
    std::printf("gptq_actorder as f32 (weights %s): max |oslo - transformers| = %g\n", dt.c_str(),
                d);
    bad += !(d <= 1e-4f) + (dt != "dtype " + std::to_string(static_cast<int>(OSLO_DTYPE_F32)));
    // The act-order linear changes the logits (the check can fail).
    const float moved = max_diff(want_act, want);
    std::printf("act-order reference against the plain one: max |difference| = %g\n", moved);
    bad += !(moved > 1e-3f);
  }
  oslo_context_destroy(ctx);
  if (bad) std::fprintf(stderr, "FAIL: %d checks\n", bad);
  return bad ? 1 : 0;
}
