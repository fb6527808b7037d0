// The step scheduler in a simulated engine. The "model" is a toy: the K/V of
// position p of a sequence is a hash of its tokens [0, p] (what attention
// over a causal prefix depends on), and the next token is a function of the
// last position's hash. The simulation runs each plan as an engine would
// (block copies, then every chunk writes its positions' K/V into its
// blocks, then reads every earlier position through its block table), so a
// wrong block table, a shared block written under a reader, a block freed
// while in use or a prefix found with the wrong content shows up as a read
// that does not match. Every request's tokens must equal its run alone.
#include <algorithm>
#include <map>
#include <random>

#include "core/serve/scheduler.hpp"
#include "tests/serve/serve_common.hpp"

using oslo::serve::BlockPool;
using oslo::serve::Scheduler;
using oslo::serve::SchedulerLimits;
using oslo::serve::Sequence;
using oslo::serve::StepPlan;

namespace {

constexpr int64_t kVocab = 50, kEos = 0;

uint64_t mix(uint64_t h, int64_t t) {
  h ^= static_cast<uint64_t>(t) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// K/V of every position: hash of tokens [0, p].
std::vector<uint64_t> prefix_hashes(const std::vector<int64_t>& t, size_t n) {
  std::vector<uint64_t> h(n);
  uint64_t x = 1;
  for (size_t p = 0; p < n; ++p) h[p] = x = mix(x, t[p]);
  return h;
}

int64_t next_token(uint64_t h) {
  return static_cast<int64_t>((h >> 17) % kVocab);
}

// The request run alone: generate until max_len or EOS.
std::vector<int64_t> alone(std::vector<int64_t> t, int64_t max_len) {
  while (static_cast<int64_t>(t.size()) < max_len) {
    const int64_t x = next_token(prefix_hashes(t, t.size()).back());
    t.push_back(x);
    if (x == kEos) break;
  }
  return t;
}

struct Engine {
  BlockPool pool;
  Scheduler sched;
  std::vector<uint64_t> kv;  // [blocks, block_size]
  std::map<int64_t, std::vector<int64_t>> done;
  int64_t prompt_tokens_computed = 0, steps = 0, copies = 0, preempted = 0;

  Engine(int64_t blocks, int64_t bs, SchedulerLimits lim, bool caching = true)
      : pool(blocks, bs, caching), sched(pool, lim), kv(static_cast<size_t>(blocks * bs), 0) {}

  uint64_t& slot(const Sequence& s, int64_t p) {
    const int64_t bs = pool.block_size();
    assert_true(p / bs < static_cast<int64_t>(s.blocks.size()));
    return kv[static_cast<size_t>(s.blocks[static_cast<size_t>(p / bs)] * bs + p % bs)];
  }

  int64_t e_ref(const Sequence& s, int64_t p) {
    return pool.ref_count(s.blocks[static_cast<size_t>(p / pool.block_size())]);
  }

  // One step; returns false when nothing was scheduled.
  bool step() {
    const int64_t bs = pool.block_size();
    StepPlan plan = sched.schedule();
    ++steps;
    assert_true(plan.tokens() <= sched.limits().max_step_tokens);
    assert_true(static_cast<int64_t>(sched.running()) <= sched.limits().max_seqs);
    copies += static_cast<int64_t>(plan.copies.size());
    preempted += static_cast<int64_t>(plan.preempted.size());
    for (const auto& c : plan.copies) {
      assert_true(pool.ref_count(c.dst) == 1);
      std::copy_n(kv.begin() + c.src * bs, bs, kv.begin() + c.dst * bs);
    }
    // Writes, as a layer appends its chunks' K and V ...
    for (const auto& c : plan.chunks) {
      const Sequence& s = *c.seq;
      assert_true(s.running);
      assert_int_equal(c.start, s.computed);
      const auto h = prefix_hashes(s.tokens, static_cast<size_t>(c.start + c.n));
      for (int64_t p = c.start; p < c.start + c.n; ++p) {
        // Nobody else reads a block while it is written.
        if (e_ref(s, p) != 1)
          fail_msg("request %lld writes position %lld into a block with %lld users",
                   (long long)s.id, (long long)p, (long long)e_ref(s, p));
        slot(s, p) = h[static_cast<size_t>(p)];
      }
      if (c.start < s.prompt_len)
        prompt_tokens_computed += std::min(c.start + c.n, s.prompt_len) - c.start;
    }
    // ... then reads, as its attention reads the whole prefix.
    for (const auto& c : plan.chunks) {
      const Sequence& s = *c.seq;
      const auto h = prefix_hashes(s.tokens, static_cast<size_t>(c.start + c.n));
      for (int64_t p = 0; p < c.start + c.n; ++p)
        if (slot(s, p) != h[static_cast<size_t>(p)])
          fail_msg("request %lld reads a wrong K/V at position %lld", (long long)s.id,
                   (long long)p);
    }
    sched.commit(plan);
    for (const auto& c : plan.chunks) {
      if (!c.sample) continue;
      Sequence& s = *c.seq;
      const auto h = prefix_hashes(s.tokens, s.tokens.size());
      const int64_t x = next_token(h.back());
      sched.append(s, x);
      if (x == kEos || static_cast<int64_t>(s.tokens.size()) == s.max_len) {
        done[s.id] = s.tokens;
        sched.remove(s.id);
      }
    }
    pool.check();
    return !plan.chunks.empty();
  }

  // KV memory: every sequence holds exactly the blocks of what it computed.
  void check_memory(const std::vector<int64_t>& ids) {
    const int64_t bs = pool.block_size();
    int64_t used = 0;
    for (int64_t id : ids) {
      const Sequence* s = sched.find(id);
      if (!s) continue;
      assert_int_equal(static_cast<int64_t>(s->blocks.size()), (s->computed + bs - 1) / bs);
      used += static_cast<int64_t>(s->blocks.size());
    }
    // Shared blocks count once in the pool, once per user here.
    assert_true(pool.used_blocks() <= used);
  }
};

void test_alone_equals_batched(void**) {
  std::mt19937_64 rng(7);
  int64_t copies = 0, preempted = 0;
  for (int round = 0; round < 12; ++round) {
    const int64_t bs = 1 + static_cast<int64_t>(rng() % 5);
    const int64_t blocks = 6 + static_cast<int64_t>(rng() % 40);
    SchedulerLimits lim;
    lim.max_seqs = 1 + static_cast<int64_t>(rng() % 6);
    lim.max_step_tokens = 1 + static_cast<int64_t>(rng() % 24);
    Engine e(blocks, bs, lim, round % 3 != 2);
    // Prompts from a few shared beginnings (system prompts), so that the
    // prefix index has something to find.
    std::vector<std::vector<int64_t>> stems(3);
    for (auto& s : stems)
      for (int i = 0; i < 2 + static_cast<int>(rng() % 12); ++i)
        s.push_back(1 + static_cast<int64_t>(rng() % (kVocab - 1)));
    std::map<int64_t, std::pair<std::vector<int64_t>, int64_t>> asked;
    std::vector<int64_t> live;
    int64_t next_id = 0, cancelled = 0;
    const int64_t total = 40;
    const int64_t capacity = blocks * bs;
    for (int guard = 0; guard < 20000; ++guard) {
      // Arrivals.
      for (int a = static_cast<int>(rng() % 3); a > 0 && next_id < total; --a) {
        std::vector<int64_t> prompt = stems[rng() % stems.size()];
        for (int i = static_cast<int>(rng() % 10); i > 0; --i)
          prompt.push_back(1 + static_cast<int64_t>(rng() % (kVocab - 1)));
        int64_t max_new = 1 + static_cast<int64_t>(rng() % 20);
        const int64_t len = static_cast<int64_t>(prompt.size());
        if (len + max_new - 1 > capacity) {
          // Too long for the pool: refused by name, nothing kept.
          expect_error([&] { e.sched.add(next_id, prompt, max_new); }, OSLO_ERR_INVALID_ARGUMENT);
          assert_null(e.sched.find(next_id));
          max_new = 1;
          if (len > capacity) {
            ++next_id;
            continue;
          }
        }
        asked[next_id] = {prompt, len + max_new};
        e.sched.add(next_id, prompt, max_new);
        live.push_back(next_id++);
      }
      // A cancel now and then (running or waiting).
      if (!live.empty() && rng() % 50 == 0) {
        const size_t i = rng() % live.size();
        if (e.sched.remove(live[i])) {
          asked.erase(live[i]);
          ++cancelled;
        }
      }
      live.erase(std::remove_if(live.begin(), live.end(),
                                [&](int64_t id) { return e.sched.find(id) == nullptr; }),
                 live.end());
      const bool any = e.step();
      e.check_memory(live);
      if (!any && e.sched.waiting() == 0 && e.sched.running() == 0 && next_id == total) break;
    }
    print_message(
        "round %d: %lld blocks of %lld, %lld steps, %zu requests done, %lld cancelled, "
        "%lld/%lld prefix hits, %lld copies, %lld preemptions\n",
        round, (long long)blocks, (long long)bs, (long long)e.steps, e.done.size(),
        (long long)cancelled, (long long)e.pool.hits(), (long long)e.pool.queries(),
        (long long)e.copies, (long long)e.preempted);
    copies += e.copies;
    preempted += e.preempted;
    assert_int_equal(e.sched.waiting() + e.sched.running(), 0);  // no request starves
    assert_int_equal(static_cast<int64_t>(e.done.size()), static_cast<int64_t>(asked.size()));
    for (const auto& kv : asked) {
      auto it = e.done.find(kv.first);
      assert_true(it != e.done.end());
      if (it->second != alone(kv.second.first, kv.second.second))
        fail_msg("round %d: request %lld's tokens differ from its run alone", round,
                 (long long)kv.first);
    }
    assert_int_equal(e.pool.used_blocks(), 0);  // everything released
    e.pool.check();
  }
  // The rounds went through copy on write and preemption.
  assert_true(copies > 0);
  assert_true(preempted > 0);
}

void test_preemption(void**) {
  // Two long requests in a pool that holds one of them: the younger is
  // preempted, recomputes later, and both still produce their tokens.
  SchedulerLimits lim;
  lim.max_seqs = 2;
  lim.max_step_tokens = 64;
  Engine e(6, 4, lim, false);
  std::vector<int64_t> a{1, 2, 3, 4, 5}, b{6, 7, 8, 9, 10};
  e.sched.add(1, a, 19);
  e.sched.add(2, b, 19);
  int64_t preempted = 0;
  for (int i = 0; i < 500 && (e.sched.running() || e.sched.waiting()); ++i) {
    e.step();
    if (auto* s = e.sched.find(2)) preempted = std::max(preempted, s->preemptions);
  }
  print_message("request 2 preempted %lld times\n", (long long)preempted);
  assert_true(preempted >= 1);
  assert_true(e.done[1] == alone(a, 24));
  assert_true(e.done[2] == alone(b, 24));
}

void test_prefix_reuse(void**) {
  // 32 requests sharing a 400-token system prompt arrive together: the
  // prompt work with the prefix index is at most 1/8 of without.
  std::vector<int64_t> system;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 400; ++i) system.push_back(1 + static_cast<int64_t>(rng() % (kVocab - 1)));
  int64_t work[2] = {0, 0};
  std::map<int64_t, std::vector<int64_t>> out[2];
  for (int caching = 0; caching < 2; ++caching) {
    SchedulerLimits lim;
    lim.max_seqs = 64;
    lim.max_step_tokens = 512;
    Engine e(2048, 16, lim, caching == 1);
    std::mt19937_64 r2(5);
    for (int64_t id = 0; id < 32; ++id) {
      std::vector<int64_t> p = system;
      for (int i = 0; i < 16; ++i) p.push_back(1 + static_cast<int64_t>(r2() % (kVocab - 1)));
      e.sched.add(id, p, 8);
    }
    while (e.sched.running() || e.sched.waiting()) e.step();
    work[caching] = e.prompt_tokens_computed;
    out[caching] = e.done;
  }
  print_message("prompt tokens computed: %lld with the prefix index, %lld without\n",
                (long long)work[1], (long long)work[0]);
  assert_int_equal(work[0], 32 * 416);
  if (work[1] * 8 > work[0])
    fail_msg("prompt tokens computed with prefix reuse %lld, without %lld: more than 1/8",
             (long long)work[1], (long long)work[0]);
  // The system prompt (25 full blocks) is computed once: the first request
  // computes its 416 tokens; the others, held back while those blocks are
  // computed, then take them from the index and compute their own 16.
  if (work[1] != 416 + 31 * 16)
    fail_msg("prompt tokens computed with prefix reuse %lld, the ideal %d", (long long)work[1],
             416 + 31 * 16);
  assert_true(out[0] == out[1]);
}

void test_bad_requests(void**) {
  BlockPool pool(4, 4);
  expect_error([&] { Scheduler(pool, SchedulerLimits{0, 8}); }, OSLO_ERR_INVALID_ARGUMENT);
  expect_error([&] { Scheduler(pool, SchedulerLimits{8, 0}); }, OSLO_ERR_INVALID_ARGUMENT);
  Scheduler s(pool, SchedulerLimits{});
  expect_error([&] { s.add(1, {}, 4); }, OSLO_ERR_INVALID_ARGUMENT);
  expect_error([&] { s.add(1, {1}, 0); }, OSLO_ERR_INVALID_ARGUMENT);
  expect_error([&] { s.add(1, {1, 2}, 16); }, OSLO_ERR_INVALID_ARGUMENT);  // 17 positions > 16
  s.add(1, {1}, 16);                                                   // 16 positions: fits exactly
  expect_error([&] { s.add(1, {1}, 2); }, OSLO_ERR_INVALID_ARGUMENT);  // duplicate id
  assert_false(s.remove(7));
  assert_true(s.remove(1));
  assert_int_equal(s.waiting(), 0);
}

}  // namespace

std::vector<struct CMUnitTest> scheduler_tests() {
  return {
      cmocka_unit_test(test_alone_equals_batched),
      cmocka_unit_test(test_preemption),
      cmocka_unit_test(test_prefix_reuse),
      cmocka_unit_test(test_bad_requests),
  };
}
