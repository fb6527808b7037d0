/*
 * engine.i - the serving engine of include/oslo.h (oslo_engine_*) for every
 * language; included by bindings/oslo.i just before oslo.h, after the
 * typemaps. It declares the handle itself, after its support code: SWIG
 * emits the %extend methods' code where the class is declared.
 *
 * Engine is the SWIG class of oslo_engine. Its methods are the raw forms the
 * language layers build their idioms on (Python: oslo/serve.py, Java:
 * java/oslo_java_engine.i and org/oslo/Request.java, Go: oslo/engine.go):
 *   Engine(model, options, tokenizer)  oslo_engine_create (options None:
 *                                      the defaults; tokenizer may be None)
 *   add / add_text                     oslo_engine_add / _add_text; the stop
 *                                      strings travel back to back in one
 *                                      buffer with their lengths (int64)
 *   next                               oslo_engine_next into caller buffers;
 *                                      a plain timeout is no error here
 *   step / event / event_error         oslo_engine_step and _get_event
 *   run, cancel, shutdown, state, stats
 * Every call records its status as the rest of oslo.i does, so each
 * language's %exception turns a failure into its native error. Python runs
 * every call without the GIL (next and run block); Java and Go call them
 * outside any lock of theirs.
 *
 * What must precede oslo.h (the names, the fields not exposed, the
 * typemaps of the buffers: stop, stop_lengths, out_text) is in oslo.i.
 *
 * Lifetime: oslo_engine_destroy must not run while another call uses the
 * engine. The language layers count the calls in flight and destroy the
 * engine when the last one returns after close() (which first shuts the
 * engine down on rank 0, so next and run return soon).
 */

%{
/* Stop strings held back to back in `stop` (UTF-8), string i being
   lengths[i] bytes (int64, one per string), as NUL-terminated copies:
   v[0 .. n) point into one block. */
typedef struct bind_strings {
  char **v;
  size_t n;
} bind_strings;

static void bind_strings_free(bind_strings *s) {
  if (s->v) free(s->v[0] ? (void *)s->v[0] : NULL);
  free((void *)s->v);
  s->v = NULL;
  s->n = 0;
}

/* Fills *s; on failure records the error (named after `what`) and returns 0. */
static int bind_strings_get(const char *what, const void *stop, size_t stop_bytes,
                            const void *lengths, size_t lengths_bytes, bind_strings *s) {
  const int64_t *lens = (const int64_t *)lengths;
  const char *src = (const char *)stop;
  size_t n = lengths_bytes / 8, off = 0, i;
  char *block;
  s->v = NULL;
  s->n = 0;
  if (lengths_bytes % 8) {
    oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                   "%s: stop lengths hold %llu bytes, not a whole number of int64", what,
                   (unsigned long long)lengths_bytes);
    return 0;
  }
  if (n == 0) return 1;
  s->v = (char **)calloc(n, sizeof *s->v);
  block = (char *)malloc(stop_bytes + n);
  if (!s->v || !block) {
    free(block);
    free((void *)s->v);
    s->v = NULL;
    oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "%s: %llu stop strings", what, (unsigned long long)n);
    return 0;
  }
  for (i = 0; i < n; ++i) {
    char *dst = block + off + i;
    if (lens[i] < 0 || (unsigned long long)lens[i] > stop_bytes - off) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                     "%s: stop string %llu's length %lld runs past the %llu bytes given", what,
                     (unsigned long long)i, (long long)lens[i], (unsigned long long)stop_bytes);
      free(block);
      free((void *)s->v);
      s->v = NULL;
      return 0;
    }
    if (lens[i] && memchr(src + off, 0, (size_t)lens[i])) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "%s: stop string %llu holds a NUL byte", what,
                     (unsigned long long)i);
      free(block);
      free((void *)s->v);
      s->v = NULL;
      return 0;
    }
    if (lens[i]) memcpy(dst, src + off, (size_t)lens[i]);
    dst[lens[i]] = 0;
    s->v[i] = dst;
    off += (size_t)lens[i];
  }
  s->n = n;
  return 1;
}

/* The generate options of an add: a copy of *options (NULL: the defaults)
   with the EOS ids (int64; NULL: the model config's). */
static int bind_add_options(const char *what, const oslo_generate_options *options,
                            const void *eos, size_t eos_bytes, oslo_generate_options *o) {
  if (options) {
    *o = *options;
    o->version = OSLO_GENERATE_OPTIONS_VERSION; /* made by GenerateOptions(): ours */
  } else if (!oslo_bind_check(oslo_generate_options_init(o, OSLO_GENERATE_OPTIONS_VERSION))) {
    return 0;
  }
  if (eos_bytes % 8) {
    oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                   "%s: eos_token_ids holds %llu bytes, not a whole number of int64", what,
                   (unsigned long long)eos_bytes);
    return 0;
  }
  o->eos_token_ids = eos ? (const int64_t *)eos : NULL;
  o->num_eos_token_ids = eos ? eos_bytes / 8 : 0;
  return 1;
}
%}

/* The handle, declared to SWIG only (the real type stays opaque). */
struct oslo_engine {};

/* Limits of an engine with their defaults (oslo_engine_options_init). */
%extend oslo_engine_options {
  oslo_engine_options() {
    oslo_engine_options *o = (oslo_engine_options *)calloc(1, sizeof *o);
    if (!o) {
      oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "EngineOptions: %llu bytes",
                     (unsigned long long)sizeof *o);
      return NULL;
    }
    if (!oslo_bind_check(oslo_engine_options_init(o, OSLO_ENGINE_OPTIONS_VERSION))) {
      free(o);
      return NULL;
    }
    return o;
  }
  ~oslo_engine_options() { free($self); }
}

%extend oslo_engine_stats {
  ~oslo_engine_stats() { free($self); }
}

%newobject oslo_engine::m_stats;
%extend oslo_engine {
  /* oslo_engine_create; options NULL: the defaults; tokenizer NULL: token
     ids only (no text, no stop strings). Not collective. */
  oslo_engine(oslo_model *model, const oslo_engine_options *options,
              const oslo_tokenizer *tokenizer) {
    oslo_engine_options o;
    oslo_engine *e = NULL;
    if (options) {
      o = *options;
      o.version = OSLO_ENGINE_OPTIONS_VERSION; /* made by EngineOptions(): ours */
    } else if (!oslo_bind_check(oslo_engine_options_init(&o, OSLO_ENGINE_OPTIONS_VERSION))) {
      return NULL;
    }
    o.tokenizer = tokenizer;
    o.on_event = NULL;
    o.user_data = NULL;
    oslo_bind_check(oslo_engine_create(model, &o, &e));
    return e;
  }
  ~oslo_engine() { oslo_engine_destroy($self); }
  /* oslo_engine_add: prompt_ids int64; eos_token_ids int64 (NULL: the
     config's); stop: the stop strings back to back, stop_lengths their
     byte lengths (int64; NULL: none). Returns the request id. */
  int64_t m_add(const void *prompt_ids, size_t prompt_ids_bytes,
                const oslo_generate_options *options, const void *eos_token_ids,
                size_t eos_token_ids_bytes, const void *stop, size_t stop_bytes,
                const void *stop_lengths, size_t stop_lengths_bytes) {
    oslo_generate_options o;
    bind_strings s;
    int64_t id = 0;
    if (prompt_ids_bytes % 8) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                     "add: prompt_ids holds %llu bytes, not a whole number of int64",
                     (unsigned long long)prompt_ids_bytes);
      return 0;
    }
    if (!bind_add_options("add", options, eos_token_ids, eos_token_ids_bytes, &o)) return 0;
    if (!bind_strings_get("add", stop, stop_bytes, stop_lengths, stop_lengths_bytes, &s)) return 0;
    oslo_bind_check(oslo_engine_add($self, (const int64_t *)prompt_ids, prompt_ids_bytes / 8, &o,
                                    (const char *const *)s.v, s.n, &id));
    bind_strings_free(&s);
    return id;
  }
  /* oslo_engine_add_text: text is UTF-8 (without a NUL); the rest as add. */
  int64_t m_add_text(const void *text, size_t text_bytes, int add_special_tokens,
                     const oslo_generate_options *options, const void *eos_token_ids,
                     size_t eos_token_ids_bytes, const void *stop, size_t stop_bytes,
                     const void *stop_lengths, size_t stop_lengths_bytes) {
    oslo_generate_options o;
    bind_strings s;
    char *prompt;
    int64_t id = 0;
    if (text && memchr(text, 0, text_bytes)) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "add_text: the prompt holds a NUL byte");
      return 0;
    }
    if (!bind_add_options("add_text", options, eos_token_ids, eos_token_ids_bytes, &o)) return 0;
    prompt = (char *)malloc(text_bytes + 1);
    if (!prompt) {
      oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "add_text: %llu bytes",
                     (unsigned long long)text_bytes + 1);
      return 0;
    }
    if (text_bytes) memcpy(prompt, text, text_bytes);
    prompt[text_bytes] = 0;
    if (bind_strings_get("add_text", stop, stop_bytes, stop_lengths, stop_lengths_bytes, &s)) {
      oslo_bind_check(oslo_engine_add_text($self, text ? prompt : NULL, add_special_tokens, &o,
                                           (const char *const *)s.v, s.n, &id));
      bind_strings_free(&s);
    }
    free(prompt);
    return id;
  }
  /* oslo_engine_cancel: returns 1 when the request was live, else 0. */
  int m_cancel(int64_t request_id) {
    int found = 0;
    oslo_bind_check(oslo_engine_cancel($self, request_id, &found));
    return found;
  }
  void m_shutdown() { oslo_bind_check(oslo_engine_shutdown($self)); }
  /* oslo_engine_step: returns the number of events (read with event). */
  int64_t m_step() {
    size_t n = 0;
    oslo_bind_check(oslo_engine_step($self, &n));
    return (int64_t)n;
  }
  /* Event `index` of the last step: out (int64 [5]) receives its request
     id, its number of tokens, its text's length in bytes, its finish
     reason and its status; the tokens go to out_tokens (int64) and the text
     to out_text when they are large enough (else only out is written: call
     again with larger ones). The error message is event_error's. */
  void m_event(int64_t index, void *out, size_t out_bytes, void *out_tokens,
               size_t out_tokens_bytes, void *out_text, size_t out_text_bytes) {
    oslo_engine_event ev;
    int64_t *info = (int64_t *)out;
    if (!oslo_bind_bytes("event: out", out_bytes, 5 * 8)) return;
    if (index < 0) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "event: index %lld is negative",
                     (long long)index);
      return;
    }
    if (!oslo_bind_check(oslo_engine_get_event($self, (size_t)index, &ev))) return;
    info[0] = ev.request_id;
    info[1] = (int64_t)ev.num_tokens;
    info[2] = (int64_t)ev.text_length;
    info[3] = (int64_t)ev.finish;
    info[4] = (int64_t)ev.status;
    if (out_tokens && out_tokens_bytes >= ev.num_tokens * 8 && ev.num_tokens)
      memcpy(out_tokens, ev.tokens, ev.num_tokens * 8);
    if (out_text && out_text_bytes >= ev.text_length && ev.text_length)
      memcpy(out_text, ev.text, ev.text_length);
  }
  /* The error message of event `index` of the last step ("" unless it
     finished with FinishReason ERROR). */
  const char *m_event_error(int64_t index) {
    oslo_engine_event ev;
    if (index < 0) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "event_error: index %lld is negative",
                     (long long)index);
      return NULL;
    }
    if (!oslo_bind_check(oslo_engine_get_event($self, (size_t)index, &ev))) return NULL;
    return ev.error ? ev.error : "";
  }
  /* oslo_engine_run: steps until the engine is shut down. */
  void m_run() { oslo_bind_check(oslo_engine_run($self)); }
  /* oslo_engine_next: takes request_id's output into out_tokens (int64)
     and out_text (UTF-8, whole characters; the call writes a NUL after
     them, so it holds one byte fewer), waiting up to timeout_ms. out
     (int64 [3]) receives the numbers of tokens and text bytes taken and the
     finish reason. Returns 1 when output was taken, 0 when none came within
     timeout_ms (nothing taken; not an error here). The request's failure
     is the call's error. */
  int m_next(int64_t request_id, int64_t timeout_ms, void *out, size_t out_bytes, void *out_tokens,
             size_t out_tokens_bytes, void *out_text, size_t out_text_bytes) {
    int64_t *info = (int64_t *)out;
    size_t nt = 0, nx = 0;
    oslo_finish_reason f = OSLO_FINISH_NONE;
    oslo_status st;
    if (!oslo_bind_bytes("next: out", out_bytes, 3 * 8)) return 0;
    st = oslo_engine_next($self, request_id, timeout_ms, (int64_t *)out_tokens,
                          out_tokens ? out_tokens_bytes / 8 : 0, &nt, (char *)out_text,
                          out_text ? out_text_bytes : 0, &nx, &f);
    info[0] = (int64_t)nt;
    info[1] = (int64_t)nx;
    info[2] = (int64_t)f;
    if (st == OSLO_ERR_TIMEOUT && f != OSLO_FINISH_ERROR) return 0;
    return oslo_bind_check(st);
  }
  /* oslo_engine_request_state, as its int value. */
  int m_state(int64_t request_id) {
    oslo_request_state s = OSLO_REQUEST_UNKNOWN;
    oslo_bind_check(oslo_engine_request_state($self, request_id, &s));
    return (int)s;
  }
  /* oslo_engine_get_stats (the caller owns the result). */
  oslo_engine_stats *m_stats() {
    oslo_engine_stats *s = (oslo_engine_stats *)calloc(1, sizeof *s);
    if (!s) {
      oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "stats: %llu bytes", (unsigned long long)sizeof *s);
      return NULL;
    }
    if (!oslo_bind_check(oslo_engine_get_stats($self, s))) {
      free(s);
      return NULL;
    }
    return s;
  }
}
