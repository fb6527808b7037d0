// The cases of tests/bindings/cases.txt through the C ABI only (the serving
// engine's in c_engine_cases.cpp, the shared scaffolding in c_cases.hpp): the C column
// of the suite every binding repeats under the same names (python_<case>,
// java_<case>, go_<case>). Written in C++ for the test scaffolding (threads,
// the reference JSON); every oslo call is a plain C call.
//
//   c_cases CASE [--threads 2] [ARGS...]
//
// Without --threads the ranks are the processes of oslo-run; with it, two
// threads of this process, each with its own context (file:// rendezvous).
#include "c_cases.hpp"

#include <oslo.h>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace cases;  // NOLINT: the shared helpers (c_cases.hpp)

// ---------------------------------------------------------------- contexts

void context_from_config(int) {
  Context ctx = make_context(R"({"tensor_parallel_size": 1, "timeout_seconds": 60})");
  check(rank_of(ctx.get()) == 0 && size_of(ctx.get()) == 1, "rank 0 of 1");
  check(size_of(ctx.get(), OSLO_GROUP_TENSOR) == 1, "tensor group of 1");
  const char* backend = nullptr;
  const char* transport = nullptr;
  OK(oslo_context_backend(ctx.get(), OSLO_GROUP_TENSOR, &backend, &transport));
  check(std::string(backend) == "cpu", std::string("backend ") + backend);
}

void context_from_json_file(int) {
  const std::string path = temp_dir("cfg") + "/oslo.json";
  std::ofstream(path) << R"({"model_parallelism": {"tensor_parallel_size": 1},
                            "timeout_seconds": 60, "num_threads": 1})";
  Context ctx = make_context(path);
  check(rank_of(ctx.get()) == 0 && size_of(ctx.get(), OSLO_GROUP_TENSOR) == 1, "rank 0 of 1");
  fs::remove_all(fs::path(path).parent_path());
}

void context_bad_config(int) {
  oslo_context* c = nullptr;
  expect_error(oslo_context_create("{\"tensor_parallel_size\": 1", &c), OSLO_ERR_FORMAT, "JSON",
               "truncated JSON");
  expect_error(oslo_context_create(R"({"tensor_paralel_size": 2})", &c), OSLO_ERR_CONFIG,
               "tensor_paralel_size", "unknown key");
  expect_error(oslo_context_create(R"({"tensor_parallel_size": 0})", &c), OSLO_ERR_CONFIG,
               "tensor_parallel_size", "size 0");
  expect_error(oslo_context_create(R"({"timeout_seconds": "soon"})", &c), OSLO_ERR_CONFIG,
               "timeout_seconds", "ill-typed value");
  check(c == nullptr, "no context on failure");
}

// ---------------------------------------------------------------- collectives

void collectives(int threads) {
  const int world = world_of(threads);
  run_ranks(
      [&](const std::string& cfg) {
        Context ctx = make_context(cfg);
        const int r = rank_of(ctx.get()), n = size_of(ctx.get());
        check(n == world, "world size");
        std::vector<float> x(6);
        for (int i = 0; i < 6; ++i) x[i] = static_cast<float>(i + r);
        // all-reduce: sum and max, in place.
        Tensor t = make_tensor(ctx.get(), {6}, x);
        OK(oslo_context_all_reduce(ctx.get(), OSLO_GROUP_TENSOR, OSLO_REDUCE_SUM, t.get()));
        std::vector<float> s = to_host(t.get());
        for (int i = 0; i < 6; ++i) check(s[i] == n * i + n * (n - 1) / 2.0f, "sum");
        OK(oslo_tensor_copy_from_host(t.get(), x.data(), x.size() * sizeof(float)));
        OK(oslo_context_all_reduce(ctx.get(), OSLO_GROUP_TENSOR, OSLO_REDUCE_MAX, t.get()));
        s = to_host(t.get());
        for (int i = 0; i < 6; ++i) check(s[i] == static_cast<float>(i + n - 1), "max");
        // all-gather along dimension 0 in rank order.
        Tensor in = make_tensor(ctx.get(), {2, 3}, std::vector<float>(6, static_cast<float>(r)));
        Tensor out = make_tensor(ctx.get(), {2 * n, 3});
        OK(oslo_context_all_gather(ctx.get(), OSLO_GROUP_TENSOR, in.get(), out.get()));
        const std::vector<float> g = to_host(out.get());
        for (int k = 0; k < n; ++k)
          for (int i = 0; i < 6; ++i) check(g[k * 6 + i] == k, "gather order");
        // A wrong output shape is the same named error on every rank.
        Tensor bad = make_tensor(ctx.get(), {2 * n + 1, 3});
        expect_error(oslo_context_all_gather(ctx.get(), OSLO_GROUP_TENSOR, in.get(), bad.get()),
                     OSLO_ERR_SHAPE, "", "all-gather into the wrong shape");
        OK(oslo_context_barrier(ctx.get(), OSLO_GROUP_WORLD));
      },
      threads);
}

// ---------------------------------------------------------------- layers

// The MLP of mlp_tp2_forward_backward and clip_grad_norm: column (8 -> 16)
// then row (16 -> 8), both with bias, on 3 rows, with values from a fixed
// generator; the reference is the unsharded computation in double.
constexpr int kD = 8, kH = 16, kRows = 3;

struct MlpData {
  std::vector<float> w1, b1, w2, b2, x, gy;  // w1 [H, D], w2 [D, H], x [rows, D], gy [rows, D]
  // Unsharded f64 results.
  std::vector<double> mid, y, gmid, gx, gw1, gb1, gw2, gb2;
};

MlpData mlp_data() {
  MlpData m;
  uint64_t s = 0x9e3779b97f4a7c15ull;
  auto next = [&s] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int>((s >> 33) % 2001) - 1000) / 1000.0f;
  };
  auto fill = [&](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (auto& e : v) e = next();
  };
  fill(m.w1, kH * kD);
  fill(m.b1, kH);
  fill(m.w2, kD * kH);
  fill(m.b2, kD);
  fill(m.x, kRows * kD);
  fill(m.gy, kRows * kD);
  m.mid.assign(kRows * kH, 0);
  m.y.assign(kRows * kD, 0);
  for (int i = 0; i < kRows; ++i)
    for (int j = 0; j < kH; ++j) {
      double a = m.b1[j];
      for (int k = 0; k < kD; ++k) a += double(m.x[i * kD + k]) * m.w1[j * kD + k];
      m.mid[i * kH + j] = a;
    }
  for (int i = 0; i < kRows; ++i)
    for (int j = 0; j < kD; ++j) {
      double a = m.b2[j];
      for (int k = 0; k < kH; ++k) a += m.mid[i * kH + k] * m.w2[j * kH + k];
      m.y[i * kD + j] = a;
    }
  // Backward: gmid = gy w2, gx = gmid w1, gw = g^T input, gb = column sums.
  m.gmid.assign(kRows * kH, 0);
  m.gx.assign(kRows * kD, 0);
  m.gw1.assign(kH * kD, 0);
  m.gb1.assign(kH, 0);
  m.gw2.assign(kD * kH, 0);
  m.gb2.assign(kD, 0);
  for (int i = 0; i < kRows; ++i)
    for (int k = 0; k < kH; ++k)
      for (int j = 0; j < kD; ++j)
        m.gmid[i * kH + k] += double(m.gy[i * kD + j]) * m.w2[j * kH + k];
  for (int i = 0; i < kRows; ++i)
    for (int k = 0; k < kD; ++k)
      for (int j = 0; j < kH; ++j) m.gx[i * kD + k] += m.gmid[i * kH + j] * m.w1[j * kD + k];
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < kD; ++j) {
      m.gb2[j] += m.gy[i * kD + j];
      for (int k = 0; k < kH; ++k) m.gw2[j * kH + k] += m.gy[i * kD + j] * m.mid[i * kH + k];
    }
    for (int j = 0; j < kH; ++j) {
      m.gb1[j] += m.gmid[i * kH + j];
      for (int k = 0; k < kD; ++k) m.gw1[j * kD + k] += m.gmid[i * kH + j] * m.x[i * kD + k];
    }
  }
  return m;
}

// Largest |got - want| relative to max(1, |want|).
double max_err(const std::vector<float>& got, const std::vector<double>& want) {
  check(got.size() == want.size(),
        "sizes " + std::to_string(got.size()) + " vs " + std::to_string(want.size()));
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i)
    e = std::max(e, std::fabs(got[i] - want[i]) / std::max(1.0, std::fabs(want[i])));
  return e;
}

// Rows [r0, r0 + nr) of a row-major [rows, cols] matrix, or columns
// [c0, c0 + nc) when by_column.
std::vector<double> slice(const std::vector<double>& m, int cols, int from, int count,
                          bool by_column) {
  std::vector<double> out;
  const int rows = static_cast<int>(m.size()) / cols;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      const bool keep =
          by_column ? (j >= from && j < from + count) : (i >= from && i < from + count);
      if (keep) out.push_back(m[i * cols + j]);
    }
  return out;
}

struct Mlp {
  Linear fc1, fc2;
};

Mlp make_mlp(oslo_context* ctx, const MlpData& d) {
  Mlp m;
  oslo_parallel_linear_options o;
  OK(oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION));
  o.kind = OSLO_LINEAR_COLUMN;
  o.in_features = kD;
  o.out_features = kH;
  oslo_parallel_linear* l = nullptr;
  OK(oslo_parallel_linear_create(ctx, &o, &l));
  m.fc1.reset(l);
  o.kind = OSLO_LINEAR_ROW;
  o.in_features = kH;
  o.out_features = kD;
  OK(oslo_parallel_linear_create(ctx, &o, &l));
  m.fc2.reset(l);
  Tensor w1 = make_tensor(ctx, {kH, kD}, d.w1), b1 = make_tensor(ctx, {kH}, d.b1);
  Tensor w2 = make_tensor(ctx, {kD, kH}, d.w2), b2 = make_tensor(ctx, {kD}, d.b2);
  OK(oslo_parallel_linear_load_full(m.fc1.get(), w1.get(), b1.get()));
  OK(oslo_parallel_linear_load_full(m.fc2.get(), w2.get(), b2.get()));
  return m;
}

// Forward and backward of the MLP on this rank; checks every result against
// the f64 reference (this rank's shard where the result is sharded).
void mlp_forward_backward(oslo_context* ctx, const MlpData& d, Mlp& m) {
  const int r = rank_of(ctx, OSLO_GROUP_TENSOR), n = size_of(ctx, OSLO_GROUP_TENSOR);
  const int hl = kH / n;
  Tensor x = make_tensor(ctx, {kRows, kD}, d.x), mid = make_tensor(ctx, {kRows, hl});
  Tensor y = make_tensor(ctx, {kRows, kD}), gy = make_tensor(ctx, {kRows, kD}, d.gy);
  Tensor gmid = make_tensor(ctx, {kRows, hl}), gx = make_tensor(ctx, {kRows, kD});
  OK(oslo_parallel_linear_forward(m.fc1.get(), x.get(), mid.get()));
  OK(oslo_parallel_linear_forward(m.fc2.get(), mid.get(), y.get()));
  const double tol = 1e-4;
  check(max_err(to_host(mid.get()), slice(d.mid, kH, r * hl, hl, true)) < tol, "column output");
  double e = max_err(to_host(y.get()), d.y);
  check(e < tol, "MLP output vs f64: " + std::to_string(e));
  OK(oslo_parallel_linear_zero_grad(m.fc1.get()));
  OK(oslo_parallel_linear_zero_grad(m.fc2.get()));
  OK(oslo_parallel_linear_backward(m.fc2.get(), mid.get(), gy.get(), gmid.get()));
  OK(oslo_parallel_linear_backward(m.fc1.get(), x.get(), gmid.get(), gx.get()));
  check(max_err(to_host(gmid.get()), slice(d.gmid, kH, r * hl, hl, true)) < tol, "grad of mid");
  e = max_err(to_host(gx.get()), d.gx);
  check(e < tol, "input gradient vs f64: " + std::to_string(e));
  oslo_tensor *gw = nullptr, *gb = nullptr;
  OK(oslo_parallel_linear_params(m.fc1.get(), nullptr, nullptr, &gw, &gb));
  check(max_err(to_host(gw), slice(d.gw1, kD, r * hl, hl, false)) < tol, "column weight grad");
  check(max_err(to_host(gb), slice(d.gb1, 1, r * hl, hl, false)) < tol, "column bias grad");
  OK(oslo_parallel_linear_params(m.fc2.get(), nullptr, nullptr, &gw, &gb));
  check(max_err(to_host(gw), slice(d.gw2, kH, r * hl, hl, true)) < tol, "row weight grad");
  check(max_err(to_host(gb), d.gb2) < tol, "row bias grad");
}

void mlp_tp2_forward_backward(int threads) {
  check(world_of(threads) == 2, "runs on 2 ranks");
  const MlpData d = mlp_data();
  run_ranks(
      [&](const std::string& cfg) {
        Context ctx = make_context(cfg);
        Mlp m = make_mlp(ctx.get(), d);
        mlp_forward_backward(ctx.get(), d, m);
      },
      threads);
}

void clip_grad_norm(int threads) {
  check(world_of(threads) == 2, "runs on 2 ranks");
  const MlpData d = mlp_data();
  double want = 0;
  for (const auto* g : {&d.gw1, &d.gb1, &d.gw2, &d.gb2})
    for (double v : *g) want += v * v;
  want = std::sqrt(want);
  run_ranks(
      [&](const std::string& cfg) {
        Context ctx = make_context(cfg);
        Mlp m = make_mlp(ctx.get(), d);
        mlp_forward_backward(ctx.get(), d, m);
        oslo_param_set* s = nullptr;
        OK(oslo_param_set_create(ctx.get(), &s));
        ParamSet set(s);
        OK(oslo_param_set_add_linear(s, "fc1", m.fc1.get()));
        OK(oslo_param_set_add_linear(s, "fc2", m.fc2.get()));
        oslo_tensor *gw = nullptr, *gb = nullptr;
        OK(oslo_parallel_linear_params(m.fc1.get(), nullptr, nullptr, &gw, &gb));
        const std::vector<float> before = to_host(gw);
        // A max_norm above the norm leaves the gradients alone.
        double norm = 0;
        OK(oslo_param_set_clip_grad_norm(s, 10 * want, 2.0, &norm));
        check(std::fabs(norm - want) < 1e-4 * want,
              "global norm " + std::to_string(norm) + " vs unsharded " + std::to_string(want));
        check(to_host(gw) == before, "no clipping below max_norm");
        // max_norm = norm / 4 scales every gradient by max_norm / (norm + 1e-6).
        OK(oslo_param_set_clip_grad_norm(s, want / 4, 2.0, &norm));
        check(std::fabs(norm - want) < 1e-4 * want, "norm before clipping is returned");
        const double coef = (want / 4) / (want + 1e-6);
        const std::vector<float> after = to_host(gw);
        for (size_t i = 0; i < after.size(); ++i)
          check(std::fabs(after[i] - before[i] * coef) < 1e-5, "clipped gradient");
        OK(oslo_param_set_clip_grad_norm(s, 1e9, 2.0, &norm));
        check(std::fabs(norm - want / 4) < 1e-4 * want, "norm after clipping is max_norm");
      },
      threads);
}

// ---------------------------------------------------------------- abort

void abort_from_thread(int threads) {
  check(world_of(threads) == 2, "runs on 2 ranks");
  run_ranks(
      [&](const std::string& cfg) {
        std::string c = cfg;
        c.replace(c.find("\"timeout_seconds\": 120"), 22, "\"timeout_seconds\": 60");
        Context ctx = make_context(c);
        const int r = rank_of(ctx.get());
        OK(oslo_context_barrier(ctx.get(), OSLO_GROUP_WORLD));
        Tensor t = make_tensor(ctx.get(), {4}, std::vector<float>(4, 1));
        if (r == 0) {
          std::thread watchdog([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
            OK(oslo_context_abort(ctx.get()));
          });
          const auto t0 = std::chrono::steady_clock::now();
          const oslo_status st =
              oslo_context_all_reduce(ctx.get(), OSLO_GROUP_WORLD, OSLO_REDUCE_SUM, t.get());
          const std::string msg = oslo_last_error();
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          watchdog.join();
          check(st == OSLO_ERR_COMM, std::string("aborted all-reduce: ") + oslo_status_string(st));
          check(s < 30, "abort took " + std::to_string(s) + " s");
          std::printf("rank 0: aborted after %.2f s: %s\n", s, msg.c_str());
        } else {
          // Rank 1 never joins that all-reduce; the abort reaches it: its own
          // next collective fails too.
          std::this_thread::sleep_for(std::chrono::seconds(3));
          check(oslo_context_barrier(ctx.get(), OSLO_GROUP_WORLD) != OSLO_OK,
                "the peer's next collective fails after the abort");
        }
      },
      threads);
}

// ---------------------------------------------------------------- models

std::vector<float> logits_of(oslo_model* m, const std::vector<int64_t>& ids) {
  oslo_model_info info;
  OK(oslo_model_get_info(m, &info, nullptr));
  std::vector<float> out(ids.size() * static_cast<size_t>(info.vocab_size));
  OK(oslo_model_forward(m, ids.data(), nullptr, nullptr, 1, static_cast<int64_t>(ids.size()),
                        OSLO_MODEL_OUTPUT_LOGITS, out.data(), out.size()));
  return out;
}

void checkpoint_save_tp2_load_tp1(int, const std::string& fixture, const std::string& dir) {
  const std::vector<int64_t> ids = {52, 441, 221, 139, 1};
  run_ranks(
      [&](const std::string& cfg) {
        Context ctx = make_context(cfg);
        check(size_of(ctx.get(), OSLO_GROUP_TENSOR) == 2, "TP=2");
        // Rank 0 clears what an earlier run left; nobody writes before that.
        if (rank_of(ctx.get()) == 0) fs::remove_all(dir);
        OK(oslo_context_barrier(ctx.get(), OSLO_GROUP_WORLD));
        Model m = load_model(ctx.get(), fixture);
        const std::vector<float> tp2 = logits_of(m.get(), ids);
        OK(oslo_model_save(m.get(), dir.c_str()));
        OK(oslo_context_barrier(ctx.get(), OSLO_GROUP_WORLD));
        if (rank_of(ctx.get()) != 0) return;
        Context solo = make_context(solo_config());
        Model back = load_model(solo.get(), dir);
        Model orig = load_model(solo.get(), fixture);
        const std::vector<float> a = logits_of(back.get(), ids), b = logits_of(orig.get(), ids);
        check(a == b, "TP=1 from the TP=2 checkpoint: logits bitwise equal to the original's");
        double e = 0;
        for (size_t i = 0; i < a.size(); ++i) e = std::max(e, double(std::fabs(a[i] - tp2[i])));
        check(e < 1e-4, "TP=1 vs TP=2 logits: " + std::to_string(e));
        std::printf("saved at TP=2, loaded at TP=1: logits equal (max |TP1 - TP2| %.1e)\n", e);
      },
      0);
}

// examples/minilm/reference.txt: sentences and their embeddings.
void read_reference(const std::string& path, std::vector<std::string>& sent,
                    std::vector<float>& emb, int& dim) {
  std::ifstream f(path);
  check(f.good(), "cannot read " + path);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(f, line))
    if (line.empty() || line[0] != '#') lines.push_back(line);
  int n = 0;
  std::istringstream(lines.at(0)) >> n >> dim;
  for (int i = 0; i < n; ++i) {
    sent.push_back(lines.at(1 + 2 * i));
    std::istringstream v(lines.at(2 + 2 * i));
    for (int k = 0; k < dim; ++k) {
      float x = 0;
      v >> x;
      emb.push_back(x);
    }
  }
}

void model_bert_minilm_embed(int threads, const std::string& model_dir, const std::string& ref) {
  std::vector<std::string> sent;
  std::vector<float> want;
  int dim = 0;
  read_reference(ref, sent, want, dim);
  run_ranks(
      [&](const std::string& cfg) {
        Context ctx = make_context(cfg);
        check(size_of(ctx.get(), OSLO_GROUP_TENSOR) == 2, "TP=2");
        Model m = load_model(ctx.get(), model_dir);
        oslo_tokenizer* t = nullptr;
        OK(oslo_tokenizer_load(model_dir.c_str(), &t));
        Tokenizer tok(t);
        std::vector<std::vector<int64_t>> ids;
        size_t longest = 1;
        for (const auto& s : sent) {
          size_t count = 0;
          OK(oslo_tokenizer_encode(t, s.data(), s.size(), 1, nullptr, 0, &count));
          ids.emplace_back(count);
          OK(oslo_tokenizer_encode(t, s.data(), s.size(), 1, ids.back().data(), count, &count));
          longest = std::max(longest, count);
        }
        const size_t n = sent.size();
        std::vector<int64_t> flat(n * longest, 0), mask(n * longest, 0);
        for (size_t i = 0; i < n; ++i)
          for (size_t k = 0; k < ids[i].size(); ++k) {
            flat[i * longest + k] = ids[i][k];
            mask[i * longest + k] = 1;
          }
        std::vector<float> e(n * dim);
        OK(oslo_model_embed(m.get(), flat.data(), mask.data(), static_cast<int64_t>(n),
                            static_cast<int64_t>(longest), 1, e.data(), e.size()));
        double worst = 1;
        for (size_t i = 0; i < n; ++i) {
          double dot = 0, na = 0, nb = 0;
          for (int k = 0; k < dim; ++k) {
            const double a = e[i * dim + k], b = want[i * dim + k];
            dot += a * b;
            na += a * a;
            nb += b * b;
          }
          worst = std::min(worst, dot / std::sqrt(na * nb));
        }
        check(worst >= 0.9999, "min cosine vs reference.txt " + std::to_string(worst));
        if (rank_of(ctx.get()) == 0)
          std::printf("MiniLM at TP=2: %zu sentences, min cosine %.7f\n", n, worst);
      },
      threads);
}

void model_gpt2_generate(int threads, const std::string& fixture) {
  json ref;
  std::ifstream(fixture + "/reference.json") >> ref;
  const auto prompts = ref.at("prompts").get<std::vector<std::vector<int64_t>>>();
  const json& greedy = ref.at("greedy");
  run_ranks(
      [&](const std::string& cfg) {
        Context ctx = make_context(cfg);
        check(size_of(ctx.get(), OSLO_GROUP_TENSOR) == 2, "TP=2");
        Model m = load_model(ctx.get(), fixture);
        oslo_generate_options o;
        OK(oslo_generate_options_init(&o, OSLO_GENERATE_OPTIONS_VERSION));
        o.max_new_tokens = greedy.at("max_new_tokens").get<int64_t>();
        const int64_t eos = greedy.at("eos_token_id").get<int64_t>();
        o.eos_token_ids = &eos;
        o.num_eos_token_ids = 1;
        o.pad_token_id = greedy.at("pad_token_id").get<int64_t>();
        for (size_t i = 0; i < prompts.size(); ++i) {
          const auto& p = prompts[i];
          const int64_t len = static_cast<int64_t>(p.size());
          std::vector<int64_t> out(static_cast<size_t>(o.max_new_tokens));
          int64_t got = 0;
          OK(oslo_model_generate(m.get(), p.data(), &len, 1, &o, out.data(), &got, nullptr));
          out.resize(static_cast<size_t>(got));
          auto want =
              greedy.at("outputs").at("greedy_" + std::to_string(i)).get<std::vector<int64_t>>();
          want.erase(want.begin(), want.begin() + len);
          check(out == want, "greedy " + std::to_string(i) + " differs from transformers'");
        }
        if (rank_of(ctx.get()) == 0)
          std::printf("GPT-2 at TP=2: greedy tokens of %zu prompts equal transformers'\n",
                      prompts.size());
      },
      threads);
}

// The data of train_gpt2_tiny_tp2_w2 (tests/bindings/make_train_case.py).
struct TrainCase {
  int64_t batch = 0, seq = 0, accum = 0;
  std::vector<std::vector<int64_t>> ids, mask;
  std::vector<double> losses;
};

TrainCase read_train_case(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Failure("cannot read " + path);
  TrainCase c;
  std::string line, key;
  int64_t n = 0, steps = 0;
  std::getline(f, line);
  std::istringstream head(line);
  std::string k1, k2, k3, k4, k5;
  head >> k1 >> n >> k2 >> c.batch >> k3 >> c.seq >> k4 >> steps >> k5 >> c.accum;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    in >> key;
    if (key == "loss") {
      double v = 0;
      in >> v;
      c.losses.push_back(v);
      continue;
    }
    std::vector<int64_t> row;
    for (int64_t v; in >> v;) row.push_back(v);
    (key == "ids" ? c.ids : c.mask).push_back(row);
  }
  check(static_cast<int64_t>(c.ids.size()) == n && static_cast<int64_t>(c.mask.size()) == n &&
            static_cast<int64_t>(c.losses.size()) == steps && n == steps * c.accum,
        "train case file " + path + " is malformed");
  return c;
}

void train_gpt2_tiny(int threads, const std::string& fixture, const std::string& data) {
  const TrainCase c = read_train_case(data);
  run_ranks(
      [&](const std::string& cfg) {
        Context ctx = make_context(cfg);
        check(size_of(ctx.get(), OSLO_GROUP_TENSOR) == 2, "TP=2");
        Model m = load_model(ctx.get(), fixture);
        oslo_optimizer_options o;
        oslo_train_options o_train;
        OK(oslo_optimizer_options_init(&o, OSLO_OPTIMIZER_OPTIONS_VERSION));
        OK(oslo_train_options_init(&o_train, OSLO_TRAIN_OPTIONS_VERSION));
        o.kind = OSLO_OPTIMIZER_ADAMW;
        o.lr = 2e-3;
        o.weight_decay = 0.01;
        o.schedule = OSLO_LR_COSINE;
        o.warmup_steps = 3;
        o.total_steps = static_cast<int64_t>(c.losses.size());
        o_train.grad_accum_steps = c.accum;
        o.max_grad_norm = 1.0;
        oslo_optimizer* raw = nullptr;
        OK(oslo_optimizer_create(m.get(), &o, &o_train, &raw));
        Optimizer opt(raw);
        // A token outside the vocabulary: a named error on every rank.
        std::vector<int64_t> bad = c.ids[0];
        bad[3] = 1 << 30;
        oslo_train_step_result r;
        expect_error(oslo_model_train_step(m.get(), opt.get(), bad.data(), nullptr,
                                           c.mask[0].data(), c.batch, c.seq, &r),
                     OSLO_ERR_INVALID_ARGUMENT, "outside", "token outside the vocabulary");
        double worst = 0;
        for (size_t i = 0; i < c.ids.size(); ++i) {
          OK(oslo_model_train_step(m.get(), opt.get(), c.ids[i].data(), nullptr, c.mask[i].data(),
                                   c.batch, c.seq, &r));
          const bool last = (static_cast<int64_t>(i) + 1) % c.accum == 0;
          check(r.stepped == (last ? 1 : 0), "micro-batch " + std::to_string(i) + ": stepped");
          if (!last) continue;
          const size_t step = i / static_cast<size_t>(c.accum);
          const double want = c.losses[step];
          const double rel = std::fabs(r.mean_loss - want) / std::fabs(want);
          worst = std::max(worst, rel);
          check(rel <= 1e-4, "step " + std::to_string(step + 1) + ": loss " +
                                 std::to_string(r.mean_loss) + ", PyTorch " + std::to_string(want));
          check(r.skipped == 0 && r.step == static_cast<int64_t>(step) + 1, "step count");
        }
        if (rank_of(ctx.get()) == 0)
          std::printf("GPT-2 at TP=2: %zu steps, losses within %.2e of PyTorch's loop\n",
                      c.losses.size(), worst);
      },
      threads);
}

// A ZeRO-3 train step that fails (a label outside the vocabulary) on every
// rank (1 rank, or 2 data-parallel ranks): the expected error, then the
// context, the model and the optimizer destroyed in that order, the order a
// binding's traceback leaves (the optimizer used to write into its freed
// model: "double free detected" or SIGSEGV).
void train_error_in_flight(int threads, const std::string& fixture) {
  const int world = world_of(threads);
  run_ranks(
      [&](const std::string& text) {
        json cfg = json::parse(text);
        cfg["tensor_parallel_size"] = 1;  // data-parallel ranks: ZeRO-3 partitions over them
        Context ctx = make_context(cfg.dump());
        check(size_of(ctx.get(), OSLO_GROUP_DATA) == world, "DP=" + std::to_string(world));
        Model m = load_model(ctx.get(), fixture);
        oslo_optimizer_options o;
        oslo_train_options o_train;
        OK(oslo_optimizer_options_init(&o, OSLO_OPTIMIZER_OPTIONS_VERSION));
        OK(oslo_train_options_init(&o_train, OSLO_TRAIN_OPTIONS_VERSION));
        o.kind = OSLO_OPTIMIZER_SGD;
        o.lr = 0.1;
        o_train.zero_stage = 3;
        oslo_optimizer* raw = nullptr;
        OK(oslo_optimizer_create(m.get(), &o, &o_train, &raw));
        Optimizer opt(raw);
        const std::vector<int64_t> ids = {5, 9, 14, 3, 7, 1, 2, 8};
        std::vector<int64_t> bad = ids;
        bad[2] = 1000000000;
        oslo_train_step_result r;
        OK(oslo_model_train_step(m.get(), opt.get(), ids.data(), nullptr, nullptr, 2, 4, &r));
        check(r.stepped == 1, "a good ZeRO-3 step first");
        expect_error(
            oslo_model_train_step(m.get(), opt.get(), ids.data(), bad.data(), nullptr, 2, 4, &r),
            OSLO_ERR_INVALID_ARGUMENT, "outside the vocabulary", "a label outside the vocabulary");
        ctx.reset();
        m.reset();
        opt.reset();
      },
      threads);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  int threads = 0;
  auto it = std::find(args.begin(), args.end(), "--threads");
  if (it != args.end() && it + 1 != args.end()) {
    threads = std::atoi((it + 1)->c_str());
    args.erase(it, it + 2);
  }
  using Case = std::function<void(const std::vector<std::string>&)>;
  auto arg = [](const std::vector<std::string>& a, size_t i) {
    if (a.size() <= i) throw Failure("missing argument " + std::to_string(i));
    return a[i];
  };
  const std::map<std::string, Case> cases = {
      {"context_from_config", [&](auto&) { context_from_config(threads); }},
      {"context_from_json_file", [&](auto&) { context_from_json_file(threads); }},
      {"context_bad_config", [&](auto&) { context_bad_config(threads); }},
      {"collectives_w2", [&](auto&) { collectives(threads); }},
      {"mlp_tp2_forward_backward_w2", [&](auto&) { mlp_tp2_forward_backward(threads); }},
      {"clip_grad_norm_w2", [&](auto&) { clip_grad_norm(threads); }},
      {"abort_from_thread_w2", [&](auto&) { abort_from_thread(threads); }},
      {"checkpoint_save_tp2_load_tp1",
       [&](auto& a) { checkpoint_save_tp2_load_tp1(threads, arg(a, 1), arg(a, 2)); }},
      {"model_bert_minilm_embed_tp2_w2",
       [&](auto& a) { model_bert_minilm_embed(threads, arg(a, 1), arg(a, 2)); }},
      {"model_gpt2_generate_tp2_w2", [&](auto& a) { model_gpt2_generate(threads, arg(a, 1)); }},
      {"train_gpt2_tiny_tp2_w2", [&](auto& a) { train_gpt2_tiny(threads, arg(a, 1), arg(a, 2)); }},
      {"train_error_in_flight", [&](auto& a) { train_error_in_flight(threads, arg(a, 1)); }},
      {"train_error_in_flight_w2", [&](auto& a) { train_error_in_flight(threads, arg(a, 1)); }},
      {"engine_stream_gpt2", [&](auto& a) { engine_stream_gpt2(threads, arg(a, 1)); }},
      {"engine_cancel_and_errors", [&](auto& a) { engine_cancel_and_errors(threads, arg(a, 1)); }},
      {"engine_tp2_w2", [&](auto& a) { engine_tp2(threads, arg(a, 1)); }},
      {"chat_template_folder",
       [&](auto& a) { chat_template_case("folder", arg(a, 1), arg(a, 2)); }},
      {"chat_template_options",
       [&](auto& a) { chat_template_case("options", arg(a, 1), arg(a, 2)); }},
      {"chat_template_errors",
       [&](auto& a) { chat_template_case("errors", arg(a, 1), arg(a, 2)); }},
  };
  if (args.empty() || !cases.count(args[0])) {
    std::fprintf(stderr, "usage: c_cases CASE [--threads N] [ARGS...]; cases:");
    for (const auto& [name, fn] : cases) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  try {
    cases.at(args[0])(args);
  } catch (const std::exception& e) {
    const char* rank = std::getenv("RANK");
    std::fprintf(stderr, "FAIL %s%s%s: %s\n", args[0].c_str(), rank ? " rank " : "",
                 rank ? rank : "", e.what());
    return 1;
  }
  std::printf("%s: OK\n", args[0].c_str());
  return 0;
}
