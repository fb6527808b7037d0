// The serving engine's cases of tests/bindings/cases.txt (engine_*) through
// the C ABI only: the C column the bindings repeat (python_engine_*,
// java_engine_*, go_engine_*). Linked into c_cases (c_cases.cpp dispatches).
// Every request's tokens are compared with oslo_model_generate of its
// prompt alone, computed before the engine exists.
#include "c_cases.hpp"

#include <oslo.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace cases {
namespace {

struct EngineDel {
  void operator()(oslo_engine* e) const { oslo_engine_destroy(e); }
};
using Engine = std::unique_ptr<oslo_engine, EngineDel>;

constexpr int64_t kEos = 334;  // reference.json's greedy eos_token_id

// One request: its prompt and generate options (EOS ids: kEos).
struct Spec {
  std::vector<int64_t> prompt;
  oslo_generate_options o;
};

oslo_generate_options options(int64_t max_new) {
  oslo_generate_options o;
  OK(oslo_generate_options_init(&o, OSLO_GENERATE_OPTIONS_VERSION));
  o.max_new_tokens = max_new;
  o.eos_token_ids = &kEos;
  o.num_eos_token_ids = 1;
  return o;
}

// Four requests of different prompts, lengths and sampling.
std::vector<Spec> specs(const std::string& fixture) {
  json ref;
  std::ifstream(fixture + "/reference.json") >> ref;
  const auto p = ref.at("prompts").get<std::vector<std::vector<int64_t>>>();
  std::vector<Spec> s(4);
  s[0] = {p[0], options(12)};
  s[1] = {p[1], options(7)};
  s[1].o.do_sample = 1;
  s[1].o.seed = 11;
  s[1].o.top_k = 20;
  s[1].o.temperature = 0.8f;
  s[2] = {p[2], options(12)};
  s[3].prompt.assign(p[0].begin(), p[0].begin() + 3);
  s[3].prompt.insert(s[3].prompt.end(), p[2].begin(), p[2].end());
  s[3].o = options(9);
  s[3].o.do_sample = 1;
  s[3].o.seed = 3;
  s[3].o.top_p = 0.9f;
  s[3].o.repetition_penalty = 1.3f;
  return s;
}

std::vector<int64_t> generate_alone(oslo_model* m, const Spec& s) {
  const int64_t len = static_cast<int64_t>(s.prompt.size());
  std::vector<int64_t> out(static_cast<size_t>(s.o.max_new_tokens));
  int64_t got = 0;
  OK(oslo_model_generate(m, s.prompt.data(), &len, 1, &s.o, out.data(), &got, nullptr));
  out.resize(static_cast<size_t>(got));
  return out;
}

// What oslo_engine_next gave one request, read to its end.
struct Read {
  std::vector<int64_t> tokens;
  std::string text;
  oslo_finish_reason finish = OSLO_FINISH_NONE;
  int calls = 0;
};

// Reads request `id` to its end with small buffers (3 tokens, 8 bytes of
// text a call: a request's output comes in several takes).
Read read_all(oslo_engine* e, int64_t id) {
  Read r;
  for (;;) {
    int64_t toks[3];
    char text[8];
    size_t nt = 0, nx = 0;
    oslo_finish_reason f = OSLO_FINISH_NONE;
    const oslo_status st = oslo_engine_next(e, id, 200, toks, 3, &nt, text, sizeof text, &nx, &f);
    if (st == OSLO_ERR_TIMEOUT && f == OSLO_FINISH_NONE) continue;
    OK(st);
    check(nx < sizeof text && text[nx] == 0, "next: the text is NUL-terminated within capacity");
    r.tokens.insert(r.tokens.end(), toks, toks + nt);
    r.text.append(text, nx);
    ++r.calls;
    if (f != OSLO_FINISH_NONE) {
      r.finish = f;
      return r;
    }
  }
}

std::string decode(oslo_tokenizer* t, const std::vector<int64_t>& ids) {
  size_t n = 0;
  // Without special tokens, as the engine decodes.
  OK(oslo_tokenizer_decode(t, ids.data(), ids.size(), 1, nullptr, 0, &n));
  std::string s(n + 1, '\0');
  OK(oslo_tokenizer_decode(t, ids.data(), ids.size(), 1, s.data(), s.size(), &n));
  s.resize(n);
  return s;
}

void check_read(const std::string& what, const Read& r, const std::vector<int64_t>& want,
                oslo_tokenizer* tok) {
  check(r.tokens == want, what + ": the engine's tokens differ from generate's alone");
  const oslo_finish_reason f =
      !want.empty() && want.back() == kEos ? OSLO_FINISH_EOS : OSLO_FINISH_LENGTH;
  check(r.finish == f, what + ": finish " + std::to_string(r.finish));
  if (!tok) return;
  const std::string full = decode(tok, r.tokens);
  std::string alt = full;
  if (f == OSLO_FINISH_EOS)
    alt = decode(tok, std::vector<int64_t>(r.tokens.begin(), r.tokens.end() - 1));
  check(r.text == full || r.text == alt,
        what + ": text '" + r.text + "' is not the decoded '" + full + "'");
}

Engine make_engine(oslo_model* m, oslo_tokenizer* tok, int64_t block_size = 0,
                   int64_t num_blocks = 0) {
  oslo_engine_options eo;
  OK(oslo_engine_options_init(&eo, OSLO_ENGINE_OPTIONS_VERSION));
  if (block_size) eo.block_size = block_size;
  eo.num_blocks = num_blocks ? num_blocks : 256;  // a test needs few (default: 1 GiB of them)
  eo.max_seqs = 8;
  eo.tokenizer = tok;
  oslo_engine* e = nullptr;
  OK(oslo_engine_create(m, &eo, &e));
  return Engine(e);
}

int64_t add(oslo_engine* e, const Spec& s, const std::vector<const char*>& stop = {}) {
  int64_t id = 0;
  OK(oslo_engine_add(e, s.prompt.data(), s.prompt.size(), &s.o, stop.data(), stop.size(), &id));
  return id;
}

}  // namespace

void engine_stream_gpt2(int, const std::string& fixture) {
  const std::vector<Spec> s = specs(fixture);
  Context ctx = make_context(R"({"tensor_parallel_size": 1, "timeout_seconds": 120})");
  Model m = load_model(ctx.get(), fixture);
  std::vector<std::vector<int64_t>> want;
  for (const Spec& x : s) want.push_back(generate_alone(m.get(), x));
  oslo_tokenizer* t = nullptr;
  OK(oslo_tokenizer_load(fixture.c_str(), &t));
  Tokenizer tok(t);
  const char* text = "The quick brown fox jumps over the lazy dog";
  Engine e = make_engine(m.get(), t, 4, 96);
  tok.reset();  // the engine keeps its own reference
  std::vector<int64_t> ids;
  for (const Spec& x : s) ids.push_back(add(e.get(), x));
  oslo_request_state st = OSLO_REQUEST_UNKNOWN;
  OK(oslo_engine_request_state(e.get(), ids[0], &st));
  check(st == OSLO_REQUEST_WAITING || st == OSLO_REQUEST_RUNNING, "a request just added");
  std::vector<Read> got(s.size());
  std::vector<std::string> errors(s.size());
  std::vector<std::thread> readers;
  for (size_t i = 0; i < s.size(); ++i)
    readers.emplace_back([&, i] {
      try {
        got[i] = read_all(e.get(), ids[i]);
      } catch (const std::exception& x) {
        errors[i] = x.what();
      }
    });
  for (auto& r : readers) r.join();
  oslo_tokenizer* t2 = nullptr;
  OK(oslo_tokenizer_load(fixture.c_str(), &t2));
  Tokenizer tok2(t2);
  for (size_t i = 0; i < s.size(); ++i) {
    check(errors[i].empty(), "reader " + std::to_string(i) + ": " + errors[i]);
    check_read("request " + std::to_string(i), got[i], want[i], t2);
    OK(oslo_engine_request_state(e.get(), ids[i], &st));
    check(st == OSLO_REQUEST_UNKNOWN, "a request read to its end is forgotten");
  }
  // A text prompt, then the same with a stop string inside its text.
  oslo_generate_options o = options(12);
  int64_t id = 0;
  OK(oslo_engine_add_text(e.get(), text, 1, &o, nullptr, 0, &id));
  const Read full = read_all(e.get(), id);
  check(full.text.size() > 6, "the greedy text '" + full.text + "' holds a stop string");
  // Three characters from the fourth (the text may hold multi-byte ones).
  auto boundary = [&](size_t i) {
    while (i < full.text.size() && (static_cast<unsigned char>(full.text[i]) & 0xC0) == 0x80) ++i;
    return i;
  };
  size_t from = 0;
  for (int k = 0; k < 3; ++k) from = boundary(from + 1);
  size_t to = from;
  for (int k = 0; k < 3; ++k) to = boundary(to + 1);
  check(to <= full.text.size(), "the greedy text '" + full.text + "' holds 6 characters");
  const std::string stop = full.text.substr(from, to - from);
  const char* stops[] = {stop.c_str()};
  OK(oslo_engine_add_text(e.get(), text, 1, &o, stops, 1, &id));
  const Read cut = read_all(e.get(), id);
  check(cut.finish == OSLO_FINISH_STOP, "stop: finish " + std::to_string(cut.finish));
  check(cut.text == full.text.substr(0, full.text.find(stop)),
        "stop '" + stop + "': text '" + cut.text + "'");
  oslo_engine_stats stats;
  OK(oslo_engine_get_stats(e.get(), &stats));
  check(stats.block_size == 4 && stats.blocks_total == 96 && stats.steps > 0 &&
            stats.running == 0 && stats.waiting == 0,
        "stats");
  std::printf(
      "4 requests read together (%d takes) equal generate alone; stop '%s' ends the "
      "text; %lld steps\n",
      got[0].calls + got[1].calls + got[2].calls + got[3].calls, stop.c_str(),
      static_cast<long long>(stats.steps));
}

void engine_cancel_and_errors(int, const std::string& fixture) {
  const std::vector<Spec> s = specs(fixture);
  Context ctx = make_context(R"({"tensor_parallel_size": 1, "timeout_seconds": 120})");
  Model m = load_model(ctx.get(), fixture);
  oslo_model_info info;
  OK(oslo_model_get_info(m.get(), &info, nullptr));
  Spec six{s[1].prompt, options(6)};
  const std::vector<int64_t> alone = generate_alone(m.get(), six);
  Engine e = make_engine(m.get(), nullptr);
  // Cancel mid-stream.
  Spec hundred{s[0].prompt, options(100)};
  hundred.o.eos_token_ids = nullptr;
  hundred.o.num_eos_token_ids = 0;
  const int64_t id = add(e.get(), hundred);
  int64_t toks[128];
  size_t nt = 0, nx = 0, total = 0;
  oslo_finish_reason f = OSLO_FINISH_NONE;
  OK(oslo_engine_next(e.get(), id, 60000, toks, 128, &nt, nullptr, 0, &nx, &f));
  check(nt > 0 && f == OSLO_FINISH_NONE, "a first piece");
  total += nt;
  int found = 0;
  OK(oslo_engine_cancel(e.get(), id, &found));
  check(found == 1, "cancel a live request");
  while (f == OSLO_FINISH_NONE) {
    OK(oslo_engine_next(e.get(), id, 60000, toks, 128, &nt, nullptr, 0, &nx, &f));
    total += nt;
  }
  check(f == OSLO_FINISH_CANCELLED && total < 100, "cancelled after " + std::to_string(total));
  OK(oslo_engine_cancel(e.get(), id, &found));
  check(found == 0, "cancel a finished request: not found");
  // Bad requests: the named error; the engine goes on.
  int64_t bad = 0;
  const auto o = options(6);
  expect_error(oslo_engine_add(e.get(), s[0].prompt.data(), 0, &o, nullptr, 0, &bad),
               OSLO_ERR_INVALID_ARGUMENT, "empty", "an empty prompt");
  const std::vector<int64_t> outside = {1, info.vocab_size + 5};
  expect_error(oslo_engine_add(e.get(), outside.data(), 2, &o, nullptr, 0, &bad),
               OSLO_ERR_INVALID_ARGUMENT, "outside the vocabulary", "a token outside");
  const auto long_o = options(500);
  expect_error(
      oslo_engine_add(e.get(), s[0].prompt.data(), s[0].prompt.size(), &long_o, nullptr, 0, &bad),
      OSLO_ERR_INVALID_ARGUMENT, "positions", "beyond the model's positions");
  auto beams = options(6);
  beams.num_beams = 2;
  expect_error(
      oslo_engine_add(e.get(), s[0].prompt.data(), s[0].prompt.size(), &beams, nullptr, 0, &bad),
      OSLO_ERR_INVALID_ARGUMENT, "num_beams", "beams");
  const char* stop[] = {"x"};
  expect_error(oslo_engine_add(e.get(), s[0].prompt.data(), s[0].prompt.size(), &o, stop, 1, &bad),
               OSLO_ERR_INVALID_ARGUMENT, "tokenizer", "stop strings without a tokenizer");
  expect_error(oslo_engine_add_text(e.get(), "Hello", 1, &o, nullptr, 0, &bad),
               OSLO_ERR_INVALID_ARGUMENT, "tokenizer", "a text prompt without a tokenizer");
  const Read after = read_all(e.get(), add(e.get(), six));
  check(after.tokens == alone, "after the errors: generate's tokens");
  OK(oslo_engine_shutdown(e.get()));
  int64_t sd = 0;
  const oslo_status st =
      oslo_engine_add(e.get(), six.prompt.data(), six.prompt.size(), &six.o, nullptr, 0, &sd);
  check(st == OSLO_ERR_INVALID_ARGUMENT, "an add after shutdown is refused");
  e.reset();
  // Bad options, a pool too small for a request.
  oslo_engine_options eo;
  OK(oslo_engine_options_init(&eo, OSLO_ENGINE_OPTIONS_VERSION));
  eo.block_size = 0;
  oslo_engine* raw = nullptr;
  expect_error(oslo_engine_create(m.get(), &eo, &raw), OSLO_ERR_INVALID_ARGUMENT, "block_size",
               "block size 0");
  check(raw == nullptr, "no engine on failure");
  Engine tiny = make_engine(m.get(), nullptr, 4, 2);
  expect_error(
      oslo_engine_add(tiny.get(), six.prompt.data(), six.prompt.size(), &o, nullptr, 0, &bad),
      OSLO_ERR_INVALID_ARGUMENT, "KV pool", "longer than the whole pool");
  tiny.reset();
  // Stepping by hand: the events carry the same tokens; next is refused.
  Engine h = make_engine(m.get(), nullptr);
  const int64_t a = add(h.get(), six);
  std::vector<int64_t> got;
  bool done = false;
  for (int i = 0; i < 200 && !done; ++i) {
    size_t n = 0;
    OK(oslo_engine_step(h.get(), &n));
    for (size_t k = 0; k < n; ++k) {
      oslo_engine_event ev;
      OK(oslo_engine_get_event(h.get(), k, &ev));
      if (ev.request_id != a) continue;
      got.insert(got.end(), ev.tokens, ev.tokens + ev.num_tokens);
      done = ev.finish != OSLO_FINISH_NONE;
      check(ev.status == OSLO_OK && (!ev.error || !*ev.error), "no error");
    }
  }
  check(done && got == alone, "hand-stepped tokens equal generate's");
  oslo_engine_event ev;
  expect_error(oslo_engine_get_event(h.get(), 1000, &ev), OSLO_ERR_INVALID_ARGUMENT, "",
               "an event index out of range");
  expect_error(oslo_engine_next(h.get(), add(h.get(), six), 0, toks, 128, &nt, nullptr, 0, &nx, &f),
               OSLO_ERR_INVALID_ARGUMENT, "", "next on a hand-stepped engine");
  std::printf("cancelled after %zu of 100 tokens; bad requests named; hand stepping equal\n",
              total);
}

void engine_tp2(int threads, const std::string& fixture) {
  const std::vector<Spec> s = specs(fixture);
  run_ranks(
      [&](const std::string& cfg) {
        Context ctx = make_context(cfg);
        check(size_of(ctx.get(), OSLO_GROUP_TENSOR) == 2, "TP=2");
        Model m = load_model(ctx.get(), fixture);
        std::vector<std::vector<int64_t>> want;
        for (const Spec& x : s) want.push_back(generate_alone(m.get(), x));
        Engine e = make_engine(m.get(), nullptr);
        if (rank_of(ctx.get()) != 0) {
          OK(oslo_engine_run(e.get()));  // until rank 0 shuts the engine down
          return;
        }
        std::vector<int64_t> ids;
        for (const Spec& x : s) ids.push_back(add(e.get(), x));
        std::vector<Read> got(s.size());
        std::vector<std::string> errors(s.size());
        std::vector<std::thread> readers;
        for (size_t i = 0; i < s.size(); ++i)
          readers.emplace_back([&, i] {
            try {
              got[i] = read_all(e.get(), ids[i]);
            } catch (const std::exception& x) {
              errors[i] = x.what();
            }
          });
        for (auto& r : readers) r.join();
        for (size_t i = 0; i < s.size(); ++i) {
          check(errors[i].empty(), "reader " + std::to_string(i) + ": " + errors[i]);
          check_read("TP=2 request " + std::to_string(i), got[i], want[i], nullptr);
        }
        OK(oslo_engine_shutdown(e.get()));
        std::printf("TP=2: %zu requests equal generate alone; rank 1's run ends\n", s.size());
      },
      threads);
}

}  // namespace cases
