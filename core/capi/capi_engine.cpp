// C shims: the serving engine (core/serve: Engine, and Driver for the ways
// its output is taken).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/capi/generate_options.hpp"
#include "core/capi/handles.hpp"
#include "core/capi/options.hpp"
#include "core/serve/driver.hpp"
#include "core/serve/engine.hpp"

using oslo::capi::guard;
using oslo::capi::need;

struct oslo_engine {
  // Kept alive while the engine lives: it runs the model and decodes with
  // the tokenizer (released after the engine, declared first).
  std::shared_ptr<oslo::Model> model;
  std::shared_ptr<oslo::Tokenizer> tokenizer;
  std::unique_ptr<oslo::serve::Engine> engine;
  std::unique_ptr<oslo::serve::Driver> driver;
  oslo_engine_callback on_event = nullptr;
  void* user_data = nullptr;
};

namespace {

OSLO_OPTIONS(
    kEngineOptions, oslo_engine_options, OSLO_ENGINE_OPTIONS_VERSION,
    [](oslo_engine_options& o) {
      o.kv_memory_bytes = int64_t{1} << 30;
      o.block_size = 16;
      o.max_seqs = 64;
      o.max_step_tokens = 512;
      o.prefix_caching = 1;
      o.idle_wait_ms = 20;
      o.tokenizer = nullptr;
      o.on_event = nullptr;
      o.user_data = nullptr;
      o.kv_dtype = OSLO_DTYPE_F32;
    },
    OSLO_OPTIONS_END(oslo_engine_options, user_data),
    OSLO_OPTIONS_END(oslo_engine_options, kv_dtype));

oslo_finish_reason finish_of(oslo::serve::Finish f) {
  switch (f) {
    case oslo::serve::Finish::kNone: return OSLO_FINISH_NONE;
    case oslo::serve::Finish::kLength: return OSLO_FINISH_LENGTH;
    case oslo::serve::Finish::kEos: return OSLO_FINISH_EOS;
    case oslo::serve::Finish::kStop: return OSLO_FINISH_STOP;
    case oslo::serve::Finish::kCancelled: return OSLO_FINISH_CANCELLED;
    case oslo::serve::Finish::kError: return OSLO_FINISH_ERROR;
  }
  return OSLO_FINISH_ERROR;
}

void fill_event(const oslo::serve::Event& e, oslo_engine_event* out) {
  out->request_id = e.id;
  out->tokens = e.tokens.data();
  out->num_tokens = e.tokens.size();
  out->text = e.text.c_str();
  out->text_length = e.text.size();
  out->finish = finish_of(e.finish);
  out->status = e.status;
  out->error = e.error.c_str();
}

oslo::serve::Engine& engine_of(const oslo_engine* e, const char* fn) {
  need(e, fn, "engine");
  return *e->engine;
}

int64_t add_request(oslo_engine* engine, std::vector<int64_t> prompt,
                    const oslo_generate_options* options, const char* const* stop, size_t num_stop,
                    const char* fn) {
  if (num_stop > 0) need(stop, fn, "stop");
  if (num_stop > 64)
    oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": ", num_stop, " stop strings (at most 64)");
  oslo::serve::Request r;
  r.prompt = std::move(prompt);
  r.options = oslo::capi::read_generate_options(options, engine->model->config(), fn);
  for (size_t i = 0; i < num_stop; ++i) {
    if (!stop[i]) oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": stop string ", i, " is NULL");
    r.stop.emplace_back(stop[i]);
  }
  return engine->driver->add(std::move(r));
}

}  // namespace

extern "C" {

oslo_status oslo_engine_options_init(oslo_engine_options* options, unsigned int version) {
  return kEngineOptions.init(options, version);
}

oslo_status oslo_engine_create(oslo_model* model, const oslo_engine_options* options,
                               oslo_engine** out) {
  if (out) *out = nullptr;
  return guard([&] {
    const char* fn = "oslo_engine_create";
    need(model, fn, "model");
    need(out, fn, "out");
    const oslo_engine_options o = kEngineOptions.read_or_defaults(options, fn, "options");
    auto h = std::make_unique<oslo_engine>();
    h->model = model->impl;
    if (o.tokenizer) h->tokenizer = o.tokenizer->impl;
    oslo::serve::EngineOptions eo;
    eo.num_blocks = o.num_blocks;
    eo.kv_memory_bytes = o.kv_memory_bytes;
    eo.block_size = o.block_size;
    eo.max_seqs = o.max_seqs;
    eo.max_step_tokens = o.max_step_tokens;
    eo.prefix_caching = o.prefix_caching != 0;
    eo.idle_wait_ms = o.idle_wait_ms;
    eo.kv_dtype = o.kv_dtype;
    oslo::serve::TextStream::Decode decode;
    if (h->tokenizer) {
      const oslo::Tokenizer* t = h->tokenizer.get();
      decode = [t](const int64_t* ids, size_t n) { return t->decode(ids, n, true); };
    }
    oslo::Model& m = *h->model;
    h->engine = std::make_unique<oslo::serve::Engine>(m.inference(), m.stack(), eo, decode);
    oslo::serve::Driver::Callback cb;
    if (o.on_event) {
      h->on_event = o.on_event;
      h->user_data = o.user_data;
      oslo_engine* raw = h.get();
      cb = [raw](const oslo::serve::Event& e) {
        oslo_engine_event ev;
        fill_event(e, &ev);
        raw->on_event(raw->user_data, &ev);
      };
    }
    h->driver = std::make_unique<oslo::serve::Driver>(*h->engine, cb);
    *out = h.release();
  });
}

void oslo_engine_destroy(oslo_engine* engine) {
  if (!engine) return;
  // Rank 0: end the other ranks' engines too (one last step carries the
  // shutdown), unless already shut down. Failures are dropped: nothing
  // crosses the ABI from here.
  try {
    oslo::serve::Engine& e = *engine->engine;
    if (e.leader() && !e.stopped()) {
      e.shutdown();
      std::vector<oslo::serve::Event> events;
      e.step(events);
    }
  } catch (...) {
  }
  delete engine;
}

oslo_status oslo_engine_add(oslo_engine* engine, const int64_t* prompt_ids, size_t prompt_length,
                            const oslo_generate_options* options, const char* const* stop,
                            size_t num_stop, int64_t* out_request_id) {
  return guard([&] {
    const char* fn = "oslo_engine_add";
    engine_of(engine, fn);
    need(out_request_id, fn, "out_request_id");
    if (prompt_length > 0) need(prompt_ids, fn, "prompt_ids");
    if (prompt_length > (size_t{1} << 24))
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": prompt_length ", prompt_length,
                 " (at most 2^24)");
    *out_request_id =
        add_request(engine, std::vector<int64_t>(prompt_ids, prompt_ids + prompt_length), options,
                    stop, num_stop, fn);
  });
}

oslo_status oslo_engine_add_text(oslo_engine* engine, const char* prompt, int add_special_tokens,
                                 const oslo_generate_options* options, const char* const* stop,
                                 size_t num_stop, int64_t* out_request_id) {
  return guard([&] {
    const char* fn = "oslo_engine_add_text";
    engine_of(engine, fn);
    need(prompt, fn, "prompt");
    need(out_request_id, fn, "out_request_id");
    if (!engine->tokenizer)
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn,
                 ": the engine has no tokenizer (oslo_engine_options.tokenizer)");
    std::vector<int64_t> ids = engine->tokenizer->encode(prompt, add_special_tokens != 0);
    *out_request_id = add_request(engine, std::move(ids), options, stop, num_stop, fn);
  });
}

oslo_status oslo_engine_cancel(oslo_engine* engine, int64_t request_id, int* found) {
  if (found) *found = 0;
  return guard([&] {
    const bool ok = engine_of(engine, "oslo_engine_cancel").cancel(request_id);
    if (found) *found = ok ? 1 : 0;
  });
}

oslo_status oslo_engine_shutdown(oslo_engine* engine) {
  return guard([&] { engine_of(engine, "oslo_engine_shutdown").shutdown(); });
}

oslo_status oslo_engine_step(oslo_engine* engine, size_t* num_events) {
  if (num_events) *num_events = 0;
  return guard([&] {
    engine_of(engine, "oslo_engine_step");
    const auto& events = engine->driver->step();
    if (num_events) *num_events = events.size();
  });
}

oslo_status oslo_engine_get_event(const oslo_engine* engine, size_t index,
                                  oslo_engine_event* event) {
  return guard([&] {
    const char* fn = "oslo_engine_get_event";
    engine_of(engine, fn);
    need(event, fn, "event");
    const auto& events = engine->driver->last_events();
    if (index >= events.size())
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": index ", index, " out of range: the last step ",
                 "has ", events.size(), " events");
    fill_event(events[index], event);
  });
}

oslo_status oslo_engine_run(oslo_engine* engine) {
  return guard([&] {
    engine_of(engine, "oslo_engine_run");
    engine->driver->run();
  });
}

oslo_status oslo_engine_next(oslo_engine* engine, int64_t request_id, int64_t timeout_ms,
                             int64_t* tokens, size_t tokens_capacity, size_t* num_tokens,
                             char* text, size_t text_capacity, size_t* text_length,
                             oslo_finish_reason* finish) {
  if (num_tokens) *num_tokens = 0;
  if (text_length) *text_length = 0;
  if (finish) *finish = OSLO_FINISH_NONE;
  if (text && text_capacity > 0) text[0] = '\0';
  oslo_status failed = OSLO_OK;
  std::string message;
  const oslo_status st = guard([&] {
    const char* fn = "oslo_engine_next";
    engine_of(engine, fn);
    need(num_tokens, fn, "num_tokens");
    need(text_length, fn, "text_length");
    need(finish, fn, "finish");
    if (tokens_capacity > 0) need(tokens, fn, "tokens");
    if (text_capacity > 0) need(text, fn, "text");
    oslo::serve::Driver::Output o = engine->driver->next(request_id, timeout_ms, tokens_capacity,
                                                         text_capacity > 0 ? text_capacity - 1 : 0);
    std::copy(o.tokens.begin(), o.tokens.end(), tokens);
    *num_tokens = o.tokens.size();
    if (text_capacity > 0) {
      std::memcpy(text, o.text.data(), o.text.size());
      text[o.text.size()] = '\0';
    }
    *text_length = o.text.size();
    *finish = finish_of(o.finish);
    if (o.finish == oslo::serve::Finish::kError) {
      failed = o.status == OSLO_OK ? OSLO_ERR_INTERNAL : o.status;
      message = o.error;
    }
  });
  if (st != OSLO_OK) return st;
  if (failed != OSLO_OK) {
    oslo::capi::set_last_error(message);
    return failed;
  }
  return OSLO_OK;
}

oslo_status oslo_engine_request_state(const oslo_engine* engine, int64_t request_id,
                                      oslo_request_state* state) {
  if (state) *state = OSLO_REQUEST_UNKNOWN;
  return guard([&] {
    const char* fn = "oslo_engine_request_state";
    engine_of(engine, fn);
    need(state, fn, "state");
    *state = static_cast<oslo_request_state>(engine->driver->state(request_id));
  });
}

oslo_status oslo_engine_get_stats(const oslo_engine* engine, oslo_engine_stats* stats) {
  return guard([&] {
    const char* fn = "oslo_engine_get_stats";
    const oslo::serve::EngineStats s = engine_of(engine, fn).stats();
    need(stats, fn, "stats");
    stats->running = s.running;
    stats->waiting = s.waiting;
    stats->blocks_used = s.blocks_used;
    stats->blocks_total = s.blocks_total;
    stats->block_size = s.block_size;
    stats->cached_tokens = s.cached_tokens;
    stats->kv_bytes_used = s.kv_bytes_used;
    stats->steps = s.steps;
    stats->prompt_tokens = s.prompt_tokens;
    stats->generated_tokens = s.generated_tokens;
    stats->prefix_queries = s.prefix_queries;
    stats->prefix_hits = s.prefix_hits;
  });
}

}  // extern "C"
