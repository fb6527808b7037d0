/*
 * tokenizer.i - the tokenizer of include/oslo.h (oslo_tokenizer_*) for
 * every language: load, encode, encode_batch, decode and the vocabulary.
 *
 * Included by bindings/oslo.i last. Its handle is declared in
 * chat_template.i, with the chat templates' methods; Java's names and
 * methods are in java/oslo_java_tokenizer.i.
 */

/* ------------------------------------------------------------------------ */
/* Tokenizer                                                                 */
/* ------------------------------------------------------------------------ */

%extend oslo_tokenizer {
  oslo_tokenizer(const char *path) {
    oslo_tokenizer *t = NULL;
    oslo_bind_check(oslo_tokenizer_load(path, &t));
    return t;
  }
  ~oslo_tokenizer() { oslo_tokenizer_destroy($self); }
  /* UTF-8 text -> int64 ids written to out (None: only counts); returns the
     full count (call again with a larger buffer when it exceeds it). */
  size_t m_encode(const void *text, size_t text_bytes, int add_special_tokens, void *out,
                  size_t out_bytes) {
    size_t n = 0;
    oslo_bind_check(oslo_tokenizer_encode($self, (const char *)text, text_bytes,
                                          add_special_tokens, (int64_t *)out,
                                          out_bytes / sizeof(int64_t), &n));
    return n;
  }
  /* oslo_tokenizer_encode_batch of the texts held back to back in `text`
     (UTF-8), text i being lengths[i] bytes (int64, one per text), with the
     options' fields as arguments (sides: 0 right, 1 left; max_length 0: no
     limit). Writes the ids to out and the mask to out_mask (int64 [n, L]
     each; None: only sizes; out_mask may be None) when out holds n * L
     values; returns L. */
  size_t m_encode_batch(const void *text, size_t text_bytes, const void *lengths,
                        size_t lengths_bytes, int add_special_tokens, int padding_side,
                        int64_t pad_id, int64_t max_length, int truncation, int truncation_side,
                        int pad_to_max_length, void *out, size_t out_bytes, void *out_mask,
                        size_t out_mask_bytes) {
    const int64_t *lens = (const int64_t *)lengths;
    size_t n = lengths_bytes / 8, len = 0, off = 0, i;
    const char **texts;
    size_t *sizes;
    oslo_tokenizer_encode_batch_options o;
    if (lengths_bytes % 8) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                     "encode_batch: lengths hold %llu bytes, not a whole number of int64",
                     (unsigned long long)lengths_bytes);
      return 0;
    }
    if (max_length < 0) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "encode_batch: max_length %lld is negative",
                     (long long)max_length);
      return 0;
    }
    if (out && out_mask && out_mask_bytes < out_bytes) {
      oslo_bind_fail(OSLO_ERR_SHAPE, "encode_batch: the mask holds %llu bytes, the ids %llu",
                     (unsigned long long)out_mask_bytes, (unsigned long long)out_bytes);
      return 0;
    }
    if (!oslo_bind_check(oslo_tokenizer_encode_batch_options_init(
            &o, OSLO_TOKENIZER_ENCODE_BATCH_OPTIONS_VERSION)))
      return 0;
    o.add_special_tokens = add_special_tokens;
    o.padding_side = (oslo_side)padding_side;
    o.pad_id = pad_id;
    o.max_length = (size_t)max_length;
    o.truncation = truncation;
    o.truncation_side = (oslo_side)truncation_side;
    o.pad_to_max_length = pad_to_max_length;
    texts = (const char **)calloc(n ? n : 1, sizeof *texts);
    sizes = (size_t *)calloc(n ? n : 1, sizeof *sizes);
    if (!texts || !sizes) {
      free((void *)texts);
      free(sizes);
      oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "encode_batch: %llu texts", (unsigned long long)n);
      return 0;
    }
    for (i = 0; i < n; ++i) {
      if (lens[i] < 0 || (unsigned long long)lens[i] > text_bytes - off) {
        oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                       "encode_batch: text %llu's length %lld runs past the %llu bytes of text",
                       (unsigned long long)i, (long long)lens[i], (unsigned long long)text_bytes);
        break;
      }
      texts[i] = text ? (const char *)text + off : NULL;
      sizes[i] = (size_t)lens[i];
      off += (size_t)lens[i];
    }
    if (i == n)
      oslo_bind_check(oslo_tokenizer_encode_batch($self, texts, sizes, n, &o, (int64_t *)out,
                                                  out ? (int64_t *)out_mask : NULL,
                                                  out_bytes / 8, &len));
    free((void *)texts);
    free(sizes);
    return len;
  }
  /* int64 ids -> UTF-8 bytes written to out (None: only sizes); returns the
     full length in bytes. */
  size_t m_decode(const void *ids, size_t ids_bytes, int skip_special_tokens, void *out,
                  size_t out_bytes) {
    size_t n = 0;
    if (ids_bytes % 8) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                     "decode: ids hold %llu bytes, not a whole number of int64",
                     (unsigned long long)ids_bytes);
      return 0;
    }
    oslo_bind_check(oslo_tokenizer_decode($self, (const int64_t *)ids, ids_bytes / 8,
                                          skip_special_tokens, (char *)out, out_bytes, &n));
    return n;
  }
  size_t m_vocab_size() {
    size_t n = 0;
    oslo_bind_check(oslo_tokenizer_vocab_size($self, &n));
    return n;
  }
  int64_t m_token_to_id(const void *token, size_t token_bytes) {
    int64_t id = -1;
    oslo_bind_check(oslo_tokenizer_token_to_id($self, (const char *)token, token_bytes, &id));
    return id;
  }
  size_t m_id_to_token(int64_t id, void *out, size_t out_bytes) {
    size_t n = 0;
    oslo_bind_check(oslo_tokenizer_id_to_token($self, id, (char *)out, out_bytes, &n));
    return n;
  }
  int64_t m_special_id(oslo_special_token which) {
    int64_t id = -1;
    oslo_bind_check(oslo_tokenizer_special_id($self, which, &id));
    return id;
  }
}
