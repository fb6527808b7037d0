/*
 * model.i - the model of include/oslo.h (oslo_model_*) for every language:
 * its load options, info, forward, embed, generate (with
 * oslo_generate_options), train_step, backward and pipeline statistics.
 *
 * Included by bindings/oslo.i after layers.i. The buffers' sizes are
 * checked here (oslo_bind_bytes) before oslo sees them; the optimizer a
 * train step takes and the step's result are in train.i.
 */

/* ------------------------------------------------------------------------ */
/* Model                                                                     */
/* ------------------------------------------------------------------------ */

/* Options of generate with Hugging Face's defaults (oslo_generate_options_init). */
%extend oslo_generate_options {
  oslo_generate_options() {
    oslo_generate_options *o = (oslo_generate_options *)calloc(1, sizeof *o);
    if (!o) {
      oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "GenerateOptions: %llu bytes",
                     (unsigned long long)sizeof *o);
      return NULL;
    }
    if (!oslo_bind_check(oslo_generate_options_init(o, OSLO_GENERATE_OPTIONS_VERSION))) {
      free(o);
      return NULL;
    }
    return o;
  }
  ~oslo_generate_options() { free($self); }
}

%extend oslo_model_info {
  ~oslo_model_info() { free($self); }
}

%newobject oslo_model::m_info;
%newobject oslo_model::m_train_step;
%newobject oslo_model::m_backward;
%extend oslo_model {
  /* oslo_model_load; dtype -1 keeps the checkpoint's; virtual_stages and
     layers are the options' pipeline_virtual_stages and pipeline_layers,
     the latter as "A,B,..." blocks per virtual stage ("" splits evenly).
     Collective. */
  oslo_model(oslo_context *ctx, const char *path, int dtype, int virtual_stages,
             const char *layers) {
    oslo_model *m = NULL;
    oslo_model_options o;
    int32_t counts[1024];
    int32_t n = 0;
    if (!oslo_bind_check(oslo_model_options_init(&o, OSLO_MODEL_OPTIONS_VERSION))) return NULL;
    o.dtype = dtype;
    o.pipeline_virtual_stages = virtual_stages;
    if (layers && *layers) {
      const char *p = layers;
      for (;;) {
        char *end = NULL;
        long v;
        errno = 0;
        v = strtol(p, &end, 10);
        if (end == p || errno != 0 || v < INT32_MIN || v > INT32_MAX || n == 1024 ||
            (*end != ',' && *end != '\0')) {
          oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                         "pipeline_layers \"%s\": not a list of at most 1024 block counts",
                         layers);
          return NULL;
        }
        counts[n++] = (int32_t)v;
        if (*end == '\0') break;
        p = end + 1;
      }
      o.pipeline_layers = counts;
      o.pipeline_layers_count = n;
    }
    oslo_bind_check(oslo_model_load(ctx, path, &o, &m));
    return m;
  }
  ~oslo_model() { oslo_model_destroy($self); }
  oslo_model_info *m_info() {
    oslo_model_info *i = (oslo_model_info *)calloc(1, sizeof *i);
    if (!i) {
      oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "info: %llu bytes",
                     (unsigned long long)sizeof *i);
      return NULL;
    }
    if (!oslo_bind_check(oslo_model_get_info($self, i, NULL))) {
      free(i);
      return NULL;
    }
    return i;
  }
  const char *m_model_type() {
    oslo_model_info i;
    const char *t = NULL;
    oslo_bind_check(oslo_model_get_info($self, &i, &t));
    return t;
  }
  /* ids, mask (None: all 1), token_type_ids (None: all 0): int64
     [batch, seq]; out: float32 [batch, seq, vocab or hidden]. Collective. */
  void m_forward(const void *ids, size_t ids_bytes, const void *mask, size_t mask_bytes,
                 const void *token_type_ids, size_t token_type_ids_bytes, int64_t batch,
                 int64_t seq, oslo_model_output output, void *out, size_t out_bytes) {
    const unsigned long long cells = (unsigned long long)(batch > 0 ? batch : 0) *
                                     (unsigned long long)(seq > 0 ? seq : 0);
    if (!oslo_bind_bytes("forward: ids", ids_bytes, cells * 8)) return;
    if (mask && !oslo_bind_bytes("forward: mask", mask_bytes, cells * 8)) return;
    if (token_type_ids &&
        !oslo_bind_bytes("forward: token_type_ids", token_type_ids_bytes, cells * 8))
      return;
    {
      const unsigned long long w = oslo_bind_model_width($self, output);
      if (w && !oslo_bind_bytes("forward: out", out_bytes, cells * w * 4)) return;
    }
    oslo_bind_check(oslo_model_forward($self, (const int64_t *)ids, (const int64_t *)mask,
                                       (const int64_t *)token_type_ids, batch, seq, output,
                                       (float *)out, out_bytes / sizeof(float)));
  }
  /* ids, mask: int64 [batch, seq]; out: float32 [batch, hidden]. Collective. */
  void m_embed(const void *ids, size_t ids_bytes, const void *mask, size_t mask_bytes,
               int64_t batch, int64_t seq, int normalize, void *out, size_t out_bytes) {
    const unsigned long long cells = (unsigned long long)(batch > 0 ? batch : 0) *
                                     (unsigned long long)(seq > 0 ? seq : 0);
    if (!oslo_bind_bytes("embed: ids", ids_bytes, cells * 8)) return;
    if (mask && !oslo_bind_bytes("embed: mask", mask_bytes, cells * 8)) return;
    {
      const unsigned long long w = oslo_bind_model_width($self, OSLO_MODEL_OUTPUT_HIDDEN);
      if (w && !oslo_bind_bytes("embed: out", out_bytes,
                                (unsigned long long)(batch > 0 ? batch : 0) * w * 4))
        return;
    }
    oslo_bind_check(oslo_model_embed($self, (const int64_t *)ids, (const int64_t *)mask, batch,
                                     seq, normalize, (float *)out, out_bytes / sizeof(float)));
  }
  /* prompt_ids: int64, the prompts one after another; prompt_lengths: int64
     [batch]; eos_token_ids: int64 (None: the config's); out_tokens: int64
     [batch, max_new_tokens]; out_lengths: int64 [batch]; out_scores: float32
     [batch] or None. Collective. */
  void m_generate(const void *prompt_ids, size_t prompt_ids_bytes, const void *prompt_lengths,
                  size_t prompt_lengths_bytes, int64_t batch, const oslo_generate_options *options,
                  const void *eos_token_ids, size_t eos_token_ids_bytes, void *out_tokens,
                  size_t out_tokens_bytes, void *out_lengths, size_t out_lengths_bytes,
                  void *out_scores, size_t out_scores_bytes) {
    oslo_generate_options o;
    unsigned long long total = 0, b;
    const unsigned long long nb = (unsigned long long)(batch > 0 ? batch : 0);
    if (!options) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "generate: options is NULL");
      return;
    }
    o = *options;
    if (!oslo_bind_bytes("generate: prompt_lengths", prompt_lengths_bytes, nb * 8)) return;
    for (b = 0; b < nb; ++b) {
      const int64_t l = ((const int64_t *)prompt_lengths)[b];
      total += l > 0 ? (unsigned long long)l : 0;
    }
    if (!oslo_bind_bytes("generate: prompt_ids", prompt_ids_bytes, total * 8)) return;
    if (eos_token_ids_bytes % 8) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                     "generate: eos_token_ids holds %llu bytes, not a whole number of int64",
                     (unsigned long long)eos_token_ids_bytes);
      return;
    }
    if (eos_token_ids) {
      o.eos_token_ids = (const int64_t *)eos_token_ids;
      o.num_eos_token_ids = eos_token_ids_bytes / 8;
    }
    if (!oslo_bind_bytes("generate: out_tokens", out_tokens_bytes,
                         nb * (unsigned long long)(o.max_new_tokens > 0 ? o.max_new_tokens : 0) *
                             8) ||
        !oslo_bind_bytes("generate: out_lengths", out_lengths_bytes, nb * 8) ||
        (out_scores && !oslo_bind_bytes("generate: out_scores", out_scores_bytes, nb * 4)))
      return;
    oslo_bind_check(oslo_model_generate($self, (const int64_t *)prompt_ids,
                                        (const int64_t *)prompt_lengths, batch, &o,
                                        (int64_t *)out_tokens, (int64_t *)out_lengths,
                                        (float *)out_scores));
  }
  /* oslo_model_save: a parallel checkpoint in dir. Collective. */
  void m_save(const char *dir) { oslo_bind_check(oslo_model_save($self, dir)); }
  /* oslo_model_train_step: ids, labels (None: the ids, -100 under padding),
     mask (None: all 1): int64 [batch, seq]; optimizer None: only accumulate
     the gradients. Returns the result (NULL on failure). Collective. */
  oslo_train_step_result *m_train_step(oslo_optimizer *optimizer, const void *ids,
                                       size_t ids_bytes, const void *labels, size_t labels_bytes,
                                       const void *mask, size_t mask_bytes, int64_t batch,
                                       int64_t seq) {
    const unsigned long long cells = (unsigned long long)(batch > 0 ? batch : 0) *
                                     (unsigned long long)(seq > 0 ? seq : 0);
    oslo_train_step_result *r;
    if (!oslo_bind_bytes("train_step: ids", ids_bytes, cells * 8)) return NULL;
    if (labels && !oslo_bind_bytes("train_step: labels", labels_bytes, cells * 8)) return NULL;
    if (mask && !oslo_bind_bytes("train_step: mask", mask_bytes, cells * 8)) return NULL;
    r = oslo_bind_train_step_result();
    if (!r) return NULL;
    if (!oslo_bind_check(oslo_model_train_step($self, optimizer, (const int64_t *)ids,
                                               (const int64_t *)labels, (const int64_t *)mask,
                                               batch, seq, r))) {
      free(r);
      return NULL;
    }
    return r;
  }
  /* oslo_model_backward: ids, mask (None: all 1), token_type_ids (None:
     all 0): int64 [batch, seq]; grad_hidden: float32 [batch, seq, hidden],
     d loss / d hidden states; optimizer None: only accumulate. Returns the
     result (NULL on failure). Collective. */
  oslo_train_step_result *m_backward(oslo_optimizer *optimizer, const void *ids, size_t ids_bytes,
                                     const void *mask, size_t mask_bytes,
                                     const void *token_type_ids, size_t token_type_ids_bytes,
                                     int64_t batch, int64_t seq, const void *grad_hidden,
                                     size_t grad_hidden_bytes) {
    const unsigned long long cells = (unsigned long long)(batch > 0 ? batch : 0) *
                                     (unsigned long long)(seq > 0 ? seq : 0);
    oslo_train_step_result *r;
    if (!oslo_bind_bytes("backward: ids", ids_bytes, cells * 8)) return NULL;
    if (mask && !oslo_bind_bytes("backward: mask", mask_bytes, cells * 8)) return NULL;
    if (token_type_ids &&
        !oslo_bind_bytes("backward: token_type_ids", token_type_ids_bytes, cells * 8))
      return NULL;
    r = oslo_bind_train_step_result();
    if (!r) return NULL;
    if (!oslo_bind_check(oslo_model_backward($self, optimizer, (const int64_t *)ids,
                                             (const int64_t *)mask,
                                             (const int64_t *)token_type_ids, batch, seq,
                                             (const float *)grad_hidden,
                                             grad_hidden_bytes / sizeof(float), r))) {
      free(r);
      return NULL;
    }
    return r;
  }
  /* oslo_model_set_activation_checkpointing. Not collective. */
  void m_set_activation_checkpointing(int enabled) {
    oslo_bind_check(oslo_model_set_activation_checkpointing($self, enabled));
  }
  /* oslo_model_pipeline_stats; out: float64 [3], this rank's compute and
     wall seconds of the model's last train step's pipeline schedule and
     the bubble over all stages (zeros when it ran none). Not collective. */
  void m_pipeline_stats(void *out, size_t out_bytes) {
    if (!oslo_bind_bytes("pipeline_stats: out", out_bytes, 3 * 8)) return;
    double *d = (double *)out;
    oslo_bind_check(oslo_model_pipeline_stats($self, &d[0], &d[1], &d[2]));
  }
}
