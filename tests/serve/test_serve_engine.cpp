// The serving engine on real models (tests/models/fixtures): every
// request's tokens equal generate() on that request alone (greedy, seeded
// sampling, repetition penalty), whatever the block size, the step budget
// (chunked prompts), the pool's size (waiting, preemption), the arrival
// times and the prefix sharing; cancels, stop strings with the model's
// tokenizer, adders on several threads, and bad requests.
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "core/common/dtype.hpp"
#include "core/context/config.hpp"
#include "core/context/context.hpp"
#include "core/generate/generate.hpp"
#include "core/model/model.hpp"
#include "core/serve/engine.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "tests/common/temp_dir.hpp"
#include "tests/serve/serve_common.hpp"

using namespace oslo;
using namespace oslo::serve;

namespace {

std::string g_fixtures;

struct Loaded {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
};

Loaded load(const std::string& name) {
  Loaded l;
  l.ctx = std::make_unique<Context>(Config::parse("{\"num_threads\": 1}"));
  l.model = Model::load(*l.ctx, g_fixtures + "/" + name, ModelLoadOptions{});
  l.tok = Tokenizer::load(g_fixtures + "/" + name);
  return l;
}

std::vector<int64_t> alone(Model& m, const std::vector<int64_t>& prompt, const GenerateOptions& o) {
  return generate(m.inference(), {prompt}, o).tokens[0];
}

// Runs every request to its end; returns each one's tokens and finish.
struct Outcome {
  std::vector<int64_t> tokens;
  std::string text;
  Finish finish = Finish::kNone;
};
void collect(std::map<int64_t, Outcome>& out, const std::vector<serve::Event>& events) {
  for (const serve::Event& ev : events) {
    Outcome& o = out[ev.id];
    assert_int_equal(o.finish, Finish::kNone);  // nothing after the last event
    o.tokens.insert(o.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    o.text += ev.text;
    o.finish = ev.finish;
  }
}
std::map<int64_t, Outcome> drain(Engine& e, std::map<int64_t, Outcome> out = {}) {
  for (int guard = 0; guard < 100000 && !e.idle(); ++guard) collect(out, e.step());
  assert_true(e.idle());
  return out;
}

std::vector<int64_t> random_prompt(std::mt19937_64& rng, int64_t vocab, size_t len,
                                   const std::vector<int64_t>& stem = {}) {
  std::vector<int64_t> p = stem;
  while (p.size() < len) p.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab)));
  return p;
}

void equal_to_generate(const char* fixture, oslo_dtype kv = OSLO_DTYPE_F32) {
  Loaded l = load(fixture);
  Model& m = *l.model;
  const int64_t V = m.config().vocab_size;
  std::mt19937_64 rng(42);
  const std::vector<int64_t> system = random_prompt(rng, V, 11);
  struct Case {
    std::vector<int64_t> prompt;
    GenerateOptions o;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 10; ++i) {
    Case c;
    c.prompt = random_prompt(rng, V, 1 + rng() % 20, i % 2 ? system : std::vector<int64_t>{});
    c.o.max_new_tokens = 1 + static_cast<int64_t>(rng() % 12);
    if (i % 3 == 1) {
      c.o.do_sample = true;
      c.o.seed = 100 + i;
      c.o.temperature = 0.8;
      c.o.top_k = 20;
      c.o.top_p = 0.9;
    }
    if (i % 4 == 2) c.o.repetition_penalty = 1.3;
    c.o.kv_dtype = kv;
    if (i == 5) c.o.eos_token_ids = {alone(m, c.prompt, c.o)[2]};  // stops at its 3rd token
    cases.push_back(c);
  }
  std::vector<std::vector<int64_t>> want;
  for (const Case& c : cases) want.push_back(alone(m, c.prompt, c.o));
  // Block sizes, budgets and pools: one block per token, chunked prompts,
  // a pool that holds about two requests (waiting and preemption).
  EngineOptions variants[] = {
      {0, 1 << 20, 16, 64, 512, true},
      {0, 1 << 20, 1, 3, 5, true},
      {24, 0, 2, 8, 7, true},
      {12, 0, 4, 8, 64, false},
  };
  int vi = 0;
  for (EngineOptions& eo : variants) {
    eo.kv_dtype = kv;
    Engine e(m.inference(), m.stack(), eo);
    std::map<int64_t, size_t> which;
    std::map<int64_t, Outcome> out;
    // Half now, the rest one by one between steps.
    for (size_t i = 0; i < cases.size(); ++i) {
      if (i >= cases.size() / 2) collect(out, e.step());
      which[e.add(Request{cases[i].prompt, cases[i].o, {}})] = i;
    }
    out = drain(e, out);
    assert_int_equal(out.size(), cases.size());
    for (const auto& kv : out) {
      const size_t i = which.at(kv.first);
      if (kv.second.tokens != want[i])
        fail_msg("%s, engine variant %d: request %zu's tokens differ from generate's", fixture, vi,
                 i);
      const bool eos = !cases[i].o.eos_token_ids.empty() &&
                       kv.second.tokens.back() == cases[i].o.eos_token_ids[0];
      assert_int_equal(kv.second.finish, eos ? Finish::kEos : Finish::kLength);
    }
    const EngineStats st = e.stats();
    assert_int_equal(st.blocks_used, 0);
    assert_int_equal(st.running + st.waiting, 0);
    print_message(
        "%s (kv %s) variant %d: %lld steps, %lld prompt tokens computed, %lld generated, "
        "prefix hits %lld/%lld, %lld blocks of %lld\n",
        fixture, dtype_name(kv), vi, (long long)st.steps, (long long)st.prompt_tokens,
        (long long)st.generated_tokens, (long long)st.prefix_hits, (long long)st.prefix_queries,
        (long long)st.blocks_total, (long long)st.block_size);
    ++vi;
  }
}

void test_equal_gpt2(void**) {
  equal_to_generate("gpt2-tiny");
}
void test_equal_llama_gqa(void**) {
  equal_to_generate("llama-tiny-gqa");
}
// The int8 KV cache: the engine's paged int8 blocks (paged_attention_kv8,
// read as stored) against generate()'s contiguous int8 cache
// (attention_kv8): the same bytes, so the same tokens; and an int8 engine holds
// 4 x 16 / (16 + 4) = 3.2x the blocks of an f32 one in the same memory.
void test_equal_int8(void**) {
  equal_to_generate("gpt2-tiny", OSLO_DTYPE_I8);
  equal_to_generate("llama-tiny-gqa", OSLO_DTYPE_I8);
  Loaded l = load("llama-tiny-gqa");
  Model& m = *l.model;
  EngineOptions f32{0, 1 << 20, 16, 8, 64, true}, i8 = f32;
  i8.kv_dtype = OSLO_DTYPE_I8;
  const int64_t nf = Engine(m.inference(), m.stack(), f32).stats().blocks_total;
  const int64_t ni = Engine(m.inference(), m.stack(), i8).stats().blocks_total;
  if (ni * 10 < nf * 31 || ni * 10 > nf * 33)
    fail_msg("1 MiB holds %lld f32 blocks and %lld int8 ones (want 3.2x)", (long long)nf,
             (long long)ni);
  // A request for an int8 cache on an f32 engine is refused, named.
  Engine e(m.inference(), m.stack(), f32);
  GenerateOptions o;
  o.kv_dtype = OSLO_DTYPE_I8;
  try {
    e.add(Request{{1, 2, 3}, o, {}});
    fail_msg("an int8 request on an f32 engine was accepted");
  } catch (const Error& err) {
    assert_int_equal(err.status(), OSLO_ERR_INVALID_ARGUMENT);
    assert_non_null(std::strstr(err.what(), "kv_cache_dtype"));
  }
  EngineOptions bad = f32;
  bad.kv_dtype = OSLO_DTYPE_BF16;
  try {
    Engine(m.inference(), m.stack(), bad);
    fail_msg("a bf16 KV cache was accepted");
  } catch (const Error& err) {
    assert_int_equal(err.status(), OSLO_ERR_DTYPE);
  }
}

void test_cancel(void**) {
  Loaded l = load("gpt2-tiny");
  Model& m = *l.model;
  Engine e(m.inference(), m.stack(), EngineOptions{0, 1 << 20, 4, 8, 64, true});
  GenerateOptions o;
  o.max_new_tokens = 30;
  const int64_t a = e.add(Request{{1, 2, 3}, o, {}});
  const int64_t b = e.add(Request{{4, 5, 6, 7}, o, {}});
  std::map<int64_t, Outcome> out;
  for (int i = 0; i < 4; ++i) collect(out, e.step());
  assert_true(e.stats().blocks_used > 0);
  assert_true(e.cancel(a));
  assert_false(e.cancel(a));  // once
  assert_false(e.cancel(999));
  const auto events = e.step();
  bool seen = false;
  for (const serve::Event& ev : events)
    if (ev.id == a) {
      assert_int_equal(ev.finish, Finish::kCancelled);
      assert_true(ev.tokens.empty());
      seen = true;
    }
  assert_true(seen);
  collect(out, events);
  assert_false(e.cancel(a));  // gone
  out = drain(e, out);
  assert_int_equal(out[a].tokens.size(), 4);
  assert_true(out[b].tokens == alone(m, {4, 5, 6, 7}, o));
  assert_int_equal(e.stats().blocks_used, 0);
  // A request cancelled before its first step.
  const int64_t c = e.add(Request{{9}, o, {}});
  assert_true(e.cancel(c));
  const auto ev = e.step();
  assert_int_equal(ev.size(), 1);
  assert_int_equal(ev[0].finish, Finish::kCancelled);
  assert_true(e.idle());
}

void test_stop_strings(void**) {
  Loaded l = load("gpt2-tiny");
  Model& m = *l.model;
  Tokenizer& tok = *l.tok;
  auto decode = [&tok](const int64_t* ids, size_t n) { return tok.decode(ids, n, true); };
  GenerateOptions o;
  o.max_new_tokens = 24;
  const std::vector<int64_t> prompt = tok.encode("The quick brown fox", true);
  const std::vector<int64_t> want = alone(m, prompt, o);
  const std::string full = tok.decode(want.data(), want.size(), true);
  // Without stops: the streamed text is the whole decode.
  Engine e(m.inference(), m.stack(), EngineOptions{0, 1 << 20, 4, 8, 64, true}, decode);
  e.add(Request{prompt, o, {}});
  auto out = drain(e);
  assert_string_equal(out.begin()->second.text.c_str(), full.c_str());
  // A stop string across two tokens' texts: the text ends before it.
  const std::string t0 = tok.decode(want.data(), 5, true);
  const std::string t1 = tok.decode(want.data(), 6, true);
  assert_true(t1.size() > t0.size() + 0 && t0.size() >= 2);
  const std::string stop = full.substr(t0.size() - 2, (t1.size() - t0.size()) + 2);
  const size_t at = full.find(stop);
  e.add(Request{prompt, o, {"\x01never", stop}});
  out = drain(e);
  const Outcome& r = out.begin()->second;
  assert_int_equal(r.finish, Finish::kStop);
  assert_string_equal(r.text.c_str(), full.substr(0, at).c_str());
  print_message("stop '%s' after %zu tokens: '%s'\n", stop.c_str(), r.tokens.size(),
                r.text.c_str());
}

void test_concurrent_adders(void**) {
  Loaded l = load("gpt2-tiny");
  Model& m = *l.model;
  Engine e(m.inference(), m.stack(), EngineOptions{40, 0, 4, 6, 32, true});
  std::mutex mu;
  std::map<int64_t, std::pair<std::vector<int64_t>, GenerateOptions>> asked;
  std::atomic<int> adders_done{0};
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t));
      for (int i = 0; i < 8; ++i) {
        GenerateOptions o;
        o.max_new_tokens = 1 + static_cast<int64_t>(rng() % 8);
        auto p = random_prompt(rng, m.config().vocab_size, 1 + rng() % 10);
        const int64_t id = e.add(Request{p, o, {}});
        std::lock_guard<std::mutex> lock(mu);
        asked[id] = {p, o};
        std::this_thread::yield();
      }
      ++adders_done;
    });
  std::map<int64_t, Outcome> out;
  while (adders_done < 4 || !e.idle()) collect(out, e.step());
  for (auto& x : th) x.join();
  assert_int_equal(out.size(), 32);
  for (const auto& kv : asked)
    assert_true(out.at(kv.first).tokens == alone(m, kv.second.first, kv.second.second));
  assert_int_equal(e.stats().blocks_used, 0);
}

void test_bad_requests(void**) {
  Loaded l = load("gpt2-tiny");
  Model& m = *l.model;
  Engine e(m.inference(), m.stack(), EngineOptions{8, 0, 4, 8, 64, true});
  GenerateOptions o;
  expect_error([&] { e.add(Request{{}, o, {}}); }, OSLO_ERR_INVALID_ARGUMENT);
  expect_error([&] { e.add(Request{{m.config().vocab_size}, o, {}}); }, OSLO_ERR_INVALID_ARGUMENT);
  expect_error([&] { e.add(Request{{-1}, o, {}}); }, OSLO_ERR_INVALID_ARGUMENT);
  expect_error([&] { e.add(Request{{1}, o, {"stop"}}); }, OSLO_ERR_INVALID_ARGUMENT);  // no decode
  GenerateOptions beams = o;
  beams.num_beams = 2;
  expect_error([&] { e.add(Request{{1}, beams, {}}); }, OSLO_ERR_INVALID_ARGUMENT);
  GenerateOptions huge = o;
  huge.max_new_tokens = 1000;  // beyond the pool's 32 positions
  expect_error([&] { e.add(Request{{1}, huge, {}}); }, OSLO_ERR_INVALID_ARGUMENT);
  GenerateOptions bad = o;
  bad.temperature = -1;
  bad.do_sample = true;
  expect_error([&] { e.add(Request{{1}, bad, {}}); }, OSLO_ERR_INVALID_ARGUMENT);
  expect_error(
      [&] {
        Engine(m.inference(), m.stack(), EngineOptions{0, 10, 4, 8, 64, true});
      },
      OSLO_ERR_INVALID_ARGUMENT);  // 10 bytes hold no block
  assert_true(e.idle());
}

// Several ranks as threads: the leader adds requests (half before the
// first step, the rest between steps), every rank steps until the leader
// shuts the engine down; every rank sees the same events, and each
// request's tokens are generate()'s for it alone at the same layout.
// With `quit_after` >= 0, rank 1 stops stepping after that many steps: the
// leader's next step must fail with a named error (no hang).
void ranks(const char* fixture, int tp, int pp, int quit_after = -1) {
  const int world = tp * pp;
  const std::string store = oslo_test::temp_dir("oslo-serve");
  std::mt19937_64 rng(9);
  struct Case {
    std::vector<int64_t> prompt;
    GenerateOptions o;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 6; ++i) {
    Case c;
    c.prompt = random_prompt(rng, 100, 1 + rng() % 12);
    c.o.max_new_tokens = 2 + static_cast<int64_t>(rng() % 8);
    if (i % 2) {
      c.o.do_sample = true;
      c.o.seed = static_cast<uint64_t>(i);
      c.o.top_k = 10;
    }
    cases.push_back(c);
  }
  std::vector<std::map<int64_t, Outcome>> seen(static_cast<size_t>(world));
  std::vector<std::vector<std::vector<int64_t>>> want(static_cast<size_t>(world));
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> th;
  for (int r = 0; r < world; ++r)
    th.emplace_back([&, r] {
      try {
        const std::string cfg =
            str("{\"rank\": ", r, ", \"world_size\": ", world, ", \"tensor_parallel_size\": ", tp,
                ", \"pipeline_parallel_size\": ", pp, ", \"init_method\": \"file://", store,
                "/rdv\", \"timeout_seconds\": ", quit_after >= 0 ? 3 : 60, ", \"num_threads\": 1}");
        Context ctx(Config::parse(cfg.c_str()));
        auto m = Model::load(ctx, g_fixtures + "/" + fixture, ModelLoadOptions{});
        for (const Case& c : cases)
          want[static_cast<size_t>(r)].push_back(
              generate(m->inference(), {c.prompt}, c.o, &ctx.control(OSLO_GROUP_TENSOR)).tokens[0]);
        Engine e(m->inference(), m->stack(), EngineOptions{0, 1 << 20, 4, 4, 9, true});
        auto& out = seen[static_cast<size_t>(r)];
        if (e.leader()) {
          for (size_t i = 0; i < cases.size(); ++i) {
            if (i >= cases.size() / 2) collect(out, e.step());
            e.add(Request{cases[i].prompt, cases[i].o, {}});
          }
          while (!e.idle()) collect(out, e.step());
          e.shutdown();
          collect(out, e.step());
        } else {
          expect_error(
              [&] {
                e.add(Request{{1}, GenerateOptions{}, {}});
              },
              OSLO_ERR_INVALID_ARGUMENT);
          expect_error([&] { e.cancel(1); }, OSLO_ERR_INVALID_ARGUMENT);
          for (int steps = 0; !e.stopped(); ++steps) {
            if (r == 1 && steps == quit_after) return;  // this rank is gone
            collect(out, e.step());
          }
        }
        assert_true(e.stopped());
        assert_true(e.step().empty());
      } catch (const std::exception& ex) {
        errors[static_cast<size_t>(r)] = ex.what();
      }
    });
  for (auto& t : th) t.join();
  oslo_test::remove_tree(store);
  if (quit_after >= 0) {
    // The leader (and whoever waited on it) failed with a named error.
    print_message("%dx%d, rank 1 gone after %d steps: rank 0 says: %s\n", tp, pp, quit_after,
                  errors[0].c_str());
    assert_false(errors[0].empty());
    return;
  }
  for (int r = 0; r < world; ++r)
    if (!errors[static_cast<size_t>(r)].empty())
      fail_msg("rank %d: %s", r, errors[static_cast<size_t>(r)].c_str());
  assert_int_equal(seen[0].size(), cases.size());
  for (int r = 1; r < world; ++r) {
    assert_int_equal(seen[static_cast<size_t>(r)].size(), cases.size());
    for (const auto& kv : seen[0])
      assert_true(seen[static_cast<size_t>(r)].at(kv.first).tokens == kv.second.tokens);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const Outcome& o = seen[0].at(static_cast<int64_t>(i + 1));
    if (o.tokens != want[0][i])
      fail_msg("%s tp %d pp %d: request %zu's tokens differ from generate's", fixture, tp, pp, i);
  }
  print_message("%s tp %d pp %d: %zu requests equal generate's on every rank\n", fixture, tp, pp,
                cases.size());
}

void test_ranks_tp2(void**) {
  ranks("gpt2-tiny", 2, 1);
}
void test_ranks_pp2(void**) {
  ranks("llama-tiny-gqa", 1, 2);
}
void test_rank_gone(void**) {
  ranks("gpt2-tiny", 2, 1, 3);
}

}  // namespace

std::vector<struct CMUnitTest> engine_tests(const std::string& fixtures) {
  g_fixtures = fixtures;
  return {
      cmocka_unit_test(test_equal_gpt2),   cmocka_unit_test(test_equal_llama_gqa),
      cmocka_unit_test(test_equal_int8),   cmocka_unit_test(test_cancel),
      cmocka_unit_test(test_stop_strings), cmocka_unit_test(test_concurrent_adders),
      cmocka_unit_test(test_bad_requests), cmocka_unit_test(test_ranks_tp2),
      cmocka_unit_test(test_ranks_pp2),    cmocka_unit_test(test_rank_gone),
  };
}
