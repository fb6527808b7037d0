// Tests of core/generate: against Hugging Face transformers' own generate and
// warpers (reference.json, made by make_reference.py), determinism and the
// distribution of sampling, option validation, error propagation, and rank
// agreement with two ranks as threads (a real Context, file:// rendezvous).
//
//   test_generate GROUP REFERENCE_JSON     GROUP: reference | sampling |
//                                          options | agreement
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/context/config.hpp"
#include "core/context/context.hpp"
#include "core/generate/generate.hpp"
#include "tests/common/temp_dir.hpp"
#include "tests/generate/toy_lm.hpp"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
}

using nlohmann::json;
using oslo::EarlyStopping;
using oslo::GenerateOptions;
using oslo::GenerateResult;

namespace {

json g_ref;
gen_test::Tables g_tables;
const float kInf = std::numeric_limits<float>::infinity();

void load_reference(const char* path) {
  std::ifstream f(path);
  if (!f) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(1);
  }
  g_ref = json::parse(f);
  g_tables.vocab = g_ref["vocab"];
  g_tables.period = g_ref["period"];
  for (auto& row : g_ref["A"])
    for (auto& x : row) g_tables.a.push_back(x.get<float>());
  for (auto& row : g_ref["B"])
    for (auto& x : row) g_tables.b.push_back(x.get<float>());
  for (auto& row : g_ref["C"])
    for (auto& x : row) g_tables.c.push_back(x.get<float>());
}

GenerateOptions options_of(const json& o) {
  GenerateOptions opt;
  opt.max_new_tokens = o.value("max_new_tokens", int64_t(20));
  opt.num_beams = o.value("num_beams", int64_t(1));
  opt.length_penalty = o.value("length_penalty", 1.0);
  const std::string es = o.value("early_stopping", std::string("false"));
  opt.early_stopping = es == "true"    ? EarlyStopping::kTrue
                       : es == "never" ? EarlyStopping::kNever
                                       : EarlyStopping::kFalse;
  opt.eos_token_ids = o.value("eos_token_ids", std::vector<int64_t>{});
  opt.pad_token_id = o.value("pad_token_id", int64_t(-1));
  opt.min_new_tokens = o.value("min_new_tokens", int64_t(0));
  opt.repetition_penalty = o.value("repetition_penalty", 1.0);
  return opt;
}

std::vector<std::vector<int64_t>> prompts_of(const json& p) {
  return p.get<std::vector<std::vector<int64_t>>>();
}

std::string show(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? " " : "") << v[i];
  return os.str() + "]";
}

template <typename Fn>
oslo_status status_of(Fn&& fn, std::string* msg = nullptr) {
  try {
    fn();
  } catch (const oslo::Error& e) {
    if (msg) *msg = e.what();
    return e.status();
  }
  return OSLO_OK;
}

// ------------------------------------------------------------- reference

// Every generation case of reference.json: tokens exactly, beam scores to
// float32 rounding.
void test_reference_generation(void**) {
  int failures = 0, cases = 0;
  for (const json& c : g_ref["cases"]) {
    ++cases;
    gen_test::ToyLM model(&g_tables);
    const GenerateOptions opt = options_of(c["options"]);
    const GenerateResult r = oslo::generate(model, prompts_of(c["prompts"]), opt, nullptr);
    const auto want = c["tokens"].get<std::vector<std::vector<int64_t>>>();
    bool ok = r.tokens == want;
    if (!ok)
      for (size_t i = 0; i < want.size(); ++i)
        fprintf(stderr, "%s prompt %zu: got %s want %s\n", c["name"].get<std::string>().c_str(), i,
                show(i < r.tokens.size() ? r.tokens[i] : std::vector<int64_t>{}).c_str(),
                show(want[i]).c_str());
    if (c.contains("scores")) {
      const auto ws = c["scores"].get<std::vector<double>>();
      if (r.sequence_scores.size() != ws.size()) {
        ok = false;
      } else {
        for (size_t i = 0; i < ws.size(); ++i)
          if (std::fabs(r.sequence_scores[i] - ws[i]) > 2e-6 * std::max(1.0, std::fabs(ws[i]))) {
            fprintf(stderr, "%s prompt %zu: score %.9g want %.9g\n",
                    c["name"].get<std::string>().c_str(), i, r.sequence_scores[i], ws[i]);
            ok = false;
          }
      }
    } else if (!r.sequence_scores.empty()) {
      ok = false;
    }
    if (!ok) ++failures;
  }
  fprintf(stderr, "%d of %d reference generation cases match\n", cases - failures, cases);
  assert_true(cases >= 60);
  assert_int_equal(failures, 0);
}

// HF's TemperatureLogitsWarper -> TopKLogitsWarper -> TopPLogitsWarper on
// random rows (ties and -inf included): the same surviving tokens, the same
// scores, the same probabilities.
void test_reference_filters(void**) {
  int failures = 0, n_cases = 0, ties = 0;
  for (const json& f : g_ref["filters"]) {
    ++n_cases;
    std::vector<float> s;
    for (const json& x : f["logits"]) s.push_back(x.is_null() ? -kInf : x.get<float>());
    const int64_t n = static_cast<int64_t>(s.size());
    oslo::warp_scores(s.data(), n, f["temperature"].get<double>(), f["top_k"].get<int64_t>(),
                      f["top_p"].get<double>());
    std::vector<int64_t> kept;
    for (int64_t i = 0; i < n; ++i)
      if (s[i] > -kInf) kept.push_back(i);
    const auto want = f["kept"].get<std::vector<int64_t>>();
    const auto ws = f["kept_scores"].get<std::vector<float>>();
    const auto wp = f["probs"].get<std::vector<double>>();
    std::vector<float> got_scores;
    std::vector<double> got_probs;
    double mx = -kInf, sum = 0;
    for (int64_t i : kept) mx = std::max<double>(mx, s[i]);
    for (int64_t i : kept) sum += std::exp(s[i] - mx);
    for (int64_t i : kept) {
      got_scores.push_back(s[i]);
      got_probs.push_back(std::exp(s[i] - mx) / sum);
    }
    bool ok = kept == want, tie = false;
    if (!ok && kept.size() == want.size()) {
      // torch.sort (unstable for more than 16 elements) orders tied scores
      // unpredictably, so top-p may drop another of several tied tokens than
      // oslo does (oslo drops the lower index first). Accept exactly that:
      // the same multiset of kept scores.
      std::vector<float> a = got_scores, b = ws;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      tie = ok = a == b;
      if (ok) {
        std::sort(got_probs.begin(), got_probs.end());
      }
    }
    std::vector<double> wps = wp;
    if (tie) std::sort(wps.begin(), wps.end());
    if (ok && !tie) ok = got_scores == ws;
    for (size_t j = 0; ok && j < got_probs.size(); ++j)
      if (std::fabs(got_probs[j] - wps[j]) > 1e-12) ok = false;
    ties += tie;
    if (!ok) {
      ++failures;
      fprintf(stderr, "filter case %d (n %lld, T %g, k %lld, p %g): kept %s want %s\n", n_cases - 1,
              (long long)n, f["temperature"].get<double>(), (long long)f["top_k"].get<int64_t>(),
              f["top_p"].get<double>(), show(kept).c_str(), show(want).c_str());
    }
  }
  fprintf(stderr, "%d reference filter cases differ only in which of tied tokens top-p drops\n",
          ties);
  fprintf(stderr, "%d of %d reference filter cases match\n", n_cases - failures, n_cases);
  assert_true(n_cases >= 400);
  assert_int_equal(failures, 0);
}

// What the model is fed: prompts left-padded with the pad token under mask
// 0; after a row's EOS, the pad token under mask 1 (as HF appends
// pad_token_id while other rows go on); the result stops at the EOS.
void test_feed_layout(void**) {
  GenerateOptions o;
  o.max_new_tokens = 6;
  o.eos_token_ids = {3};
  o.pad_token_id = 1;
  gen_test::ToyLM m(&g_tables);
  const GenerateResult r = oslo::generate(m, {{5, 9, 2}, {1, 2, 3, 4, 5, 6}}, o);
  // From the reference: prompt 0 emits [20, 3], prompt 1 goes on for 4 steps.
  assert_true(r.tokens[0] == std::vector<int64_t>({20, 3}));
  assert_int_equal(r.tokens[1].size(), 4);
  assert_int_equal(r.tokens[1].back(), 3);
  // Four steps ran: the prompt and three single tokens (the fourth token
  // finished every row, so no step fed it).
  assert_int_equal(m.appends, 4);
  assert_true(m.fed_tokens(0) == std::vector<int64_t>({1, 1, 1, 5, 9, 2, 20, 3, 1}));
  assert_true(m.fed_mask(0) == std::vector<uint8_t>({0, 0, 0, 1, 1, 1, 1, 1, 1}));
  assert_true(m.fed_mask(1) == std::vector<uint8_t>(9, 1));
  // Without a pad token, HF's default: the first EOS id.
  o.pad_token_id = -1;
  gen_test::ToyLM m2(&g_tables);
  oslo::generate(m2, {{5, 9, 2}, {1, 2, 3, 4, 5, 6}}, o);
  assert_true(m2.fed_tokens(0) == std::vector<int64_t>({3, 3, 3, 5, 9, 2, 20, 3, 3}));
}

// A cache that is not reordered gives other beams: the toy's history is what
// the logits come from, so the reference cases catch a wrong reorder.
void test_wrong_reorder_is_caught(void**) {
  int differ = 0, beam_cases = 0;
  for (const json& c : g_ref["cases"]) {
    const GenerateOptions opt = options_of(c["options"]);
    if (opt.num_beams < 2) continue;
    ++beam_cases;
    gen_test::ToyLM model(&g_tables);
    model.ignore_reorder = true;
    const GenerateResult r = oslo::generate(model, prompts_of(c["prompts"]), opt, nullptr);
    assert_true(model.reorders > 0 || opt.max_new_tokens == 1);
    if (r.tokens != c["tokens"].get<std::vector<std::vector<int64_t>>>()) ++differ;
  }
  fprintf(stderr, "a cache that ignores reorder fails %d of %d beam cases\n", differ, beam_cases);
  assert_true(differ > beam_cases / 2);
}

// ------------------------------------------------------------- sampling

// Known-answer vectors of Philox4x32-10 (Random123's kat_vectors).
void test_philox_known_answers(void**) {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  } kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t out[4];
    oslo::philox4x32_10(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i) assert_int_equal(out[i], k.out[i]);
  }
  // The documented uniform: 53 bits of words 0 and 1.
  const uint32_t ctr[4] = {5, 0, 9, 0}, key[2] = {123, 0};
  uint32_t out[4];
  oslo::philox4x32_10(ctr, key, out);
  const double u = oslo::sampling_uniform(123, 9, 5);
  assert_true(u ==
              static_cast<double>((uint64_t(out[1]) << 32 | out[0]) >> 11) / 9007199254740992.0);
  assert_true(u >= 0 && u < 1);
}

GenerateOptions sampling_options(uint64_t seed) {
  GenerateOptions o;
  o.do_sample = true;
  o.temperature = 0.8;
  o.top_k = 10;
  o.top_p = 0.9;
  o.seed = seed;
  o.max_new_tokens = 12;
  o.eos_token_ids = {3};
  o.pad_token_id = 0;
  return o;
}

// Same seed -> the same tokens; other seeds -> other tokens; a prompt's
// tokens depend on its index, not on the other prompts of the batch.
void test_sampling_determinism(void**) {
  const std::vector<std::vector<int64_t>> prompts = {{5, 9, 2}, {11}, {1, 2, 3, 4, 5, 6}};
  gen_test::ToyLM m1(&g_tables), m2(&g_tables);
  const GenerateResult a = oslo::generate(m1, prompts, sampling_options(42));
  const GenerateResult b = oslo::generate(m2, prompts, sampling_options(42));
  assert_true(a.tokens == b.tokens);
  assert_true(a.sequence_scores.empty());
  int differ = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    gen_test::ToyLM m(&g_tables);
    if (oslo::generate(m, prompts, sampling_options(seed)).tokens != a.tokens) ++differ;
  }
  assert_true(differ >= 7);
  // The first prompt alone (index 0 again): identical tokens.
  gen_test::ToyLM m3(&g_tables);
  const GenerateResult alone = oslo::generate(m3, {prompts[0]}, sampling_options(42));
  assert_true(alone.tokens[0] == a.tokens[0]);
  // Sampled rows stop at EOS like greedy ones.
  for (const auto& t : a.tokens)
    for (size_t i = 0; i + 1 < t.size(); ++i) assert_true(t[i] != 3);
  // top_k = 1 is greedy.
  GenerateOptions k1 = sampling_options(7);
  k1.top_k = 1;
  GenerateOptions greedy = sampling_options(7);
  greedy.do_sample = false;
  gen_test::ToyLM m4(&g_tables), m5(&g_tables);
  assert_true(oslo::generate(m4, prompts, k1).tokens == oslo::generate(m5, prompts, greedy).tokens);
}

// The first sampled token over 20000 draws (10 seeds x 2000 rows of the same
// prompt) follows the warped distribution: no token outside the kept set,
// and Pearson's chi-square below the 1e-6 tail of its distribution. The
// seeds are fixed, so the outcome is too.
void test_sampling_distribution(void**) {
  const std::vector<int64_t> prompt = {5, 9, 2};
  const int64_t V = g_tables.vocab;
  std::vector<float> s(V);
  gen_test::ToyLM::logits_for(g_tables, prompt, s.data());
  GenerateOptions o = sampling_options(0);
  o.max_new_tokens = 1;
  o.top_k = 12;
  o.top_p = 0.97;
  o.temperature = 1.3;
  oslo::warp_scores(s.data(), V, o.temperature, o.top_k, o.top_p);
  std::vector<double> p(V, 0.0);
  double mx = -kInf, sum = 0;
  for (float x : s) mx = std::max<double>(mx, x);
  for (int64_t v = 0; v < V; ++v) sum += s[v] > -kInf ? std::exp(s[v] - mx) : 0.0;
  int kept = 0;
  for (int64_t v = 0; v < V; ++v) {
    p[v] = s[v] > -kInf ? std::exp(s[v] - mx) / sum : 0.0;
    kept += p[v] > 0;
  }
  assert_true(kept >= 4);
  std::vector<int64_t> count(V, 0);
  const int rows = 2000, seeds = 10;
  for (int seed = 0; seed < seeds; ++seed) {
    o.seed = 1000 + seed;
    gen_test::ToyLM m(&g_tables);
    const GenerateResult r = oslo::generate(m, std::vector<std::vector<int64_t>>(rows, prompt), o);
    for (const auto& t : r.tokens) ++count[t.at(0)];
  }
  const double n = double(rows) * seeds;
  double chi2 = 0;
  for (int64_t v = 0; v < V; ++v) {
    if (p[v] == 0) {
      assert_int_equal(count[v], 0);
      continue;
    }
    const double e = n * p[v];
    chi2 += (count[v] - e) * (count[v] - e) / e;
  }
  // The chi-square 1e-6 upper tail with kept - 1 <= 11 degrees of freedom is
  // below 50.
  fprintf(stderr, "chi-square %.2f with %d degrees of freedom over %.0f draws\n", chi2, kept - 1,
          n);
  assert_true(chi2 < 50.0);
  // sample_from_scores itself, on a fixed distribution with a zero weight.
  const float row[5] = {0.f, -kInf, std::log(2.f), std::log(3.f), std::log(4.f)};
  std::vector<int64_t> c(5, 0);
  const int draws = 100000;
  for (int i = 0; i < draws; ++i)
    ++c[oslo::sample_from_scores(row, 5, oslo::sampling_uniform(99, 0, i))];
  assert_int_equal(c[1], 0);
  const double q[5] = {0.1, 0, 0.2, 0.3, 0.4};
  double chi = 0;
  for (int i = 0; i < 5; ++i)
    if (q[i] > 0) chi += (c[i] - draws * q[i]) * (c[i] - draws * q[i]) / (draws * q[i]);
  fprintf(stderr, "sample_from_scores: chi-square %.2f (3 degrees of freedom)\n", chi);
  assert_true(chi < 35.0);
  assert_int_equal(oslo::sample_from_scores(row, 5, 0.0), 0);
  assert_int_equal(oslo::sample_from_scores(row, 5, 0.9999999999), 4);
}

// ------------------------------------------------------------- options

void expect_bad(const GenerateOptions& o, oslo_status want, const char* needle,
                std::vector<std::vector<int64_t>> prompts = {{5, 9, 2}}) {
  gen_test::ToyLM m(&g_tables);
  std::string msg;
  const oslo_status st = status_of([&] { oslo::generate(m, prompts, o); }, &msg);
  if (st != want || msg.find(needle) == std::string::npos)
    fprintf(stderr, "expected status %d with '%s', got %d: %s\n", want, needle, st, msg.c_str());
  assert_int_equal(st, want);
  assert_true(msg.find(needle) != std::string::npos);
  assert_int_equal(m.appends, 0);  // refused before the model ran
}

void test_bad_options(void**) {
  GenerateOptions o;
  o.do_sample = true;
  o.temperature = 0;
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "temperature");
  o.temperature = -1;
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "temperature");
  o.temperature = NAN;
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "temperature");
  o = GenerateOptions{};
  o.temperature = 0;  // greedy ignores the temperature, as HF does
  gen_test::ToyLM ok_model(&g_tables);
  assert_int_equal(status_of([&] { oslo::generate(ok_model, {{1}}, o); }), OSLO_OK);
  for (double p : {0.0, -0.1, 1.5, double(NAN)}) {
    o = GenerateOptions{};
    o.do_sample = true;
    o.top_p = p;
    expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "top_p");
  }
  o = GenerateOptions{};
  o.top_k = -1;
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "top_k");
  o = GenerateOptions{};
  o.num_beams = 0;
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "num_beams");
  o = GenerateOptions{};
  o.num_beams = 2;
  o.do_sample = true;
  expect_bad(o, OSLO_ERR_NOT_SUPPORTED, "beam sampling");
  o = GenerateOptions{};
  o.max_new_tokens = 0;
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "max_new_tokens");
  o = GenerateOptions{};
  o.min_new_tokens = -2;
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "min_new_tokens");
  o = GenerateOptions{};
  o.eos_token_ids = {3, 40};
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "eos token id 40");
  o = GenerateOptions{};
  o.pad_token_id = 99;
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "pad_token_id");
  o = GenerateOptions{};
  o.repetition_penalty = 0;
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "repetition_penalty");
  o = GenerateOptions{};
  o.length_penalty = INFINITY;
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "length_penalty");
  o = GenerateOptions{};
  o.early_stopping = static_cast<EarlyStopping>(7);
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "early_stopping");
  o = GenerateOptions{};
  o.num_beams = 30;
  o.eos_token_ids = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                     21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 0};
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "candidates");
  o = GenerateOptions{};
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "prompt 1 is empty", {{1}, {}});
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "outside the vocabulary", {{1, 40}});
  expect_bad(o, OSLO_ERR_INVALID_ARGUMENT, "outside the vocabulary", {{-1}});
  // No prompts: nothing to do.
  gen_test::ToyLM m(&g_tables);
  assert_true(oslo::generate(m, {}, o).tokens.empty());
  assert_int_equal(m.appends, 0);
}

// The model's errors and bad outputs come out of generate as named errors.
void test_model_errors(void**) {
  for (int64_t beams : {1, 3}) {
    GenerateOptions o;
    o.num_beams = beams;
    o.max_new_tokens = 8;
    {
      gen_test::ToyLM m(&g_tables);
      m.throw_at_step = 3;
      std::string msg;
      assert_int_equal(status_of(
                           [&] {
                             oslo::generate(m, {{5, 9}, {1}}, o);
                           },
                           &msg),
                       OSLO_ERR_COMM);
      assert_true(msg.find("peer lost at step 3") != std::string::npos);
    }
    {
      gen_test::ToyLM m(&g_tables);
      m.nan_at_step = 2;
      std::string msg;
      assert_int_equal(status_of(
                           [&] {
                             oslo::generate(m, {{5, 9}}, o);
                           },
                           &msg),
                       OSLO_ERR_INVALID_ARGUMENT);
      assert_true(msg.find("NaN") != std::string::npos);
    }
    {
      gen_test::ToyLM m(&g_tables);
      m.wrong_size_at_step = 1;
      assert_int_equal(status_of([&] { oslo::generate(m, {{5, 9}}, o); }), OSLO_ERR_SHAPE);
    }
  }
  // Every score filtered away: nothing to sample.
  std::vector<float> s = {-kInf, -kInf};
  assert_int_equal(status_of([&] { oslo::sample_from_scores(s.data(), 2, 0.5); }),
                   OSLO_ERR_INVALID_ARGUMENT);
}

// ------------------------------------------------------------- agreement

struct RankOut {
  oslo_status status = OSLO_OK;
  std::string message;
  GenerateResult result;
};

// Runs fn(rank, tensor-group control messages) on two threads, each with its
// own Context (tp 2) joined through a file:// rendezvous.
std::vector<RankOut> two_ranks(const std::function<GenerateResult(int, oslo::Control&)>& fn) {
  const std::string dir = oslo_test::temp_dir("oslo-gen");
  std::vector<RankOut> out(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      try {
        oslo::Config c;
        c.rank = r;
        c.world_size = 2;
        c.local_rank = r;
        c.local_world_size = 2;
        c.tensor_parallel_size = 2;
        c.init_method = "file://" + dir + "/rendezvous";
        c.timeout_seconds = 60;
        c.num_threads = 1;
        oslo::Context ctx(c);
        out[r].result = fn(r, ctx.control(OSLO_GROUP_TENSOR));
      } catch (const oslo::Error& e) {
        out[r].status = e.status();
        out[r].message = e.what();
      } catch (const std::exception& e) {
        out[r].status = OSLO_ERR_INTERNAL;
        out[r].message = e.what();
      }
    });
  for (auto& t : th) t.join();
  oslo_test::remove_tree(dir);
  for (int r = 0; r < 2; ++r)
    if (out[r].status != OSLO_OK)
      fprintf(stderr, "rank %d: %d %s\n", r, out[r].status, out[r].message.c_str());
  return out;
}

// Rank 1's model returns other logits (its argmax differs every step); both
// ranks return rank 0's tokens, which are those of one rank alone.
void test_agreement_two_ranks(void**) {
  const std::vector<std::vector<int64_t>> prompts = {{5, 9, 2}, {11}, {1, 2, 3, 4, 5, 6}};
  std::vector<GenerateOptions> all;
  GenerateOptions greedy;
  greedy.max_new_tokens = 10;
  greedy.eos_token_ids = {3};
  all.push_back(greedy);
  all.push_back(sampling_options(5));
  GenerateOptions beam = greedy;
  beam.num_beams = 3;
  beam.length_penalty = 0.5;
  all.push_back(beam);
  for (const GenerateOptions& o : all) {
    gen_test::ToyLM solo(&g_tables);
    const GenerateResult want = oslo::generate(solo, prompts, o);
    gen_test::ToyLM lone_other(&g_tables);
    lone_other.perturb = 4.0;
    const GenerateResult other = oslo::generate(lone_other, prompts, o);
    assert_true(other.tokens != want.tokens);  // the perturbation matters
    std::vector<RankOut> out = two_ranks([&](int r, oslo::Control& comm) {
      gen_test::ToyLM m(&g_tables);
      if (r == 1) m.perturb = 4.0;
      return oslo::generate(m, prompts, o, &comm);
    });
    for (int r = 0; r < 2; ++r) {
      assert_int_equal(out[r].status, OSLO_OK);
      assert_true(out[r].result.tokens == want.tokens);
      assert_true(out[r].result.sequence_scores == want.sequence_scores);
    }
  }
}

// Failures reach every rank: rank 0's NaN logits (only rank 0 looks at
// logits) fail both ranks; rank 1's NaN logits are ignored; options that
// differ between ranks or are invalid on one rank fail both before any step.
void test_agreement_failures(void**) {
  const std::vector<std::vector<int64_t>> prompts = {{5, 9, 2}, {11}};
  for (int64_t beams : {1, 2}) {
    GenerateOptions o;
    o.max_new_tokens = 8;
    o.num_beams = beams;
    auto out = two_ranks([&](int r, oslo::Control& comm) {
      gen_test::ToyLM m(&g_tables);
      if (r == 0) m.nan_at_step = 2;
      return oslo::generate(m, prompts, o, &comm);
    });
    assert_int_equal(out[0].status, OSLO_ERR_INVALID_ARGUMENT);
    assert_true(out[0].message.find("NaN") != std::string::npos);
    assert_int_equal(out[1].status, OSLO_ERR_INVALID_ARGUMENT);
    assert_true(out[1].message.find("rank 0") != std::string::npos);

    out = two_ranks([&](int r, oslo::Control& comm) {
      gen_test::ToyLM m(&g_tables);
      if (r == 1) m.nan_at_step = 2;
      return oslo::generate(m, prompts, o, &comm);
    });
    assert_int_equal(out[0].status, OSLO_OK);
    assert_int_equal(out[1].status, OSLO_OK);
    assert_true(out[0].result.tokens == out[1].result.tokens);
  }
  auto out = two_ranks([&](int r, oslo::Control& comm) {
    GenerateOptions o;
    o.max_new_tokens = r == 0 ? 5 : 6;
    gen_test::ToyLM m(&g_tables);
    return oslo::generate(m, prompts, o, &comm);
  });
  for (int r = 0; r < 2; ++r) {
    assert_int_equal(out[r].status, OSLO_ERR_INVALID_ARGUMENT);
    assert_true(out[r].message.find("other prompts or options") != std::string::npos);
  }
  out = two_ranks([&](int r, oslo::Control& comm) {
    GenerateOptions o;
    if (r == 1) o.num_beams = 0;
    gen_test::ToyLM m(&g_tables);
    return oslo::generate(m, prompts, o, &comm);
  });
  assert_int_equal(out[0].status, OSLO_ERR_INVALID_ARGUMENT);
  assert_true(out[0].message.find("rank 1") != std::string::npos);
  assert_int_equal(out[1].status, OSLO_ERR_INVALID_ARGUMENT);
  assert_true(out[1].message.find("num_beams") != std::string::npos);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s reference|sampling|options|agreement REFERENCE_JSON\n", argv[0]);
    return 2;
  }
  load_reference(argv[2]);
  const std::string group = argv[1];
  if (group == "reference") {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_generation),
        cmocka_unit_test(test_reference_filters),
        cmocka_unit_test(test_feed_layout),
        cmocka_unit_test(test_wrong_reorder_is_caught),
    };
    return cmocka_run_group_tests_name("generate_reference", tests, nullptr, nullptr);
  }
  if (group == "sampling") {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_sampling_determinism),
        cmocka_unit_test(test_sampling_distribution),
    };
    return cmocka_run_group_tests_name("generate_sampling", tests, nullptr, nullptr);
  }
  if (group == "options") {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_model_errors),
    };
    return cmocka_run_group_tests_name("generate_options", tests, nullptr, nullptr);
  }
  if (group == "agreement") {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agreement_two_ranks),
        cmocka_unit_test(test_agreement_failures),
    };
    return cmocka_run_group_tests_name("generate_agreement", tests, nullptr, nullptr);
  }
  fprintf(stderr, "unknown group %s\n", group.c_str());
  return 2;
}
