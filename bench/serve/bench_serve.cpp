// Issue 33's serving benchmark driver, through the public C ABI only
// (include/oslo.h: oslo_engine_* and oslo_model_generate).
//
//   bench_serve MODEL_DIR [--mode engine|sequential|prefix|check|workload]
//               [--threads N] [--requests N] [--prompt MIN:MAX] [--output MIN:MAX]
//               [--seed S] [--check K] [--workload FILE] [--out FILE]
//               [--prefix-requests N] [--prefix-len N] [--suffix MIN:MAX]
//               [--prefix-output N] [--max-step-tokens N] [--block-size N]
//
// The workload: --requests requests (default 64) with prompt lengths
// uniform in --prompt (default 32:512) and output lengths uniform in
// --output (default 16:256), prompt ids uniform in [0, vocab - 1), all drawn
// from --seed (default 1) by splitmix64; every request arrives at time 0;
// greedy; no EOS (the EOS list is empty, so every request runs its full
// output length). --mode workload writes it to --out (one request a line:
// "OUTPUT_LENGTH ID ID ..."), so the references (hf_cb_reference.py,
// llama_cpp_cb_reference.py) run exactly the same requests; --workload FILE
// reads one instead of drawing it.
//
// Modes (each prints one JSON line on stdout; the diagnostics go to stderr):
//  - engine: correctness first: --check K requests of the workload (the one
//    with the longest prompt and the K - 1 shortest) are generated alone with
//    oslo_model_generate, then run together through an engine, untimed: the
//    run fails (exit 1) unless every token is equal. Then the timed run: one
//    engine (block size 16, max_seqs = the number of requests, max 512
//    tokens per step, a KV pool that holds the whole workload), every
//    request added, oslo_engine_step until all finish. Reports output
//    tokens/s (all output tokens / the wall time from the first add to the
//    last token), time to first token p50/p99 (from the adds to a request's
//    first token event), and KV memory in use against the tokens cached
//    (oslo_engine_get_stats' kv_bytes_used over cached_tokens x the bytes
//    one token's K and V take, 2 x layers x kv_heads x head_dim x 4: the
//    KV pool is f32), at the step with the most cached tokens and averaged
//    over the steps. The checked requests' tokens of the timed run are
//    compared again.
//  - sequential: the baseline: oslo_model_generate request by request, in
//    the workload's order (one warm-up call first). Time to first token is
//    when the request's call returns (generate does not stream).
//  - prefix: --prefix-requests requests (32) sharing a --prefix-len-token
//    (400) system prompt, each followed by its own --suffix (16:48) tokens,
//    --prefix-output (16) new tokens each, all added together: the engine
//    with prefix caching and without; reports the prompt tokens each
//    computed (oslo_engine_stats.prompt_tokens) and their ratio (goal <=
//    1/8). Fails unless every request's tokens are equal in both runs and
//    the first two equal generate's alone.
//  - check: correctness only, no timing (the ctest smoke test): every
//    request of the workload through one engine against generate alone, and
//    the prefix workload with caching against generate alone.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "oslo.h"

namespace {

void check(oslo_status st, const char* what) {
  if (st != OSLO_OK) {
    std::fprintf(stderr, "bench_serve: %s: %s: %s\n", what, oslo_status_string(st),
                 oslo_last_error());
    std::exit(1);
  }
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "bench_serve: %s\n", msg.c_str());
  std::exit(1);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double peak_rss_mib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

struct Req {
  std::vector<int64_t> prompt;
  int64_t max_new = 0;
};

// splitmix64: a fixed, portable stream (the workload is the same on every
// machine and compiler).
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int64_t uniform(int64_t lo, int64_t hi) {  // [lo, hi]
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
};

struct Range {
  int64_t lo, hi;
};

Range parse_range(const char* s) {
  long long a = 0, b = 0;
  if (std::sscanf(s, "%lld:%lld", &a, &b) != 2 || a < 1 || b < a)
    die(std::string("bad range '") + s + "' (MIN:MAX, 1 <= MIN <= MAX)");
  return {a, b};
}

std::vector<Req> draw_workload(int64_t n, Range prompt, Range output, uint64_t seed,
                               int64_t vocab) {
  Rng r{seed};
  std::vector<Req> w(static_cast<size_t>(n));
  for (auto& q : w) {
    q.prompt.resize(static_cast<size_t>(r.uniform(prompt.lo, prompt.hi)));
    q.max_new = r.uniform(output.lo, output.hi);
    for (auto& id : q.prompt) id = r.uniform(0, vocab - 2);
  }
  return w;
}

// The prefix workload: one shared system prompt, then each request's own
// suffix.
std::vector<Req> draw_prefix_workload(int64_t n, int64_t prefix_len, Range suffix, int64_t output,
                                      uint64_t seed, int64_t vocab) {
  Rng r{seed ^ 0x5EEDull};
  std::vector<int64_t> system(static_cast<size_t>(prefix_len));
  for (auto& id : system) id = r.uniform(0, vocab - 2);
  std::vector<Req> w(static_cast<size_t>(n));
  for (auto& q : w) {
    q.prompt = system;
    const int64_t s = r.uniform(suffix.lo, suffix.hi);
    for (int64_t i = 0; i < s; ++i) q.prompt.push_back(r.uniform(0, vocab - 2));
    q.max_new = output;
  }
  return w;
}

void write_workload(const std::vector<Req>& w, const std::string& path) {
  std::ofstream f(path);
  if (!f) die("cannot write " + path);
  for (const auto& q : w) {
    f << q.max_new;
    for (int64_t id : q.prompt) f << ' ' << id;
    f << '\n';
  }
  if (!f) die("cannot write " + path);
}

std::vector<Req> read_workload(const std::string& path, int64_t vocab) {
  std::ifstream f(path);
  if (!f) die("cannot read " + path);
  std::vector<Req> w;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    std::istringstream in(line);
    Req q;
    in >> q.max_new;
    int64_t id;
    while (in >> id) {
      if (id < 0 || id >= vocab) die("workload: token id outside the vocabulary in " + path);
      q.prompt.push_back(id);
    }
    if (q.max_new < 1 || q.prompt.empty()) die("workload: bad line in " + path);
    w.push_back(std::move(q));
  }
  if (w.empty()) die("workload: no requests in " + path);
  return w;
}

oslo_generate_options greedy_no_eos(int64_t max_new) {
  static const int64_t none = 0;
  oslo_generate_options o;
  check(oslo_generate_options_init(&o, OSLO_GENERATE_OPTIONS_VERSION), "generate options");
  o.max_new_tokens = max_new;
  o.eos_token_ids = &none;  // an empty EOS list: no EOS, every request runs its full length
  o.num_eos_token_ids = 0;
  return o;
}

// One request alone through oslo_model_generate.
std::vector<int64_t> generate_alone(oslo_model* m, const Req& q) {
  const oslo_generate_options o = greedy_no_eos(q.max_new);
  const int64_t len = static_cast<int64_t>(q.prompt.size());
  std::vector<int64_t> out(static_cast<size_t>(q.max_new));
  int64_t n = 0;
  check(oslo_model_generate(m, q.prompt.data(), &len, 1, &o, out.data(), &n, nullptr), "generate");
  if (n != q.max_new)
    die("generate gave " + std::to_string(n) + " tokens, expected " + std::to_string(q.max_new) +
        " (no EOS)");
  return out;
}

double percentile(std::vector<double> v, double p) {  // nearest rank
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, k > 0 ? k - 1 : 0)];
}

struct EngineCfg {
  int64_t block_size = 16, max_step_tokens = 512;
  int prefix_caching = 1;
};

struct EngineRun {
  std::vector<std::vector<int64_t>> tokens;
  std::vector<double> first_token_s;
  double seconds = 0;
  oslo_engine_stats stats{};  // at the end
  int64_t peak_cached = 0, peak_kv_bytes = 0;
  double kv_bytes_sum = 0, cached_sum = 0;  // over the steps, for the average
};

// Runs `reqs` through one new engine, all added at once, stepping by hand
// until every request has finished; `token_bytes` is what one cached token's
// K and V take (for the memory ratio).
EngineRun run_engine(oslo_model* m, const std::vector<Req>& reqs, const EngineCfg& c) {
  int64_t blocks = 0;
  for (const auto& q : reqs)
    blocks += (static_cast<int64_t>(q.prompt.size()) + q.max_new + c.block_size - 1) / c.block_size;
  oslo_engine_options eo;
  check(oslo_engine_options_init(&eo, OSLO_ENGINE_OPTIONS_VERSION), "engine options");
  eo.num_blocks = blocks + static_cast<int64_t>(reqs.size());  // the whole workload fits at once
  eo.block_size = c.block_size;
  eo.max_seqs = static_cast<int64_t>(reqs.size());
  eo.max_step_tokens = c.max_step_tokens;
  eo.prefix_caching = c.prefix_caching;
  eo.idle_wait_ms = 0;
  oslo_engine* e = nullptr;
  check(oslo_engine_create(m, &eo, &e), "engine create");

  EngineRun r;
  r.tokens.resize(reqs.size());
  r.first_token_s.assign(reqs.size(), -1.0);
  std::vector<int64_t> ids(reqs.size());
  const double t0 = now();
  for (size_t i = 0; i < reqs.size(); ++i) {
    const oslo_generate_options o = greedy_no_eos(reqs[i].max_new);
    check(oslo_engine_add(e, reqs[i].prompt.data(), reqs[i].prompt.size(), &o, nullptr, 0, &ids[i]),
          "engine add");
  }
  // Request ids are 1, 2, ... in the order of the adds; map them back.
  auto index_of = [&](int64_t id) -> size_t {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == id) return i;
    die("an event for an unknown request id " + std::to_string(id));
  };
  size_t finished = 0;
  while (finished < reqs.size()) {
    size_t n = 0;
    check(oslo_engine_step(e, &n), "engine step");
    const double t = now() - t0;
    for (size_t k = 0; k < n; ++k) {
      oslo_engine_event ev;
      check(oslo_engine_get_event(e, k, &ev), "engine event");
      const size_t i = index_of(ev.request_id);
      if (ev.num_tokens > 0 && r.first_token_s[i] < 0) r.first_token_s[i] = t;
      r.tokens[i].insert(r.tokens[i].end(), ev.tokens, ev.tokens + ev.num_tokens);
      if (ev.finish == OSLO_FINISH_NONE) continue;
      if (ev.finish != OSLO_FINISH_LENGTH)
        die("request " + std::to_string(i) + " finished with reason " +
            std::to_string(static_cast<int>(ev.finish)) + " (" + ev.error + "), not length");
      ++finished;
    }
    oslo_engine_stats s;
    check(oslo_engine_get_stats(e, &s), "engine stats");
    if (s.cached_tokens > r.peak_cached) {
      r.peak_cached = s.cached_tokens;
      r.peak_kv_bytes = s.kv_bytes_used;
    }
    r.kv_bytes_sum += static_cast<double>(s.kv_bytes_used);
    r.cached_sum += static_cast<double>(s.cached_tokens);
  }
  r.seconds = now() - t0;
  check(oslo_engine_get_stats(e, &r.stats), "engine stats");
  oslo_engine_destroy(e);
  for (size_t i = 0; i < reqs.size(); ++i)
    if (static_cast<int64_t>(r.tokens[i].size()) != reqs[i].max_new)
      die("request " + std::to_string(i) + " got " + std::to_string(r.tokens[i].size()) +
          " tokens, expected " + std::to_string(reqs[i].max_new));
  return r;
}

// Fails the run unless `got` equals `want` (request `i`, `what` names the
// comparison).
void expect_equal(const std::vector<int64_t>& got, const std::vector<int64_t>& want, size_t i,
                  const char* what) {
  if (got == want) return;
  size_t k = 0;
  while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
  die(std::string("correctness: ") + what + ": request " + std::to_string(i) +
      " differs at new token " + std::to_string(k) + " (" +
      (k < got.size() ? std::to_string(got[k]) : "end") + " vs " +
      (k < want.size() ? std::to_string(want[k]) : "end") + ")");
}

// The requests checked before timing: the longest prompt, then the k - 1
// with the fewest tokens (prompt + output) in all.
std::vector<size_t> checked_requests(const std::vector<Req>& w, int64_t k) {
  std::vector<size_t> order(w.size());
  for (size_t i = 0; i < w.size(); ++i) order[i] = i;
  std::vector<size_t> out;
  if (k <= 0) return out;
  out.push_back(*std::max_element(order.begin(), order.end(), [&](size_t a, size_t b) {
    return w[a].prompt.size() < w[b].prompt.size();
  }));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return static_cast<int64_t>(w[a].prompt.size()) + w[a].max_new <
           static_cast<int64_t>(w[b].prompt.size()) + w[b].max_new;
  });
  for (size_t i : order) {
    if (static_cast<int64_t>(out.size()) >= k) break;
    if (i != out[0]) out.push_back(i);
  }
  return out;
}

struct Totals {
  int64_t prompt = 0, output = 0;
};

Totals totals(const std::vector<Req>& w) {
  Totals t;
  for (const auto& q : w) {
    t.prompt += static_cast<int64_t>(q.prompt.size());
    t.output += q.max_new;
  }
  return t;
}

struct Args {
  std::string model, mode = "engine", workload, out;
  int threads = 2;
  int64_t requests = 64, check = 4, prefix_requests = 32, prefix_len = 400, prefix_output = 16;
  Range prompt{32, 512}, output{16, 256}, suffix{16, 48};
  uint64_t seed = 1;
  EngineCfg engine;
};

Args parse(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--mode engine|sequential|prefix|check|workload] "
                 "[--threads N] [--requests N] [--prompt MIN:MAX] [--output MIN:MAX] [--seed S] "
                 "[--check K] [--workload FILE] [--out FILE] [--prefix-requests N] "
                 "[--prefix-len N] [--suffix MIN:MAX] [--prefix-output N] "
                 "[--max-step-tokens N] [--block-size N]\n",
                 argv[0]);
    std::exit(2);
  }
  Args a;
  a.model = argv[1];
  auto num = [](const char* opt, const char* v, int64_t lo) {
    char* end = nullptr;
    const long long x = std::strtoll(v, &end, 10);
    if (!*v || *end || x < lo) die(std::string("bad value '") + v + "' for " + opt);
    return static_cast<int64_t>(x);
  };
  for (int i = 2; i < argc; ++i) {
    const std::string o = argv[i];
    if (i + 1 >= argc) die("option " + o + " needs a value");
    const char* v = argv[++i];
    if (o == "--mode")
      a.mode = v;
    else if (o == "--threads")
      a.threads = static_cast<int>(num(o.c_str(), v, 1));
    else if (o == "--requests")
      a.requests = num(o.c_str(), v, 1);
    else if (o == "--prompt")
      a.prompt = parse_range(v);
    else if (o == "--output")
      a.output = parse_range(v);
    else if (o == "--seed")
      a.seed = static_cast<uint64_t>(num(o.c_str(), v, 0));
    else if (o == "--check")
      a.check = num(o.c_str(), v, 0);
    else if (o == "--workload")
      a.workload = v;
    else if (o == "--out")
      a.out = v;
    else if (o == "--prefix-requests")
      a.prefix_requests = num(o.c_str(), v, 1);
    else if (o == "--prefix-len")
      a.prefix_len = num(o.c_str(), v, 1);
    else if (o == "--suffix")
      a.suffix = parse_range(v);
    else if (o == "--prefix-output")
      a.prefix_output = num(o.c_str(), v, 1);
    else if (o == "--max-step-tokens")
      a.engine.max_step_tokens = num(o.c_str(), v, 1);
    else if (o == "--block-size")
      a.engine.block_size = num(o.c_str(), v, 1);
    else
      die("unknown option " + o);
  }
  const char* modes[] = {"engine", "sequential", "prefix", "check", "workload"};
  if (std::find_if(std::begin(modes), std::end(modes),
                   [&](const char* m) { return a.mode == m; }) == std::end(modes))
    die("unknown mode " + a.mode);
  if (a.mode == "workload" && a.out.empty()) die("--mode workload needs --out FILE");
  return a;
}

// The engine row: correctness first, then the timed run.
void mode_engine(oslo_model* m, const Args& a, const std::vector<Req>& w, double token_bytes) {
  const std::vector<size_t> chk = checked_requests(w, a.check);
  std::vector<std::vector<int64_t>> want;
  std::vector<Req> sub;
  for (size_t i : chk) {
    want.push_back(generate_alone(m, w[i]));
    sub.push_back(w[i]);
  }
  if (!sub.empty()) {
    const EngineRun c = run_engine(m, sub, a.engine);  // also the warm-up
    for (size_t k = 0; k < chk.size(); ++k)
      expect_equal(c.tokens[k], want[k], chk[k], "engine (checked requests together) vs generate");
  }
  const EngineRun r = run_engine(m, w, a.engine);
  for (size_t k = 0; k < chk.size(); ++k)
    expect_equal(r.tokens[chk[k]], want[k], chk[k], "engine (timed run) vs generate");
  const Totals t = totals(w);
  const double peak_ratio =
      r.peak_cached > 0 ? static_cast<double>(r.peak_kv_bytes) / (r.peak_cached * token_bytes) : 0;
  const double mean_ratio = r.cached_sum > 0 ? r.kv_bytes_sum / (r.cached_sum * token_bytes) : 0;
  std::printf(
      "{\"engine\": \"oslo engine\", \"threads\": %d, \"requests\": %zu, \"prompt_tokens\": %lld, "
      "\"output_tokens\": %lld, \"seconds\": %.3f, \"tok_s\": %.2f, \"ttft_p50_ms\": %.1f, "
      "\"ttft_p99_ms\": %.1f, \"checked\": %zu, \"steps\": %lld, \"prompt_tokens_computed\": "
      "%lld, \"block_size\": %lld, \"max_step_tokens\": %lld, \"peak_cached_tokens\": %lld, "
      "\"peak_kv_mib\": %.1f, \"kv_over_cached_at_peak\": %.4f, \"kv_over_cached_mean\": %.4f, "
      "\"peak_rss_mib\": %.1f}\n",
      a.threads, w.size(), static_cast<long long>(t.prompt), static_cast<long long>(t.output),
      r.seconds, static_cast<double>(t.output) / r.seconds, percentile(r.first_token_s, 0.5) * 1e3,
      percentile(r.first_token_s, 0.99) * 1e3, chk.size(), static_cast<long long>(r.stats.steps),
      static_cast<long long>(r.stats.prompt_tokens), static_cast<long long>(a.engine.block_size),
      static_cast<long long>(a.engine.max_step_tokens), static_cast<long long>(r.peak_cached),
      r.peak_kv_bytes / 1048576.0, peak_ratio, mean_ratio, peak_rss_mib());
}

// The baseline: generate request by request.
void mode_sequential(oslo_model* m, const Args& a, const std::vector<Req>& w) {
  Req warm;
  warm.prompt.assign(w[0].prompt.begin(),
                     w[0].prompt.begin() + std::min<size_t>(8, w[0].prompt.size()));
  warm.max_new = 2;
  generate_alone(m, warm);
  std::vector<double> done(w.size());
  const double t0 = now();
  for (size_t i = 0; i < w.size(); ++i) {
    generate_alone(m, w[i]);
    done[i] = now() - t0;
  }
  const double secs = now() - t0;
  const Totals t = totals(w);
  std::printf(
      "{\"engine\": \"oslo generate, request by request\", \"threads\": %d, \"requests\": %zu, "
      "\"prompt_tokens\": %lld, \"output_tokens\": %lld, \"seconds\": %.3f, \"tok_s\": %.2f, "
      "\"ttft_p50_ms\": %.1f, \"ttft_p99_ms\": %.1f, \"ttft\": \"when the call returns\", "
      "\"peak_rss_mib\": %.1f}\n",
      a.threads, w.size(), static_cast<long long>(t.prompt), static_cast<long long>(t.output), secs,
      static_cast<double>(t.output) / secs, percentile(done, 0.5) * 1e3,
      percentile(done, 0.99) * 1e3, peak_rss_mib());
}

// Prefix reuse: the same requests with prefix caching and without.
void mode_prefix(oslo_model* m, const Args& a, const std::vector<Req>& p) {
  std::vector<std::vector<int64_t>> want;
  for (size_t i = 0; i < std::min<size_t>(2, p.size()); ++i)
    want.push_back(generate_alone(m, p[i]));
  EngineCfg on = a.engine, off = a.engine;
  on.prefix_caching = 1;
  off.prefix_caching = 0;
  const EngineRun with = run_engine(m, p, on);
  const EngineRun without = run_engine(m, p, off);
  for (size_t i = 0; i < want.size(); ++i)
    expect_equal(with.tokens[i], want[i], i, "engine with prefix caching vs generate");
  for (size_t i = 0; i < p.size(); ++i)
    expect_equal(with.tokens[i], without.tokens[i], i, "prefix caching on vs off");
  const Totals t = totals(p);
  const double ratio = static_cast<double>(with.stats.prompt_tokens) /
                       static_cast<double>(std::max<int64_t>(1, without.stats.prompt_tokens));
  std::printf(
      "{\"engine\": \"oslo engine, prefix reuse\", \"threads\": %d, \"requests\": %zu, "
      "\"prefix_len\": %lld, \"prompt_tokens\": %lld, \"output_tokens\": %lld, "
      "\"computed_with_caching\": %lld, \"computed_without\": %lld, \"computed_ratio\": %.4f, "
      "\"prefix_queries\": %lld, \"prefix_hits\": %lld, \"seconds_with\": %.3f, "
      "\"seconds_without\": %.3f, \"ttft_p50_ms_with\": %.1f, \"ttft_p50_ms_without\": %.1f}\n",
      a.threads, p.size(), static_cast<long long>(a.prefix_len), static_cast<long long>(t.prompt),
      static_cast<long long>(t.output), static_cast<long long>(with.stats.prompt_tokens),
      static_cast<long long>(without.stats.prompt_tokens), ratio,
      static_cast<long long>(with.stats.prefix_queries),
      static_cast<long long>(with.stats.prefix_hits), with.seconds, without.seconds,
      percentile(with.first_token_s, 0.5) * 1e3, percentile(without.first_token_s, 0.5) * 1e3);
}

// Correctness only: every request of both workloads against generate alone.
void mode_check(oslo_model* m, const Args& a, const std::vector<Req>& w,
                const std::vector<Req>& p) {
  EngineCfg on = a.engine;
  on.prefix_caching = 1;
  const EngineRun r = run_engine(m, w, on);
  for (size_t i = 0; i < w.size(); ++i)
    expect_equal(r.tokens[i], generate_alone(m, w[i]), i, "engine vs generate");
  const EngineRun rp = run_engine(m, p, on);
  for (size_t i = 0; i < p.size(); ++i)
    expect_equal(rp.tokens[i], generate_alone(m, p[i]), i, "engine with shared prefix vs generate");
  if (rp.stats.prefix_hits <= 0) die("prefix workload: no prefix block was shared");
  std::printf(
      "{\"check\": \"ok\", \"requests\": %zu, \"prefix_requests\": %zu, \"prefix_hits\": %lld, "
      "\"prompt_tokens_computed_with_prefix\": %lld, \"prefix_prompt_tokens\": %lld}\n",
      w.size(), p.size(), static_cast<long long>(rp.stats.prefix_hits),
      static_cast<long long>(rp.stats.prompt_tokens), static_cast<long long>(totals(p).prompt));
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  char cfg[320];
  std::snprintf(
      cfg, sizeof cfg,
      "{\"tensor_parallel_size\": 1, \"num_threads\": %d, \"timeout_seconds\": 600, "
      "\"rank\": 0, \"world_size\": 1, \"init_method\": \"file:///tmp/oslo-bench-serve-%ld\"}",
      a.threads, static_cast<long>(getpid()));
  oslo_context* ctx = nullptr;
  check(oslo_context_create(cfg, &ctx), "context");
  oslo_model_options mo;
  check(oslo_model_options_init(&mo, OSLO_MODEL_OPTIONS_VERSION), "model options");
  oslo_model* m = nullptr;
  check(oslo_model_load(ctx, a.model.c_str(), &mo, &m), "load");
  oslo_model_info info;
  check(oslo_model_get_info(m, &info, nullptr), "model info");
  if (!info.is_causal) die("not a causal language model: " + a.model);

  const std::vector<Req> w =
      a.workload.empty() ? draw_workload(a.requests, a.prompt, a.output, a.seed, info.vocab_size)
                         : read_workload(a.workload, info.vocab_size);
  int64_t longest = 0;
  for (const auto& q : w)
    longest = std::max(longest, static_cast<int64_t>(q.prompt.size()) + q.max_new);
  if (longest > info.max_positions)
    die("the workload's longest request (" + std::to_string(longest) +
        " tokens) is beyond the model's " + std::to_string(info.max_positions) + " positions");
  // One cached token's K and V over all layers (f32 pool).
  const double token_bytes = 2.0 * static_cast<double>(info.num_layers * info.num_kv_heads) *
                             static_cast<double>(info.hidden_size / info.num_heads) * 4.0;

  if (a.mode == "workload") {
    write_workload(w, a.out);
  } else if (a.mode == "engine") {
    mode_engine(m, a, w, token_bytes);
  } else if (a.mode == "sequential") {
    mode_sequential(m, a, w);
  } else {
    const std::vector<Req> p = draw_prefix_workload(a.prefix_requests, a.prefix_len, a.suffix,
                                                    a.prefix_output, a.seed, info.vocab_size);
    if (a.prefix_len + a.suffix.hi + a.prefix_output > info.max_positions)
      die("the prefix workload is beyond the model's positions");
    if (a.mode == "prefix")
      mode_prefix(m, a, p);
    else
      mode_check(m, a, w, p);
  }
  oslo_model_destroy(m);
  oslo_context_destroy(ctx);
  return 0;
}
