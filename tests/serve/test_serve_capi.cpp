// The serving engine through the C ABI only (include/oslo.h, "Serving
// engine"), as a C program uses it, on tests/models/fixtures/gpt2-tiny:
//  - options: defaults, versions, bad values named;
//  - stepping by hand (oslo_engine_step + oslo_engine_get_event), driven
//    from one thread (oslo_engine_next stepping itself, with tiny buffers),
//    driven by oslo_engine_run on a thread with 4 reader threads, and the
//    on_event callback: every request's tokens equal oslo_model_generate's
//    for that prompt alone (greedy and seeded sampling), its text pieces
//    concatenate to the decoded tokens;
//  - cancel mid-stream, request states, shutdown, bad requests and misuse
//    (each a named error);
//  - 2 ranks as threads (TP 2): rank 1 in oslo_engine_run, rank 0 adds and
//    reads; shutdown ends both; then rank 1 stops answering: rank 0's read
//    fails with a named error within the timeout.
//   serve_capi_test GPT2_TINY_DIR TEMP_DIR
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "oslo.h"

namespace {

int g_fail = 0;
std::string g_fix, g_tmp;

void check(bool ok, const std::string& what) {
  if (!ok) ++g_fail;
  std::printf("%s: %s\n", what.c_str(), ok ? "ok" : "FAIL");
  std::fflush(stdout);
}

void ok_or_die(oslo_status st, const char* what) {
  if (st != OSLO_OK) {
    std::fprintf(stderr, "%s: %s: %s\n", what, oslo_status_string(st), oslo_last_error());
    std::exit(1);
  }
}

void named(oslo_status st, oslo_status want, const char* needle, const std::string& what) {
  const std::string msg = st == OSLO_OK ? "" : oslo_last_error();
  check(st == want && msg.find(needle) != std::string::npos,
        what + " -> " + oslo_status_string(st) + ": " + msg.substr(0, 160));
}

struct Case {
  std::vector<int64_t> prompt;
  int64_t max_new;
  int sample;
  uint64_t seed;
  float repetition_penalty = 1.0f;  // oslo_generate_options v2
};

std::vector<Case> cases() {
  std::vector<Case> c;
  for (int i = 0; i < 6; ++i) {
    Case k;
    for (int j = 0; j < 3 + 5 * i % 17; ++j) k.prompt.push_back((i * 37 + j * 11) % 90 + 5);
    k.max_new = 3 + (i * 5) % 9;
    k.sample = i % 2;
    k.seed = static_cast<uint64_t>(100 + i);
    if (i == 4) k.repetition_penalty = 3.0f;
    c.push_back(k);
  }
  return c;
}

oslo_generate_options options_of(const Case& k) {
  oslo_generate_options o;
  ok_or_die(oslo_generate_options_init(&o, OSLO_GENERATE_OPTIONS_VERSION), "generate options");
  o.max_new_tokens = k.max_new;
  o.do_sample = k.sample;
  o.seed = k.seed;
  o.top_k = 20;
  o.repetition_penalty = k.repetition_penalty;
  static const int64_t no_eos = 0;
  o.eos_token_ids = &no_eos;  // non-NULL, none: every request runs its length
  o.num_eos_token_ids = 0;
  return o;
}

std::vector<int64_t> generate_alone(oslo_model* m, const Case& k) {
  const oslo_generate_options o = options_of(k);
  std::vector<int64_t> out(static_cast<size_t>(k.max_new));
  int64_t n = 0, len = static_cast<int64_t>(k.prompt.size());
  ok_or_die(oslo_model_generate(m, k.prompt.data(), &len, 1, &o, out.data(), &n, nullptr),
            "generate");
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string decode(oslo_tokenizer* t, const std::vector<int64_t>& ids) {
  size_t n = 0;
  ok_or_die(oslo_tokenizer_decode(t, ids.data(), ids.size(), 1, nullptr, 0, &n), "decode size");
  std::string s(n + 1, '\0');
  ok_or_die(oslo_tokenizer_decode(t, ids.data(), ids.size(), 1, &s[0], s.size(), &n), "decode");
  s.resize(n);
  return s;
}

struct Got {
  std::vector<int64_t> tokens;
  std::string text;
  oslo_finish_reason finish = OSLO_FINISH_NONE;
};

oslo_engine* make_engine(oslo_model* m, oslo_tokenizer* t, oslo_engine_callback cb = nullptr,
                         void* user = nullptr) {
  oslo_engine_options eo;
  ok_or_die(oslo_engine_options_init(&eo, OSLO_ENGINE_OPTIONS_VERSION), "engine options");
  eo.num_blocks = 24;
  eo.block_size = 4;
  eo.max_seqs = 4;
  eo.max_step_tokens = 16;
  eo.tokenizer = t;
  eo.on_event = cb;
  eo.user_data = user;
  oslo_engine* e = nullptr;
  ok_or_die(oslo_engine_create(m, &eo, &e), "engine");
  return e;
}

void compare(const char* how, const std::vector<Case>& cs, const std::vector<int64_t>& ids,
             std::map<int64_t, Got>& got, const std::vector<std::vector<int64_t>>& want,
             oslo_tokenizer* t) {
  bool same = true, text = true, finished = true;
  for (size_t i = 0; i < cs.size(); ++i) {
    const Got& g = got[ids[i]];
    same = same && g.tokens == want[i];
    text = text && g.text == decode(t, g.tokens);
    finished = finished && g.finish == OSLO_FINISH_LENGTH;
  }
  check(same, std::string(how) + ": every request's tokens equal generate's alone");
  check(text, std::string(how) + ": the text pieces concatenate to the decoded tokens");
  check(finished, std::string(how) + ": every request finished by length");
}

void on_event(void* user, const oslo_engine_event* ev) {
  auto* got = static_cast<std::map<int64_t, Got>*>(user);
  Got& g = (*got)[ev->request_id];
  g.tokens.insert(g.tokens.end(), ev->tokens, ev->tokens + ev->num_tokens);
  g.text.append(ev->text, ev->text_length);
  if (ev->finish != OSLO_FINISH_NONE) g.finish = ev->finish;
}

void one_rank() {
  oslo_context* ctx = nullptr;
  ok_or_die(oslo_context_create(nullptr, &ctx), "context");
  oslo_model* m = nullptr;
  ok_or_die(oslo_model_load(ctx, g_fix.c_str(), nullptr, &m), "load");
  oslo_tokenizer* t = nullptr;
  ok_or_die(oslo_tokenizer_load(g_fix.c_str(), &t), "tokenizer");
  const std::vector<Case> cs = cases();
  std::vector<std::vector<int64_t>> want;
  for (const Case& k : cs) want.push_back(generate_alone(m, k));
  {
    Case plain = cs[4];
    plain.repetition_penalty = 1.0f;
    check(generate_alone(m, plain) != want[4],
          "oslo_generate_options v2: repetition_penalty changes generate's tokens");
  }

  // Options.
  oslo_engine_options eo;
  ok_or_die(oslo_engine_options_init(&eo, OSLO_ENGINE_OPTIONS_VERSION), "init");
  check(eo.block_size == 16 && eo.max_seqs == 64 && eo.prefix_caching == 1 &&
            eo.kv_memory_bytes == (int64_t{1} << 30) && eo.idle_wait_ms == 20,
        "engine options defaults");
  named(oslo_engine_options_init(&eo, 0), OSLO_ERR_INVALID_ARGUMENT, "version", "version 0");
  named(oslo_engine_options_init(&eo, 99), OSLO_ERR_INVALID_ARGUMENT, "versions 1 to",
        "version 99");
  oslo_engine* e = nullptr;
  ok_or_die(oslo_engine_options_init(&eo, OSLO_ENGINE_OPTIONS_VERSION), "init");
  eo.block_size = 0;
  named(oslo_engine_create(m, &eo, &e), OSLO_ERR_INVALID_ARGUMENT, "block_size", "block_size 0");
  check(e == nullptr, "failed create leaves *out NULL");
  named(oslo_engine_create(nullptr, nullptr, &e), OSLO_ERR_INVALID_ARGUMENT, "model", "NULL model");

  // By hand.
  {
    e = make_engine(m, t);
    std::vector<int64_t> ids;
    for (const Case& k : cs) {
      const oslo_generate_options o = options_of(k);
      int64_t id = 0;
      ok_or_die(oslo_engine_add(e, k.prompt.data(), k.prompt.size(), &o, nullptr, 0, &id), "add");
      ids.push_back(id);
    }
    std::map<int64_t, Got> got;
    size_t done = 0;
    for (int steps = 0; done < cs.size() && steps < 1000; ++steps) {
      size_t n = 0;
      ok_or_die(oslo_engine_step(e, &n), "step");
      for (size_t i = 0; i < n; ++i) {
        oslo_engine_event ev;
        ok_or_die(oslo_engine_get_event(e, i, &ev), "event");
        on_event(&got, &ev);
        if (ev.finish != OSLO_FINISH_NONE) ++done;
      }
    }
    compare("by hand", cs, ids, got, want, t);
    oslo_engine_event ev;
    named(oslo_engine_get_event(e, 1000, &ev), OSLO_ERR_INVALID_ARGUMENT, "out of range",
          "event index out of range");
    size_t nt = 0, tl = 0;
    oslo_finish_reason f;
    named(oslo_engine_next(e, ids[0], 0, nullptr, 0, &nt, nullptr, 0, &tl, &f),
          OSLO_ERR_INVALID_ARGUMENT, "stepped by hand", "next on an engine stepped by hand");
    named(oslo_engine_run(e), OSLO_ERR_INVALID_ARGUMENT, "stepped by hand", "run after step");
    oslo_engine_stats st;
    ok_or_die(oslo_engine_get_stats(e, &st), "stats");
    check(st.running == 0 && st.waiting == 0 && st.blocks_total == 24 && st.block_size == 4 &&
              st.generated_tokens > 0 && st.steps > 0,
          "stats after the run");
    oslo_engine_destroy(e);
  }

  // Driven from one thread: next() steps itself; 1 token and 5 bytes of
  // text at a time.
  {
    e = make_engine(m, t);
    std::vector<int64_t> ids;
    for (const Case& k : cs) {
      const oslo_generate_options o = options_of(k);
      int64_t id = 0;
      ok_or_die(oslo_engine_add(e, k.prompt.data(), k.prompt.size(), &o, nullptr, 0, &id), "add");
      ids.push_back(id);
    }
    oslo_request_state s;
    ok_or_die(oslo_engine_request_state(e, ids[0], &s), "state");
    check(s == OSLO_REQUEST_WAITING, "a request not yet stepped is waiting");
    size_t nt = 0, tl = 0;
    oslo_finish_reason f;
    int64_t tok[1];
    char text[5];
    named(oslo_engine_next(e, ids[0], 0, tok, 1, &nt, text, 5, &tl, &f), OSLO_ERR_TIMEOUT,
          "within 0 ms", "next with timeout 0 and nothing out yet");
    named(oslo_engine_next(e, ids[0], 10, tok, 1, &nt, text, 3, &tl, &f), OSLO_ERR_INVALID_ARGUMENT,
          "text_capacity", "next with text_capacity 3");
    std::map<int64_t, Got> got;
    // Read in reverse: the later requests' output queues meanwhile.
    for (size_t i = cs.size(); i-- > 0;) {
      Got& g = got[ids[i]];
      while (g.finish == OSLO_FINISH_NONE) {
        ok_or_die(oslo_engine_next(e, ids[i], 60000, tok, 1, &nt, text, 5, &tl, &f), "next");
        g.tokens.insert(g.tokens.end(), tok, tok + nt);
        g.text.append(text, tl);
        g.finish = f;
      }
      ok_or_die(oslo_engine_request_state(e, ids[i], &s), "state");
      check(s == OSLO_REQUEST_UNKNOWN, "a request read to its end is forgotten");
    }
    compare("next() from one thread", cs, ids, got, want, t);
    named(oslo_engine_next(e, ids[0], 10, tok, 1, &nt, text, 5, &tl, &f), OSLO_ERR_INVALID_ARGUMENT,
          "not live", "next on a forgotten request");
    size_t n = 0;
    named(oslo_engine_step(e, &n), OSLO_ERR_INVALID_ARGUMENT, "driven", "step on a driven engine");

    // Text in, cancel mid-stream, states.
    oslo_generate_options o;
    ok_or_die(oslo_generate_options_init(&o, OSLO_GENERATE_OPTIONS_VERSION), "opts");
    o.max_new_tokens = 30;
    int64_t id = 0;
    ok_or_die(oslo_engine_add_text(e, "Hello world, this is", 0, &o, nullptr, 0, &id), "add_text");
    ok_or_die(oslo_engine_next(e, id, 60000, tok, 1, &nt, text, 5, &tl, &f), "next");
    ok_or_die(oslo_engine_request_state(e, id, &s), "state");
    check(s == OSLO_REQUEST_RUNNING && nt == 1, "a request that produced a token is running");
    int found = 0;
    ok_or_die(oslo_engine_cancel(e, id, &found), "cancel");
    check(found == 1, "cancel finds the live request");
    Got g;
    while (g.finish == OSLO_FINISH_NONE) {
      ok_or_die(oslo_engine_next(e, id, 60000, tok, 1, &nt, text, 5, &tl, &f), "next");
      g.tokens.insert(g.tokens.end(), tok, tok + nt);
      g.finish = f;
    }
    check(g.finish == OSLO_FINISH_CANCELLED && g.tokens.size() < 29,
          "cancelled mid-stream: finish cancelled, " + std::to_string(g.tokens.size()) +
              " more tokens");
    ok_or_die(oslo_engine_cancel(e, id, &found), "cancel again");
    check(found == 0, "cancel of a finished request finds nothing");

    // Bad requests, each named.
    const int64_t bad[] = {1, 2, 100000};
    named(oslo_engine_add(e, bad, 3, nullptr, nullptr, 0, &id), OSLO_ERR_INVALID_ARGUMENT,
          "outside the vocabulary", "a token outside the vocabulary");
    named(oslo_engine_add(e, bad, 0, nullptr, nullptr, 0, &id), OSLO_ERR_INVALID_ARGUMENT,
          "empty prompt", "an empty prompt");
    o.num_beams = 2;
    named(oslo_engine_add(e, bad, 2, &o, nullptr, 0, &id), OSLO_ERR_INVALID_ARGUMENT, "num_beams",
          "beam search");
    o.num_beams = 1;
    o.max_new_tokens = 1000000;
    named(oslo_engine_add(e, bad, 2, &o, nullptr, 0, &id), OSLO_ERR_INVALID_ARGUMENT, "positions",
          "max_new_tokens beyond the positions");
    o.max_new_tokens = 5;
    const char* stops[] = {"x", nullptr};
    named(oslo_engine_add(e, bad, 2, &o, stops, 2, &id), OSLO_ERR_INVALID_ARGUMENT,
          "stop string 1 is NULL", "a NULL stop string");
    named(oslo_engine_add_text(e, "\xff\xfe", 0, &o, nullptr, 0, &id), OSLO_ERR_INVALID_ARGUMENT,
          "UTF-8", "a prompt that is not UTF-8");
    ok_or_die(oslo_engine_shutdown(e), "shutdown");
    named(oslo_engine_add(e, bad, 2, &o, nullptr, 0, &id), OSLO_ERR_INVALID_ARGUMENT, "shut down",
          "add after shutdown");
    oslo_engine_destroy(e);
  }

  // Driven by oslo_engine_run on a thread, 4 readers adding and reading
  // their own requests at once; stop strings.
  {
    e = make_engine(m, t);
    std::thread runner([&] { ok_or_die(oslo_engine_run(e), "run"); });
    std::mutex mu;
    std::map<int64_t, Got> got;
    std::vector<int64_t> ids(cs.size());
    std::vector<std::thread> readers;
    for (int r = 0; r < 4; ++r)
      readers.emplace_back([&, r] {
        for (size_t i = static_cast<size_t>(r); i < cs.size(); i += 4) {
          const oslo_generate_options o = options_of(cs[i]);
          int64_t id = 0;
          ok_or_die(
              oslo_engine_add(e, cs[i].prompt.data(), cs[i].prompt.size(), &o, nullptr, 0, &id),
              "add");
          Got g;
          int64_t tok[8];
          char text[64];
          size_t nt = 0, tl = 0;
          oslo_finish_reason f;
          while (g.finish == OSLO_FINISH_NONE) {
            ok_or_die(oslo_engine_next(e, id, 60000, tok, 8, &nt, text, 64, &tl, &f), "next");
            g.tokens.insert(g.tokens.end(), tok, tok + nt);
            g.text.append(text, tl);
            g.finish = f;
          }
          std::lock_guard<std::mutex> lock(mu);
          ids[i] = id;
          got[id] = g;
        }
      });
    for (auto& th : readers) th.join();
    compare("run() + 4 reader threads", cs, ids, got, want, t);
    // A stop string: the text ends before it, finish stop.
    Got full;
    {
      oslo_generate_options o = options_of(cs[2]);
      o.max_new_tokens = 12;
      const Case k{cs[2].prompt, 12, 0, 0};
      const std::string text = decode(t, generate_alone(m, k));
      const std::string stop = text.substr(text.size() / 2, 2);
      const char* stops[] = {stop.c_str()};
      int64_t id = 0;
      ok_or_die(oslo_engine_add(e, k.prompt.data(), k.prompt.size(), &o, stops, 1, &id), "add");
      int64_t tok[8];
      char buf[64];
      size_t nt = 0, tl = 0;
      oslo_finish_reason f;
      while (full.finish == OSLO_FINISH_NONE) {
        ok_or_die(oslo_engine_next(e, id, 60000, tok, 8, &nt, buf, 64, &tl, &f), "next");
        full.text.append(buf, tl);
        full.finish = f;
      }
      check(full.finish == OSLO_FINISH_STOP && full.text == text.substr(0, text.find(stop)),
            "a stop string: finish stop, the text ends before it");
    }
    ok_or_die(oslo_engine_shutdown(e), "shutdown");
    runner.join();
    check(true, "run() returns after shutdown");
    oslo_engine_destroy(e);
  }

  // The callback: every event, on the stepping thread; next() refused.
  {
    std::map<int64_t, Got> got;
    e = make_engine(m, t, on_event, &got);
    std::vector<int64_t> ids;
    for (const Case& k : cs) {
      const oslo_generate_options o = options_of(k);
      int64_t id = 0;
      ok_or_die(oslo_engine_add(e, k.prompt.data(), k.prompt.size(), &o, nullptr, 0, &id), "add");
      ids.push_back(id);
    }
    size_t nt = 0, tl = 0;
    oslo_finish_reason f;
    named(oslo_engine_next(e, ids[0], 10, nullptr, 0, &nt, nullptr, 0, &tl, &f),
          OSLO_ERR_INVALID_ARGUMENT, "on_event", "next with a callback");
    for (int steps = 0; steps < 1000; ++steps) {
      size_t n = 0;
      ok_or_die(oslo_engine_step(e, &n), "step");
      bool all = true;
      for (int64_t id : ids) all = all && got[id].finish != OSLO_FINISH_NONE;
      if (all) break;
    }
    compare("on_event callback", cs, ids, got, want, t);
    oslo_engine_destroy(e);
  }
  // The engine keeps the tokenizer and the model alive.
  {
    e = make_engine(m, t);
    oslo_tokenizer_destroy(t);
    oslo_model_destroy(m);
    oslo_context_destroy(ctx);
    oslo_generate_options o = options_of(cs[0]);
    int64_t id = 0;
    ok_or_die(oslo_engine_add_text(e, "Hello", 0, &o, nullptr, 0, &id), "add after destroys");
    int64_t tok[64];
    char text[256];
    size_t nt = 0, tl = 0;
    oslo_finish_reason f = OSLO_FINISH_NONE;
    size_t total = 0;
    while (f == OSLO_FINISH_NONE) {
      ok_or_die(oslo_engine_next(e, id, 60000, tok, 64, &nt, text, 256, &tl, &f), "next");
      total += nt;
    }
    check(total == static_cast<size_t>(cs[0].max_new),
          "an engine outlives its model, context and tokenizer handles");
    oslo_engine_destroy(e);
  }
}

// 2 ranks as threads (TP 2): rank 1 runs, rank 0 adds and reads.
void two_ranks(bool rank_gone) {
  const std::vector<Case> cs = cases();
  std::vector<std::vector<int64_t>> want;
  std::map<int64_t, Got> got;
  std::vector<int64_t> ids;
  oslo_status follower = OSLO_OK, leader_read = OSLO_OK;
  std::string leader_msg;
  std::string tmpl = g_tmp + "/rdv-XXXXXX";
  if (!mkdtemp(&tmpl[0])) {
    std::perror("mkdtemp");
    std::exit(1);
  }
  const std::string store = tmpl + "/store";
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      const std::string cfg = "{\"rank\": " + std::to_string(r) +
                              ", \"world_size\": 2, \"tensor_parallel_size\": 2, "
                              "\"init_method\": \"file://" +
                              store + "\", \"timeout_seconds\": " + (rank_gone ? "3" : "60") +
                              ", \"num_threads\": 1}";
      oslo_context* ctx = nullptr;
      ok_or_die(oslo_context_create(cfg.c_str(), &ctx), "context");
      oslo_model* m = nullptr;
      ok_or_die(oslo_model_load(ctx, g_fix.c_str(), nullptr, &m), "load");
      if (r == 0)
        for (const Case& k : cs) want.push_back(generate_alone(m, k));
      else
        for (const Case& k : cs) generate_alone(m, k);
      oslo_engine* e = make_engine(m, nullptr);
      if (r == 1) {
        if (rank_gone) {
          // One step with rank 0, then this rank stops answering.
          oslo_engine_destroy(e);
        } else {
          follower = oslo_engine_run(e);
          oslo_engine_destroy(e);
        }
      } else {
        for (const Case& k : cs) {
          const oslo_generate_options o = options_of(k);
          int64_t id = 0;
          ok_or_die(oslo_engine_add(e, k.prompt.data(), k.prompt.size(), &o, nullptr, 0, &id),
                    "add");
          ids.push_back(id);
        }
        for (int64_t id : ids) {
          Got& g = got[id];
          int64_t tok[8];
          size_t nt = 0, tl = 0;
          oslo_finish_reason f;
          while (g.finish == OSLO_FINISH_NONE) {
            const oslo_status st = oslo_engine_next(e, id, 60000, tok, 8, &nt, nullptr, 0, &tl, &f);
            if (st != OSLO_OK) {
              leader_read = st;
              leader_msg = oslo_last_error();
              g.finish = OSLO_FINISH_ERROR;
              break;
            }
            g.tokens.insert(g.tokens.end(), tok, tok + nt);
            g.finish = f;
          }
          if (leader_read != OSLO_OK) break;
        }
        oslo_engine_destroy(e);  // shuts rank 1's engine down
      }
      oslo_model_destroy(m);
      oslo_context_destroy(ctx);
    });
  for (auto& t : th) t.join();
  if (rank_gone) {
    check(leader_read == OSLO_ERR_COMM || leader_read == OSLO_ERR_TIMEOUT,
          std::string("TP 2, rank 1 gone: rank 0's read fails: ") +
              oslo_status_string(leader_read) + ": " + leader_msg.substr(0, 160));
    return;
  }
  bool same = true;
  for (size_t i = 0; i < cs.size(); ++i) same = same && got[ids[i]].tokens == want[i];
  check(same, "TP 2: every request's tokens equal generate's alone");
  check(follower == OSLO_OK, "TP 2: rank 1's oslo_engine_run returns OK after rank 0's shutdown");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: serve_capi_test GPT2_TINY_DIR TEMP_DIR\n");
    return 2;
  }
  g_fix = argv[1];
  g_tmp = argv[2];
  std::filesystem::create_directories(g_tmp);
  one_rank();
  two_ranks(false);
  two_ranks(true);
  std::printf("%d failure(s)\n", g_fail);
  return g_fail ? 1 : 0;
}
