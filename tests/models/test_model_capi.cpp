// Model tests through the C ABI (include/oslo.h), one rank per process under
// oslo-run (the tensor-parallel size is the world size). References come
// from the fixtures transformers wrote (tests/models/fixtures/*/reference.*).
//
//   model_capi_test generate FIXTURE            greedy, batched greedy, beam == HF
//   model_capi_test save FIXTURE DIR            oslo_model_save at this TP
//   model_capi_test same FIXTURE DIR            DIR loads to bitwise the logits FIXTURE gives
//   model_capi_test embed MODEL REFERENCE_DIR   sentence embeddings vs sentence-transformers
//   model_capi_test merge SRC DST ORIGINAL      (1 process) merged == original, tensor by tensor
//   model_capi_test reshard SRC DST TP          (1 process) offline reshard
//   model_capi_test errors FIXTURE              hostile folders -> named errors
//   model_capi_test destroy_order FIXTURE       *_destroy in any order (include/oslo.h, Lifetimes)
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/checkpoint/safetensors.hpp"
#include "core/common/dtype.hpp"
#include "oslo.h"
#include "tests/common/safetensors_ref.hpp"
#include "tests/common/test_backend.hpp"

namespace {

int g_fail = 0;
int g_rank = 0;

void check(bool ok, const std::string& what) {
  if (!ok) ++g_fail;
  if (!ok || g_rank == 0)
    std::printf("[rank %d] %s: %s\n", g_rank, what.c_str(), ok ? "ok" : "FAIL");
}

void ok_or_die(oslo_status st, const char* what) {
  if (st != OSLO_OK) {
    std::fprintf(stderr, "[rank %d] %s: %s: %s\n", g_rank, what, oslo_status_string(st),
                 oslo_last_error());
    std::exit(1);
  }
}

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

using Ref = oslo_test::SafetensorsRef;

oslo_context* make_context() {
  const char* ws = std::getenv("WORLD_SIZE");
  const int world = ws ? std::atoi(ws) : 1;
  // OSLO_TEST_PP: that many pipeline stages, the rest tensor parallel.
  const char* pps = std::getenv("OSLO_TEST_PP");
  const int pp = pps ? std::atoi(pps) : 1;
  const std::string cfg = "{\"tensor_parallel_size\": " + std::to_string(world / pp) +
                          ", \"pipeline_parallel_size\": " + std::to_string(pp) +
                          ", \"timeout_seconds\": 120" + oslo_test::test_backend_members() + "}";
  const bool any = world > 1 || ws || !oslo_test::test_backend_members().empty();
  oslo_context* ctx = nullptr;
  ok_or_die(oslo_context_create(any ? cfg.c_str() : nullptr, &ctx), "context");
  ok_or_die(oslo_context_rank(ctx, OSLO_GROUP_WORLD, &g_rank), "rank");
  return ctx;
}

oslo_model* load(oslo_context* ctx, const std::string& path) {
  oslo_model* m = nullptr;
  ok_or_die(oslo_model_load(ctx, path.c_str(), nullptr, &m), ("load " + path).c_str());
  return m;
}

// A fixture folder loaded in OSLO_TEST_MODEL_DTYPE when set (e.g. "q8_0":
// tests/quant/test_ckpt_flow_quant.sh), else as stored.
oslo_model* load_fixture(oslo_context* ctx, const std::string& path) {
  const char* env = std::getenv("OSLO_TEST_MODEL_DTYPE");
  if (!env || !*env) return load(ctx, path);
  oslo_dtype d;
  if (!oslo::dtype_parse(env, &d)) {
    std::fprintf(stderr, "OSLO_TEST_MODEL_DTYPE: unknown dtype %s\n", env);
    std::exit(2);
  }
  oslo_model_options o;
  ok_or_die(oslo_model_options_init(&o, OSLO_MODEL_OPTIONS_VERSION), "options");
  o.dtype = d;
  oslo_model* m = nullptr;
  ok_or_die(oslo_model_load(ctx, path.c_str(), &o, &m), ("load " + path + " as " + env).c_str());
  return m;
}

std::vector<float> logits(oslo_model* m, const std::vector<int64_t>& ids,
                          const std::vector<int64_t>& mask, int64_t b, int64_t s) {
  oslo_model_info info;
  ok_or_die(oslo_model_get_info(m, &info, nullptr), "info");
  std::vector<float> out(static_cast<size_t>(b * s * info.vocab_size));
  ok_or_die(oslo_model_forward(m, ids.data(), mask.data(), nullptr, b, s, OSLO_MODEL_OUTPUT_LOGITS,
                               out.data(), out.size()),
            "forward");
  return out;
}

int run_generate(const std::string& fix) {
  oslo_context* ctx = make_context();
  oslo_model* m = load(ctx, fix);
  const auto meta = nlohmann::json::parse(slurp(fix + "/reference.json"));
  const auto prompts = meta.at("prompts");
  const int64_t eos = meta.at("generation_eos_token_id").get<int64_t>();
  const int64_t pad = meta.at("pad_token_id").get<int64_t>();
  for (const char* kind : {"greedy", "beam"}) {
    const auto& g = meta.at(kind);
    oslo_generate_options o;
    ok_or_die(oslo_generate_options_init(&o, OSLO_GENERATE_OPTIONS_VERSION), "init");
    o.max_new_tokens = g.at("max_new_tokens").get<int64_t>();
    o.num_beams = g.at("num_beams").get<int64_t>();
    o.length_penalty = g.value("length_penalty", 1.0f);
    o.eos_token_ids = &eos;
    o.num_eos_token_ids = 1;
    o.pad_token_id = pad;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto p = prompts[i].get<std::vector<int64_t>>();
      const int64_t len = static_cast<int64_t>(p.size());
      std::vector<int64_t> out(static_cast<size_t>(o.max_new_tokens));
      int64_t n = 0;
      float score = 0;
      ok_or_die(oslo_model_generate(m, p.data(), &len, 1, &o, out.data(), &n, &score), "generate");
      std::vector<int64_t> got = p;
      got.insert(got.end(), out.begin(), out.begin() + n);
      const std::string key = std::string(kind) + "_" + std::to_string(i);
      const auto want = g.at("outputs").at(key).get<std::vector<int64_t>>();
      check(got == want, key + " tokens equal transformers'");
      if (std::string(kind) == "beam") {
        const float ws = g.at("scores").at(key + "_score").get<float>();
        check(std::fabs(ws - score) < 1e-4,
              key + " score " + std::to_string(score) + " vs " + std::to_string(ws));
      }
    }
  }
  // All prompts in one left-padded batch (greedy).
  {
    Ref ref(fix + "/reference.safetensors");
    std::vector<int64_t> shape;
    const auto want = ref.get<int64_t>("greedy_batched", &shape);
    std::vector<int64_t> ids, lens;
    for (const auto& pj : prompts) {
      const auto p = pj.get<std::vector<int64_t>>();
      ids.insert(ids.end(), p.begin(), p.end());
      lens.push_back(static_cast<int64_t>(p.size()));
    }
    oslo_generate_options o;
    ok_or_die(oslo_generate_options_init(&o, OSLO_GENERATE_OPTIONS_VERSION), "init");
    o.max_new_tokens = meta.at("greedy").at("max_new_tokens").get<int64_t>();
    o.eos_token_ids = &eos;
    o.num_eos_token_ids = 1;
    o.pad_token_id = pad;
    const int64_t B = static_cast<int64_t>(lens.size());
    std::vector<int64_t> out(static_cast<size_t>(B * o.max_new_tokens)), n(static_cast<size_t>(B));
    ok_or_die(oslo_model_generate(m, ids.data(), lens.data(), B, &o, out.data(), n.data(), nullptr),
              "generate batched");
    const int64_t S = shape[1], P = S - o.max_new_tokens;
    bool same = true;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < o.max_new_tokens; ++t) {
        const int64_t w = want[static_cast<size_t>(b * S + P + t)];
        const int64_t g = t < n[static_cast<size_t>(b)]
                              ? out[static_cast<size_t>(b * o.max_new_tokens + t)]
                              : pad;
        same = same && w == g;
      }
    check(same, "greedy_batched (left-padded batch) equals transformers'");
  }
  // Sampling: same seed, same tokens; ranks agree by construction.
  {
    const auto p = prompts[0].get<std::vector<int64_t>>();
    const int64_t len = static_cast<int64_t>(p.size());
    oslo_generate_options o;
    ok_or_die(oslo_generate_options_init(&o, OSLO_GENERATE_OPTIONS_VERSION), "init");
    o.do_sample = 1;
    o.temperature = 0.8f;
    o.top_k = 20;
    o.top_p = 0.9f;
    o.seed = 1234;
    o.max_new_tokens = 10;
    o.num_eos_token_ids = 0;
    o.eos_token_ids = &eos;
    std::vector<int64_t> a(10), b(10);
    int64_t na = 0, nb = 0;
    ok_or_die(oslo_model_generate(m, p.data(), &len, 1, &o, a.data(), &na, nullptr), "sample");
    ok_or_die(oslo_model_generate(m, p.data(), &len, 1, &o, b.data(), &nb, nullptr), "sample");
    check(na == 10 && a == b, "sampling with a seed repeats");
  }
  oslo_model_destroy(m);
  oslo_context_destroy(ctx);
  return g_fail ? 1 : 0;
}

int run_save(const std::string& fix, const std::string& dir) {
  oslo_context* ctx = make_context();
  oslo_model* m = load_fixture(ctx, fix);
  ok_or_die(oslo_model_save(m, dir.c_str()), "save");
  oslo_model_destroy(m);
  oslo_context_destroy(ctx);
  return 0;
}

int run_same(const std::string& fix, const std::string& dir) {
  oslo_context* ctx = make_context();
  Ref ref(fix + "/reference.safetensors");
  const bool causal = ref.r.find("input_ids_left") != nullptr;
  std::vector<int64_t> shape;
  const auto ids = ref.get<int64_t>(causal ? "input_ids_left" : "input_ids", &shape);
  const auto mask = ref.get<int64_t>(causal ? "attention_mask_left" : "attention_mask");
  auto run = [&](oslo_model* m) {
    if (causal) return logits(m, ids, mask, shape[0], shape[1]);
    oslo_model_info info;
    ok_or_die(oslo_model_get_info(m, &info, nullptr), "info");
    std::vector<float> out(static_cast<size_t>(shape[0] * shape[1] * info.hidden_size));
    std::vector<int64_t> tt(ids.size(), 0);
    if (ref.r.find("token_type_ids")) tt = ref.get<int64_t>("token_type_ids");
    ok_or_die(oslo_model_forward(m, ids.data(), mask.data(), tt.data(), shape[0], shape[1],
                                 OSLO_MODEL_OUTPUT_HIDDEN, out.data(), out.size()),
              "forward");
    return out;
  };
  oslo_model* a = load_fixture(ctx, fix);
  const auto la = run(a);
  oslo_model_destroy(a);
  oslo_model* b = load(ctx, dir);
  const auto lb = run(b);
  oslo_model_destroy(b);
  // OSLO_TEST_SAME_TOL: a quantized model against its merge (dequantized
  // into f32 weights, which a backend's int8 kernel does not multiply
  // alike) agrees within a tolerance instead of bitwise.
  const char* same_tol = std::getenv("OSLO_TEST_SAME_TOL");
  if (same_tol && *same_tol) {
    double m = la.size() == lb.size() ? 0.0 : 1e30;
    for (size_t i = 0; m < 1e30 && i < la.size(); ++i)
      m = std::max(m, std::fabs(double(la[i]) - lb[i]));
    check(m <= std::atof(same_tol), "outputs from " + dir + " within " + same_tol +
                                        " of the original folder's (" + std::to_string(m) + ")");
  } else {
    check(la.size() == lb.size() && std::memcmp(la.data(), lb.data(), la.size() * 4) == 0,
          "outputs from " + dir + " are bitwise those of the original folder");
  }
  const char* qdt = std::getenv("OSLO_TEST_MODEL_DTYPE");
  if (qdt && *qdt) {  // quantized: tests/quant's oracle compares with transformers
    oslo_context_destroy(ctx);
    return g_fail ? 1 : 0;
  }
  const auto want = ref.get<float>(causal ? "logits_left" : "last_hidden_state");
  double d = 0;
  const size_t V = la.size() / mask.size();
  for (size_t p = 0; p < mask.size(); ++p)
    for (size_t v = 0; mask[p] && v < V; ++v)
      d = std::max(d, std::fabs(double(lb[p * V + v]) - want[p * V + v]));
  check(d < 1e-4, "and within 1e-4 of transformers' (" + std::to_string(d) + ")");
  oslo_context_destroy(ctx);
  return g_fail ? 1 : 0;
}

int run_embed(const std::string& model, const std::string& refdir) {
  oslo_context* ctx = make_context();
  oslo_model* m = load(ctx, model);
  Ref ref(refdir + "/reference.safetensors");
  std::vector<int64_t> shape;
  const auto ids = ref.get<int64_t>("input_ids", &shape);
  const auto mask = ref.get<int64_t>("attention_mask");
  const auto want = ref.get<float>("sentence_embedding");
  const int64_t B = shape[0], S = shape[1], H = static_cast<int64_t>(want.size()) / B;
  std::vector<float> got(static_cast<size_t>(B * H));
  ok_or_die(oslo_model_embed(m, ids.data(), mask.data(), B, S, 1, got.data(), got.size()), "embed");
  double worst = 1;
  for (int64_t b = 0; b < B; ++b) {
    double dot = 0, na = 0, nb = 0;
    for (int64_t i = 0; i < H; ++i) {
      const double x = got[static_cast<size_t>(b * H + i)],
                   y = want[static_cast<size_t>(b * H + i)];
      dot += x * y;
      na += x * x;
      nb += y * y;
    }
    worst = std::min(worst, dot / std::sqrt(na * nb));
  }
  char buf[128];
  std::snprintf(buf, sizeof buf, "MiniLM embeddings: worst cosine to sentence-transformers %.7f",
                worst);
  check(worst >= 0.9999, buf);
  oslo_model_destroy(m);
  oslo_context_destroy(ctx);
  return g_fail ? 1 : 0;
}

int run_merge(const std::string& src, const std::string& dst, const std::string& orig) {
  oslo_merge_options o;
  ok_or_die(oslo_merge_options_init(&o, OSLO_MERGE_OPTIONS_VERSION), "init");
  o.overwrite = 1;
  ok_or_die(oslo_model_merge(src.c_str(), dst.c_str(), &o), "merge");
  // Every tensor of the original, byte for byte, in the merged folder.
  auto list = [](const std::string& dir) {
    std::vector<std::string> files;
    if (std::ifstream(dir + "/model.safetensors").good()) {
      files.push_back(dir + "/model.safetensors");
    } else {
      const auto idx = nlohmann::json::parse(slurp(dir + "/model.safetensors.index.json"));
      for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
        const std::string f = dir + "/" + it.value().get<std::string>();
        if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
      }
    }
    return files;
  };
  std::map<std::string, std::pair<std::string, std::string>> merged;  // name -> (dtype, bytes)
  for (const auto& f : list(dst)) {
    oslo::safetensors::Reader r(f);
    for (const auto& t : r.tensors()) {
      std::string bytes(t.nbytes(), '\0');
      r.read(t, 0, t.nbytes(), bytes.data());
      merged[t.name] = {oslo::safetensors::dtype_name(t.dtype), bytes};
    }
  }
  size_t n = 0, same = 0;
  for (const auto& f : list(orig)) {
    oslo::safetensors::Reader r(f);
    for (const auto& t : r.tensors()) {
      ++n;
      std::string bytes(t.nbytes(), '\0');
      r.read(t, 0, t.nbytes(), bytes.data());
      auto it = merged.find(t.name);
      if (it != merged.end() && it->second.first == oslo::safetensors::dtype_name(t.dtype) &&
          it->second.second == bytes)
        ++same;
      else
        std::printf("differs: %s\n", t.name.c_str());
    }
  }
  const char* qdt = std::getenv("OSLO_TEST_MODEL_DTYPE");
  if (qdt && *qdt) {
    // Quantized: the linear weights come back dequantized (f32, other
    // values), every other tensor byte for byte.
    check(n > 0 && same > 0 && same < n && merged.size() == n,
          "merged folder holds every original tensor, the quantized ones dequantized (" +
              std::to_string(same) + "/" + std::to_string(n) + " unchanged)");
    check(std::ifstream(dst + "/config.json").good(), "merged folder has config.json");
    return g_fail ? 1 : 0;
  }
  check(n > 0 && same == n && merged.size() == n,
        "merged folder holds every original tensor byte for byte (" + std::to_string(same) + "/" +
            std::to_string(n) + ", " + std::to_string(merged.size()) + " merged)");
  check(std::ifstream(dst + "/config.json").good(), "merged folder has config.json");
  return g_fail ? 1 : 0;
}

int run_reshard(const std::string& src, const std::string& dst, int tp) {
  ok_or_die(oslo_model_reshard(src.c_str(), dst.c_str(), tp), "reshard");
  size_t len = 0;
  ok_or_die(oslo_checkpoint_inspect(dst.c_str(), 0, nullptr, 0, &len), "inspect");
  std::string text(len + 1, '\0');
  ok_or_die(oslo_checkpoint_inspect(dst.c_str(), 0, text.data(), text.size(), &len), "inspect");
  check(text.find("oslo-checkpoint") != std::string::npos, "inspect names the format");
  return g_fail ? 1 : 0;
}

// A copy of FIXTURE in a temporary folder with one file replaced or removed.
std::string variant(const std::string& fix, const std::string& tmp, const std::string& name,
                    const char* file, const char* content) {
  const std::string dir = tmp + "/" + name;
  const std::string cmd = "rm -rf '" + dir + "' && cp -r '" + fix + "' '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) std::exit(1);
  const std::string p = dir + "/" + file;
  if (content) {
    std::ofstream(p, std::ios::trunc) << content;
  } else {
    std::remove(p.c_str());
  }
  return dir;
}

int run_errors(const std::string& fix, const std::string& tmp) {
  if (std::system(("mkdir -p '" + tmp + "'").c_str()) != 0) return 1;
  oslo_context* ctx = make_context();
  auto expect = [&](const std::string& path, oslo_status want, const char* needle,
                    const std::string& what) {
    oslo_model* m = nullptr;
    const oslo_status st = oslo_model_load(ctx, path.c_str(), nullptr, &m);
    const std::string msg = oslo_last_error();
    check(st == want && m == nullptr && msg.find(needle) != std::string::npos,
          what + " -> " + oslo_status_string(st) + ": " + msg.substr(0, 160));
    oslo_model_destroy(m);
  };
  const std::string cfg = slurp(fix + "/config.json");
  expect(tmp + "/does-not-exist", OSLO_ERR_IO, "does-not-exist", "missing folder");
  expect(variant(fix, tmp, "badjson", "config.json", "{\"model_type\": \"gpt2\","), OSLO_ERR_FORMAT,
         "config", "truncated config.json");
  expect(variant(fix, tmp, "unknown", "config.json", "{\"model_type\": \"t5\", \"vocab_size\": 5}"),
         OSLO_ERR_NOT_SUPPORTED, "t5", "unknown model_type");
  {
    auto j = nlohmann::json::parse(cfg);
    j["n_embd"] = j["n_embd"].get<int64_t>() * 2;
    expect(variant(fix, tmp, "shape", "config.json", j.dump().c_str()), OSLO_ERR_SHAPE, "shape",
           "config sizes differ from the tensors");
    j = nlohmann::json::parse(cfg);
    j["n_head"] = "four";
    expect(variant(fix, tmp, "type", "config.json", j.dump().c_str()), OSLO_ERR_FORMAT, "n_head",
           "a size of the wrong type");
    j = nlohmann::json::parse(cfg);
    j["n_layer"] = j["n_layer"].get<int64_t>() + 1;
    expect(variant(fix, tmp, "layers", "config.json", j.dump().c_str()), OSLO_ERR_FORMAT, "h.2",
           "a layer missing from the weights");
    j = nlohmann::json::parse(cfg);
    j["n_head"] = 3;
    expect(variant(fix, tmp, "heads", "config.json", j.dump().c_str()), OSLO_ERR_FORMAT, "heads",
           "heads not dividing the hidden size");
  }
  expect(variant(fix, tmp, "noweights", "model.safetensors", nullptr), OSLO_ERR_IO, "",
         "no weights");
  expect(variant(fix, tmp, "garbage", "model.safetensors", "\x10\0\0\0\0\0\0\0{\"a\":"),
         OSLO_ERR_FORMAT, "model.safetensors", "garbage weights");
  // Truncated weights: the header promises more bytes than the file has.
  {
    const std::string dir = variant(fix, tmp, "trunc", "config.json", cfg.c_str());
    const std::string p = dir + "/model.safetensors";
    std::string all = slurp(p);
    std::ofstream(p, std::ios::trunc | std::ios::binary) << all.substr(0, all.size() / 2);
    expect(dir, OSLO_ERR_FORMAT, "model.safetensors", "truncated weights");
  }
  oslo_model* m = nullptr;
  check(oslo_model_load(nullptr, fix.c_str(), nullptr, &m) == OSLO_ERR_INVALID_ARGUMENT,
        "NULL context");
  check(oslo_model_load(ctx, nullptr, nullptr, &m) == OSLO_ERR_INVALID_ARGUMENT, "NULL path");
  // A good load after the failures.
  m = load(ctx, fix);
  const int64_t ids[2] = {1, 100000000};
  std::vector<float> out(1 << 20);
  const oslo_status st = oslo_model_forward(m, ids, nullptr, nullptr, 1, 2,
                                            OSLO_MODEL_OUTPUT_LOGITS, out.data(), out.size());
  check(st == OSLO_ERR_INVALID_ARGUMENT &&
            std::string(oslo_last_error()).find("100000000") != std::string::npos,
        std::string("id outside the vocabulary -> ") + oslo_last_error());
  check(oslo_model_forward(m, ids, nullptr, nullptr, 1, 1, OSLO_MODEL_OUTPUT_LOGITS, out.data(),
                           3) == OSLO_ERR_SHAPE,
        "output buffer too small");
  oslo_model_destroy(m);
  oslo_context_destroy(ctx);
  return g_fail ? 1 : 0;
}

// The training C ABI's argument checks and its paths without an optimizer,
// with loss scaling and with activation checkpointing (one rank).
int run_train_errors(const std::string& fix, const std::string& encoder) {
  oslo_context* ctx = make_context();
  auto named = [&](oslo_status st, oslo_status want, const char* needle, const std::string& what) {
    const std::string msg = st == OSLO_OK ? "" : oslo_last_error();
    check(st == want && msg.find(needle) != std::string::npos,
          what + " -> " + oslo_status_string(st) + ": " + msg.substr(0, 160));
  };
  oslo_model* m = load(ctx, fix);
  oslo_model* other = load(ctx, fix);
  oslo_optimizer* opt = nullptr;
  oslo_optimizer_options o;
  oslo_train_options o_train;
  named(oslo_optimizer_options_init(nullptr, OSLO_OPTIMIZER_OPTIONS_VERSION),
        OSLO_ERR_INVALID_ARGUMENT, "NULL", "options_init(NULL)");
  named(oslo_optimizer_options_init(&o, 99), OSLO_ERR_INVALID_ARGUMENT, "99", "unknown version");
  ok_or_die(oslo_optimizer_options_init(&o, OSLO_OPTIMIZER_OPTIONS_VERSION), "options_init");
  ok_or_die(oslo_train_options_init(&o_train, OSLO_TRAIN_OPTIONS_VERSION), "train_options_init");
  check(o.kind == OSLO_OPTIMIZER_ADAMW && o.lr == 1e-3 && o.beta2 == 0.999 &&
            o.loss_scaling == -1 && o.init_scale == 65536.0 && o.growth_interval == 2000,
        "defaults are PyTorch's");
  auto bad = [&](void (*edit)(oslo_optimizer_options&), const char* needle, const char* what) {
    oslo_optimizer_options b;
    ok_or_die(oslo_optimizer_options_init(&b, OSLO_OPTIMIZER_OPTIONS_VERSION), "init");
    edit(b);
    oslo_optimizer* x = nullptr;
    named(oslo_optimizer_create(m, &b, nullptr, &x), OSLO_ERR_INVALID_ARGUMENT, needle, what);
    check(x == nullptr, std::string(what) + ": no optimizer made");
  };
  bad([](oslo_optimizer_options& b) { b.version = 0; }, "version", "version 0");
  bad([](oslo_optimizer_options& b) { b.kind = static_cast<oslo_optimizer_kind>(7); }, "kind",
      "unknown kind");
  bad([](oslo_optimizer_options& b) { b.schedule = static_cast<oslo_lr_schedule>(9); }, "schedule",
      "unknown schedule");
  bad([](oslo_optimizer_options& b) { b.lr = std::nan(""); }, "lr", "NaN lr");
  bad([](oslo_optimizer_options& b) { b.beta1 = 1.0; }, "betas", "beta1 = 1");
  bad([](oslo_optimizer_options& b) { b.schedule = OSLO_LR_COSINE; }, "total_steps",
      "cosine without total_steps");
  bad([](oslo_optimizer_options& b) { b.max_grad_norm = -1; }, "max_grad_norm",
      "negative max_grad_norm");
  bad([](oslo_optimizer_options& b) { b.loss_scaling = 3; }, "loss_scaling", "loss_scaling 3");
  bad(
      [](oslo_optimizer_options& b) {
        b.loss_scaling = 1;
        b.backoff_factor = 1.5;
      },
      "backoff_factor", "backoff_factor above 1");
  bad(
      [](oslo_optimizer_options& b) {
        b.kind = OSLO_OPTIMIZER_SGD;
        b.nesterov = 1;
      },
      "Nesterov", "Nesterov without momentum");
  // The train options' checks and the pipeline statistics:
  // test_model_capi_train.cpp.
  named(oslo_optimizer_create(nullptr, &o, &o_train, &opt), OSLO_ERR_INVALID_ARGUMENT, "model",
        "NULL model");
  named(oslo_optimizer_create(m, &o, &o_train, nullptr), OSLO_ERR_INVALID_ARGUMENT, "out",
        "NULL out");
  {
    // An encoder trains from a gradient of its hidden states.
    oslo_model* enc = load(ctx, encoder);
    oslo_model_info info;
    ok_or_die(oslo_model_get_info(enc, &info, nullptr), "info");
    ok_or_die(oslo_optimizer_create(enc, &o, &o_train, &opt), "optimizer over an encoder");
    const int64_t eids[6] = {2, 40, 41, 7, 99, 3}, etypes[6] = {0, 0, 0, 1, 1, 1};
    std::vector<float> hid(static_cast<size_t>(6 * info.hidden_size));
    ok_or_die(oslo_model_forward(enc, eids, nullptr, etypes, 2, 3, OSLO_MODEL_OUTPUT_HIDDEN,
                                 hid.data(), hid.size()),
              "encoder forward");
    oslo_train_step_result er;
    named(oslo_model_train_step(enc, opt, eids, nullptr, nullptr, 2, 3, &er),
          OSLO_ERR_NOT_SUPPORTED, "causal", "the causal-LM loss of an encoder");
    named(
        oslo_model_backward(enc, opt, eids, nullptr, etypes, 2, 3, hid.data(), hid.size() - 1, &er),
        OSLO_ERR_SHAPE, "grad_hidden", "a hidden-state gradient of the wrong size");
    named(oslo_model_backward(enc, opt, eids, nullptr, etypes, 2, 3, nullptr, hid.size(), &er),
          OSLO_ERR_INVALID_ARGUMENT, "grad_hidden", "NULL grad_hidden");
    // d/dh of sum(h^2)/2 is h: one step lowers the hidden states' norm.
    auto sq = [](const std::vector<float>& v) {
      double a = 0;
      for (float x : v) a += static_cast<double>(x) * x;
      return a;
    };
    const double before_sq = sq(hid);
    ok_or_die(
        oslo_model_backward(enc, opt, eids, nullptr, etypes, 2, 3, hid.data(), hid.size(), &er),
        "encoder backward");
    check(er.stepped == 1 && er.step == 1 && er.loss == 0, "encoder: one optimizer step");
    ok_or_die(oslo_model_forward(enc, eids, nullptr, etypes, 2, 3, OSLO_MODEL_OUTPUT_HIDDEN,
                                 hid.data(), hid.size()),
              "encoder forward after");
    check(sq(hid) < before_sq, "encoder: the step lowered sum(h^2)");
    oslo_optimizer_destroy(opt);
    opt = nullptr;
    oslo_model_destroy(enc);
  }
  named(oslo_optimizer_step(nullptr, nullptr), OSLO_ERR_INVALID_ARGUMENT, "optimizer",
        "step(NULL)");
  named(oslo_optimizer_zero_grad(nullptr), OSLO_ERR_INVALID_ARGUMENT, "optimizer",
        "zero_grad(NULL)");
  named(oslo_model_set_activation_checkpointing(nullptr, 1), OSLO_ERR_INVALID_ARGUMENT, "model",
        "set_activation_checkpointing(NULL)");

  // Without an optimizer: gradients accumulate, nothing steps; then an
  // explicit step at the constant lr.
  const std::vector<int64_t> ids = {5, 17, 42, 9, 3, 77, 12, 8}, mask = {1, 1, 1, 1, 1, 1, 0, 0};
  const std::vector<float> before = logits(m, ids, {1, 1, 1, 1, 1, 1, 1, 1}, 1, 8);
  oslo_train_step_result r;
  named(oslo_model_train_step(m, nullptr, nullptr, nullptr, mask.data(), 2, 4, &r),
        OSLO_ERR_INVALID_ARGUMENT, "ids", "NULL ids");
  named(oslo_model_train_step(m, nullptr, ids.data(), nullptr, nullptr, 0, 4, &r),
        OSLO_ERR_INVALID_ARGUMENT, "batch", "batch 0");
  const std::vector<int64_t> none(8, -100);
  named(oslo_model_train_step(m, nullptr, ids.data(), none.data(), nullptr, 2, 4, &r),
        OSLO_ERR_INVALID_ARGUMENT, "no label", "every label ignored");
  ok_or_die(oslo_model_train_step(m, nullptr, ids.data(), nullptr, mask.data(), 2, 4, &r),
            "train_step without optimizer");
  const double loss0 = r.loss;
  check(r.stepped == 0 && std::isfinite(loss0) && loss0 > 0, "no optimizer: a loss, no step");
  check(logits(m, ids, {1, 1, 1, 1, 1, 1, 1, 1}, 1, 8) == before, "no optimizer: weights kept");
  ok_or_die(oslo_optimizer_create(m, &o, &o_train, &opt), "optimizer_create");
  named(oslo_model_train_step(other, opt, ids.data(), nullptr, mask.data(), 2, 4, &r),
        OSLO_ERR_INVALID_ARGUMENT, "another model", "an optimizer over another model");
  // The explicit labels equal to the default (ids, -100 under the mask).
  const std::vector<int64_t> labels = {5, 17, 42, 9, 3, 77, -100, -100};
  ok_or_die(oslo_model_train_step(m, nullptr, ids.data(), labels.data(), mask.data(), 2, 4, &r),
            "train_step with labels");
  check(r.loss == loss0, "labels NULL = ids with -100 under the mask");
  ok_or_die(oslo_optimizer_step(opt, &r), "optimizer_step");
  check(r.stepped == 1 && r.skipped == 0 && r.step == 1 && r.lr == 1e-3 && std::isnan(r.grad_norm),
        "explicit step: stepped at lr 1e-3, no norm asked for");
  check(logits(m, ids, {1, 1, 1, 1, 1, 1, 1, 1}, 1, 8) != before, "the step changed the weights");
  // Activation checkpointing: the same loss (and, core tests show, the same
  // gradients bitwise).
  ok_or_die(oslo_model_train_step(m, nullptr, ids.data(), nullptr, mask.data(), 2, 4, &r), "plain");
  const double plain = r.loss;
  ok_or_die(oslo_model_set_activation_checkpointing(m, 1), "checkpointing on");
  ok_or_die(oslo_model_train_step(m, nullptr, ids.data(), nullptr, mask.data(), 2, 4, &r),
            "checkpointed");
  check(r.loss == plain, "activation checkpointing: the same loss");
  ok_or_die(oslo_optimizer_zero_grad(opt), "zero_grad");
  oslo_optimizer_destroy(opt);

  // Loss scaling by a power of two changes no bit of the update (scaled
  // gradients are unscaled exactly), and the scale grows after
  // growth_interval finite steps.
  oslo_model* fresh = load(ctx, fix);
  oslo_optimizer_options s = o;
  oslo_train_options s_train = o_train;
  s.max_grad_norm = 1.0;
  oslo_optimizer* plain_opt = nullptr;
  ok_or_die(oslo_optimizer_create(other, &s, &s_train, &plain_opt), "unscaled optimizer");
  s.loss_scaling = 1;
  s.init_scale = 1024;
  s.growth_interval = 2;
  ok_or_die(oslo_optimizer_create(fresh, &s, &s_train, &opt), "scaled optimizer");
  oslo_train_step_result q;
  for (int i = 0; i < 2; ++i) {
    ok_or_die(oslo_model_train_step(fresh, opt, ids.data(), nullptr, mask.data(), 2, 4, &r),
              "scaled step");
    ok_or_die(oslo_model_train_step(other, plain_opt, ids.data(), nullptr, mask.data(), 2, 4, &q),
              "unscaled step");
    check(r.loss == q.loss && r.grad_norm == q.grad_norm && q.loss_scale == 1,
          "step " + std::to_string(i + 1) + ": scaled loss and norm equal the unscaled ones");
  }
  check(r.skipped == 0 && r.step == 2 && r.loss_scale == 2048,
        "two finite steps at growth_interval 2: the scale doubles");
  check(logits(fresh, ids, {1, 1, 1, 1, 1, 1, 1, 1}, 1, 8) ==
            logits(other, ids, {1, 1, 1, 1, 1, 1, 1, 1}, 1, 8),
        "loss scaling 1024: the weights equal the unscaled run's bitwise");
  oslo_optimizer_destroy(opt);
  oslo_optimizer_destroy(plain_opt);
  oslo_model_destroy(fresh);
  // Training checkpoints through the C ABI: refused while a micro-batch is
  // pending; a resume from the saved folder (a fresh model loaded from it,
  // a fresh optimizer) continues bitwise; the train state comes back; a
  // plain model folder is not a training checkpoint.
  {
    const std::string dir = "/tmp/oslo-capi-train-ckpt-" + std::to_string(getpid());
    oslo_model* a = load(ctx, fix);
    oslo_optimizer_options c = o;
    oslo_train_options c_train = o_train;
    c_train.grad_accum_steps = 2;
    c.max_grad_norm = 1.0;
    oslo_optimizer* oa = nullptr;
    ok_or_die(oslo_optimizer_create(a, &c, &c_train, &oa), "optimizer a");
    const oslo_train_state st = {7, 1, 42};
    ok_or_die(oslo_model_train_step(a, oa, ids.data(), nullptr, mask.data(), 2, 4, &r), "a 1");
    named(oslo_checkpoint_save(oa, dir.c_str(), &st), OSLO_ERR_INVALID_ARGUMENT, "micro-batch",
          "save with a micro-batch pending");
    ok_or_die(oslo_model_train_step(a, oa, ids.data(), nullptr, mask.data(), 2, 4, &r), "a 2");
    named(oslo_checkpoint_save(nullptr, dir.c_str(), &st), OSLO_ERR_INVALID_ARGUMENT, "optimizer",
          "save(NULL)");
    named(oslo_checkpoint_save(oa, nullptr, &st), OSLO_ERR_INVALID_ARGUMENT, "dir",
          "save to NULL dir");
    ok_or_die(oslo_checkpoint_save(oa, dir.c_str(), &st), "checkpoint_save");
    std::vector<double> want;
    for (int i = 0; i < 4; ++i) {
      ok_or_die(oslo_model_train_step(a, oa, ids.data(), nullptr, mask.data(), 2, 4, &r), "a");
      want.push_back(r.loss);
    }
    oslo_model* b = load(ctx, dir);
    oslo_optimizer* ob = nullptr;
    ok_or_die(oslo_optimizer_create(b, &c, &c_train, &ob), "optimizer b");
    oslo_train_state got = {0, 0, 0};
    named(oslo_checkpoint_load(ob, fix.c_str(), &got), OSLO_ERR_FORMAT, "not a training checkpoint",
          "load of a plain model folder");
    ok_or_die(oslo_checkpoint_load(ob, dir.c_str(), &got), "checkpoint_load");
    check(got.seed == 7 && got.epoch == 1 && got.data_position == 42, "train state restored");
    bool same = true;
    for (int i = 0; i < 4; ++i) {
      ok_or_die(oslo_model_train_step(b, ob, ids.data(), nullptr, mask.data(), 2, 4, &r), "b");
      same = same && r.loss == want[static_cast<size_t>(i)];
    }
    check(same && r.step == 3, "resumed from the C checkpoint: losses bitwise equal");
    oslo_optimizer_destroy(ob);
    oslo_optimizer_destroy(oa);
    oslo_model_destroy(b);
    oslo_model_destroy(a);
    if (std::system(("rm -rf '" + dir + "'").c_str()) != 0) check(false, "cleanup");
  }
  oslo_optimizer_destroy(nullptr);
  oslo_model_destroy(other);
  oslo_model_destroy(m);
  oslo_context_destroy(ctx);
  return g_fail ? 1 : 0;
}

// Every *_destroy in any order (include/oslo.h, "Lifetimes"): an optimizer
// destroyed after its model, and after its model and context, at ZeRO 0 and
// 3 (~Trainer writes into the model: it used to write into freed memory);
// after a failed train step (the order a binding's traceback leaves); a
// model, layer, parameter set and tensor that outlive their context keep
// working until destroyed; a tokenizer needs no context. Run under ASan by
// tools/test.sh.
int run_destroy_order(const std::string& fix) {
  const std::vector<int64_t> ids = {5, 9, 14, 3, 7, 1, 2, 8};
  std::vector<int64_t> bad = ids;
  bad[2] = 1 << 30;
  oslo_train_step_result r;
  for (int zero : {0, 3}) {
    const std::string z = "ZeRO-" + std::to_string(zero) + ": ";
    oslo_optimizer_options o;
    oslo_train_options o_train;
    ok_or_die(oslo_optimizer_options_init(&o, OSLO_OPTIMIZER_OPTIONS_VERSION), "options_init");
    ok_or_die(oslo_train_options_init(&o_train, OSLO_TRAIN_OPTIONS_VERSION), "options_init");
    o.kind = OSLO_OPTIMIZER_SGD;
    o.lr = 0.1;
    o_train.zero_stage = zero;
    // 1. The optimizer after its model: it keeps the model it trains.
    oslo_context* ctx = make_context();
    oslo_model* m = load(ctx, fix);
    oslo_optimizer* opt = nullptr;
    ok_or_die(oslo_optimizer_create(m, &o, &o_train, &opt), "optimizer_create");
    ok_or_die(oslo_model_train_step(m, opt, ids.data(), nullptr, nullptr, 2, 4, &r), "train_step");
    const double first = r.loss;
    oslo_model_destroy(m);
    check(oslo_optimizer_zero_grad(opt) == OSLO_OK && oslo_optimizer_step(opt, &r) == OSLO_OK &&
              r.stepped == 1 && r.step == 2,
          z + "the optimizer steps after oslo_model_destroy");
    oslo_optimizer_destroy(opt);
    oslo_context_destroy(ctx);
    // 2. A failed train step, then the context, the model and the optimizer
    //    destroyed in that order (what a traceback holding the optimizer left).
    ctx = make_context();
    m = load(ctx, fix);
    ok_or_die(oslo_optimizer_create(m, &o, &o_train, &opt), "optimizer_create");
    const oslo_status st = oslo_model_train_step(m, opt, ids.data(), bad.data(), nullptr, 2, 4, &r);
    const std::string msg = st == OSLO_OK ? "" : oslo_last_error();
    check(
        st == OSLO_ERR_INVALID_ARGUMENT && msg.find("outside the vocabulary") != std::string::npos,
        z + "a label outside the vocabulary: " + msg);
    oslo_context_destroy(ctx);
    ok_or_die(oslo_model_train_step(m, opt, ids.data(), nullptr, nullptr, 2, 4, &r),
              "train_step after oslo_context_destroy");
    check(r.stepped == 1 && r.step == 1 && std::fabs(r.loss - first) < 1e-4,
          z + "the model trains after oslo_context_destroy (loss " + std::to_string(r.loss) + ", " +
              std::to_string(first) + " before)");
    oslo_model_destroy(m);
    oslo_optimizer_destroy(opt);
    // 3. The optimizer after the context, then the model last.
    ctx = make_context();
    m = load(ctx, fix);
    ok_or_die(oslo_optimizer_create(m, &o, &o_train, &opt), "optimizer_create");
    oslo_context_destroy(ctx);
    oslo_optimizer_destroy(opt);
    oslo_model_destroy(m);
  }
  // 4. Layers, parameter sets, tensors and a tokenizer after their context.
  oslo_context* ctx = make_context();
  oslo_parallel_linear_options lo;
  ok_or_die(oslo_parallel_linear_options_init(&lo, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION), "init");
  lo.in_features = 4;
  lo.out_features = 6;
  oslo_parallel_linear* lin = nullptr;
  ok_or_die(oslo_parallel_linear_create(ctx, &lo, &lin), "linear_create");
  oslo_param_set* set = nullptr;
  ok_or_die(oslo_param_set_create(ctx, &set), "param_set_create");
  ok_or_die(oslo_param_set_add_linear(set, "fc", lin), "add_linear");
  const int64_t xs[2] = {3, 4}, ys[2] = {3, 6};
  oslo_tensor *x = nullptr, *y = nullptr;
  ok_or_die(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 2, xs, &x), "tensor_create");
  ok_or_die(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 2, ys, &y), "tensor_create");
  oslo_tokenizer* tok = nullptr;
  ok_or_die(oslo_tokenizer_load(fix.c_str(), &tok), "tokenizer_load");
  oslo_model* m = load(ctx, fix);
  oslo_context_destroy(ctx);
  double norm = -1;
  std::vector<float> logits(8 * 515);
  size_t vocab = 0;
  const bool works =
      oslo_parallel_linear_forward(lin, x, y) == OSLO_OK &&
      oslo_param_set_clip_grad_norm(set, 1.0, 2.0, &norm) == OSLO_OK && norm == 0 &&
      oslo_model_forward(m, ids.data(), nullptr, nullptr, 2, 4, OSLO_MODEL_OUTPUT_LOGITS,
                         logits.data(), logits.size()) == OSLO_OK &&
      oslo_tokenizer_vocab_size(tok, &vocab) == OSLO_OK && vocab > 0;
  check(works, std::string("a layer, a parameter set, a model and a tokenizer work after "
                           "oslo_context_destroy") +
                   (works ? "" : std::string(": ") + oslo_last_error()));
  oslo_parallel_linear_destroy(lin);  // before the set that holds its tensors
  oslo_tensor_destroy(x);
  oslo_param_set_destroy(set);
  oslo_tensor_destroy(y);
  oslo_model_destroy(m);
  oslo_tokenizer_destroy(tok);
  return g_fail ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: see the comment at the top of test_model_capi.cpp\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "generate") return run_generate(argv[2]);
  if (mode == "save" && argc == 4) return run_save(argv[2], argv[3]);
  if (mode == "same" && argc == 4) return run_same(argv[2], argv[3]);
  if (mode == "embed" && argc == 4) return run_embed(argv[2], argv[3]);
  if (mode == "merge" && argc == 5) return run_merge(argv[2], argv[3], argv[4]);
  if (mode == "reshard" && argc == 5) return run_reshard(argv[2], argv[3], std::atoi(argv[4]));
  if (mode == "errors" && argc == 4) return run_errors(argv[2], argv[3]);
  if (mode == "train_errors" && argc == 4) return run_train_errors(argv[2], argv[3]);
  if (mode == "destroy_order") return run_destroy_order(argv[2]);
  std::fprintf(stderr, "bad arguments\n");
  return 2;
}
