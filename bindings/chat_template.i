/*
 * chat_template.i - the chat templates of include/oslo.h
 * (oslo_tokenizer_*chat_template, oslo_chat_template_*) for every language;
 * included by bindings/oslo.i before engine.i and oslo.h, after the
 * typemaps. It declares the tokenizer's handle itself, after its support
 * code: SWIG emits the %extend methods' code where the class is declared
 * (as engine.i does for the engine).
 *
 * The raw forms the language layers build on (Python: oslo/_chat.py and
 * Tokenizer in oslo/__init__.py; Java: java/oslo_java_tokenizer.i and
 * org/oslo/ChatTemplateOptions.java; Go: oslo/chat.go):
 *   Tokenizer.has_chat_template()        oslo_tokenizer_has_chat_template: 1/0
 *   Tokenizer.get_chat_template(name, out)
 *                                        oslo_tokenizer_get_chat_template
 *   Tokenizer.apply_chat_template(messages, add_generation_prompt,
 *       chat_template, variables, continue_final_message, out)
 *                                        oslo_tokenizer_apply_chat_template,
 *                                        or oslo_chat_template_apply when an
 *                                        option beyond the first is given
 *   chat_template_apply(messages, add_generation_prompt, chat_template,
 *       variables, continue_final_message, out)
 *                                        oslo_chat_template_apply without a
 *                                        tokenizer (chat_template: the
 *                                        template's source text)
 * Every string travels as UTF-8 bytes with their length (the memory-block
 * typemaps: Python bytes, Java direct ByteBuffer, Go []byte), never through
 * a language's own string conversion (Java's is modified UTF-8); the shims
 * below make the NUL-terminated copies oslo.h takes and refuse a string
 * holding a NUL byte. An absent or empty name, template or variables is
 * NULL (the default). The text is written to `out` with
 * oslo_tokenizer_decode's sizing rule: each call returns the full length in
 * bytes, so a first call with out None (capacity 0) sizes the buffer.
 * Every call records its status as the rest of oslo.i does, so each
 * language's %exception turns a failure into its native error with oslo's
 * message.
 */

%{
/* A NUL-terminated copy of the `n` bytes at `p` into *dst (NULL when p is
   NULL or n is 0, the default); on failure records the error, named after
   `what`, and returns 0. Free *dst with free(). */
static int bind_cstring(const char *what, const void *p, size_t n, char **dst) {
  const char *nul;
  *dst = NULL;
  if (!p || n == 0) return 1;
  nul = (const char *)memchr(p, 0, n);
  if (nul) {
    oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "%s holds a NUL byte (at byte %llu of %llu)", what,
                   (unsigned long long)(nul - (const char *)p), (unsigned long long)n);
    return 0;
  }
  *dst = (char *)malloc(n + 1);
  if (!*dst) {
    oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "%s: %llu bytes", what, (unsigned long long)n + 1);
    return 0;
  }
  memcpy(*dst, p, n);
  (*dst)[n] = 0;
  return 1;
}

/* oslo_tokenizer_apply_chat_template (tok not NULL, no option beyond
   add_generation_prompt) or oslo_chat_template_apply, the strings given as
   bytes; returns the full length of the text (0 on failure, recorded). */
static size_t bind_chat_template_render(const oslo_tokenizer *tok, const void *messages,
                                        size_t messages_bytes, int add_generation_prompt,
                                        const void *chat_template, size_t chat_template_bytes,
                                        const void *variables, size_t variables_bytes,
                                        int continue_final_message, void *out, size_t out_bytes) {
  char *m = NULL, *t = NULL, *v = NULL;
  size_t n = 0;
  oslo_chat_template_options o;
  if (bind_cstring("apply_chat_template: the messages", messages, messages_bytes, &m) &&
      bind_cstring("apply_chat_template: the chat template", chat_template, chat_template_bytes,
                   &t) &&
      bind_cstring("apply_chat_template: the variables", variables, variables_bytes, &v)) {
    /* No messages at all: oslo's own error for text that is no JSON array. */
    const char *mj = m ? m : "";
    if (tok && !t && !v && !continue_final_message) {
      oslo_bind_check(oslo_tokenizer_apply_chat_template(tok, mj, add_generation_prompt,
                                                         (char *)out, out_bytes, &n));
    } else if (oslo_bind_check(
                   oslo_chat_template_options_init(&o, OSLO_CHAT_TEMPLATE_OPTIONS_VERSION))) {
      o.add_generation_prompt = add_generation_prompt;
      o.chat_template = t;
      o.variables_json = v;
      o.continue_final_message = continue_final_message;
      oslo_bind_check(oslo_chat_template_apply(tok, mj, &o, (char *)out, out_bytes, &n));
    }
  }
  free(m);
  free(t);
  free(v);
  return n;
}
%}

%apply (const void *INBUF, size_t INBYTES) {
  (const void *name, size_t name_bytes),
  (const void *messages, size_t messages_bytes),
  (const void *chat_template, size_t chat_template_bytes),
  (const void *variables, size_t variables_bytes)
};

/* The tokenizer's handle, declared to SWIG only (the real type stays
   opaque); its other methods are in oslo.i. */
struct oslo_tokenizer {};

%extend oslo_tokenizer {
  /* oslo_tokenizer_has_chat_template: 1 when the tokenizer's folder came
     with a chat template, else 0. */
  int m_has_chat_template() {
    int has = 0;
    oslo_bind_check(oslo_tokenizer_has_chat_template($self, &has));
    return has;
  }
  /* oslo_tokenizer_get_chat_template: the source of the template `name`
     (UTF-8; None or empty: the one apply_chat_template uses) written to out
     (None: only sizes); returns its full length in bytes. */
  size_t m_get_chat_template(const void *name, size_t name_bytes, void *out, size_t out_bytes) {
    char *nm = NULL;
    size_t n = 0;
    if (!bind_cstring("get_chat_template: the name", name, name_bytes, &nm)) return 0;
    oslo_bind_check(oslo_tokenizer_get_chat_template($self, nm, (char *)out, out_bytes, &n));
    free(nm);
    return n;
  }
  /* The conversation `messages` (a JSON array of message objects, UTF-8)
     rendered with the tokenizer's chat template, or with chat_template (a
     template's name or source text; None: the tokenizer's), variables (a
     JSON object of more template variables; None: none) and the flags,
     written to out (None: only sizes); returns the full length in bytes. */
  size_t m_apply_chat_template(const void *messages, size_t messages_bytes,
                               int add_generation_prompt, const void *chat_template,
                               size_t chat_template_bytes, const void *variables,
                               size_t variables_bytes, int continue_final_message, void *out,
                               size_t out_bytes) {
    return bind_chat_template_render($self, messages, messages_bytes, add_generation_prompt,
                                     chat_template, chat_template_bytes, variables,
                                     variables_bytes, continue_final_message, out, out_bytes);
  }
}

%inline %{
/* oslo_chat_template_apply without a tokenizer: chat_template is the
   template's source text (required), the rest as
   Tokenizer.apply_chat_template; the special tokens are only what
   variables set. Returns the full length in bytes. */
static size_t bind_chat_template_apply(const void *messages, size_t messages_bytes,
                                       int add_generation_prompt, const void *chat_template,
                                       size_t chat_template_bytes, const void *variables,
                                       size_t variables_bytes, int continue_final_message,
                                       void *out, size_t out_bytes) {
  return bind_chat_template_render(NULL, messages, messages_bytes, add_generation_prompt,
                                   chat_template, chat_template_bytes, variables, variables_bytes,
                                   continue_final_message, out, out_bytes);
}
%}
