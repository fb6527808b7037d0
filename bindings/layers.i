/*
 * layers.i - the tensor-parallel layers (oslo_parallel_linear,
 * oslo_parallel_embedding), the vocabulary-parallel cross-entropy of a
 * context and the parameter sets of include/oslo.h for every language.
 *
 * Included by bindings/oslo.i after tensor.i. The layers' param getters
 * return borrowed tensors; a parameter set borrows what is added to it
 * (the language layers keep those alive).
 */

/* ------------------------------------------------------------------------ */
/* Tensor-parallel layers and parameter sets                                 */
/* ------------------------------------------------------------------------ */

/* The *_params getters return borrowed tensors (not %newobject: the
   languages never destroy them); the language layers keep the layer alive
   while such a tensor is referenced (Python: oslo.ParallelLinear.weight). */
%extend oslo_parallel_linear {
  /* oslo_parallel_linear_create with the fields of its options. */
  oslo_parallel_linear(oslo_context *ctx, oslo_linear_kind kind, int64_t in_features,
                       int64_t out_features, int bias, int gather_output, int input_is_parallel,
                       oslo_dtype dtype) {
    oslo_parallel_linear_options o;
    oslo_parallel_linear *l = NULL;
    if (!oslo_bind_check(
            oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION)))
      return NULL;
    o.kind = kind;
    o.in_features = in_features;
    o.out_features = out_features;
    o.bias = bias;
    o.gather_output = gather_output;
    o.input_is_parallel = input_is_parallel;
    o.dtype = dtype;
    oslo_bind_check(oslo_parallel_linear_create(ctx, &o, &l));
    return l;
  }
  ~oslo_parallel_linear() { oslo_parallel_linear_destroy($self); }
  void m_load_full(const oslo_tensor *weight, const oslo_tensor *bias) {
    oslo_bind_check(oslo_parallel_linear_load_full($self, weight, bias));
  }
  void m_load_shard(const oslo_tensor *weight, const oslo_tensor *bias) {
    oslo_bind_check(oslo_parallel_linear_load_shard($self, weight, bias));
  }
  /* which: 0 weight, 1 bias, 2 grad_weight, 3 grad_bias (borrowed; NULL for
     the bias of a layer without one). */
  oslo_tensor *m_param(int which) {
    oslo_tensor *t[4] = {NULL, NULL, NULL, NULL};
    if (which < 0 || which > 3) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "param: %d is not 0..3", which);
      return NULL;
    }
    oslo_bind_check(oslo_parallel_linear_params($self, &t[0], &t[1], &t[2], &t[3]));
    return t[which];
  }
  void m_forward(const oslo_tensor *input, oslo_tensor *output) {
    oslo_bind_check(oslo_parallel_linear_forward($self, input, output));
  }
  void m_backward(const oslo_tensor *input, const oslo_tensor *grad_output,
                  oslo_tensor *grad_input) {
    oslo_bind_check(oslo_parallel_linear_backward($self, input, grad_output, grad_input));
  }
  void m_zero_grad() { oslo_bind_check(oslo_parallel_linear_zero_grad($self)); }
}

%extend oslo_parallel_embedding {
  oslo_parallel_embedding(oslo_context *ctx, int64_t vocab_size, int64_t hidden_size,
                          oslo_dtype dtype) {
    oslo_parallel_embedding_options o;
    oslo_parallel_embedding *e = NULL;
    if (!oslo_bind_check(oslo_parallel_embedding_options_init(
            &o, OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION)))
      return NULL;
    o.vocab_size = vocab_size;
    o.hidden_size = hidden_size;
    o.dtype = dtype;
    oslo_bind_check(oslo_parallel_embedding_create(ctx, &o, &e));
    return e;
  }
  ~oslo_parallel_embedding() { oslo_parallel_embedding_destroy($self); }
  /* which: 0 start, 1 end of this rank's real rows, 2 padded local rows. */
  int64_t m_vocab_range(int which) {
    int64_t v[3] = {0, 0, 0};
    if (which < 0 || which > 2) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "vocab_range: %d is not 0..2", which);
      return 0;
    }
    oslo_bind_check(oslo_parallel_embedding_vocab_range($self, &v[0], &v[1], &v[2]));
    return v[which];
  }
  void m_load_full(const oslo_tensor *weight) {
    oslo_bind_check(oslo_parallel_embedding_load_full($self, weight));
  }
  void m_load_shard(const oslo_tensor *weight) {
    oslo_bind_check(oslo_parallel_embedding_load_shard($self, weight));
  }
  /* which: 0 weight, 1 grad_weight (borrowed). */
  oslo_tensor *m_param(int which) {
    oslo_tensor *t[2] = {NULL, NULL};
    if (which < 0 || which > 1) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "param: %d is not 0..1", which);
      return NULL;
    }
    oslo_bind_check(oslo_parallel_embedding_params($self, &t[0], &t[1]));
    return t[which];
  }
  void m_forward(const oslo_tensor *ids, oslo_tensor *output) {
    oslo_bind_check(oslo_parallel_embedding_forward($self, ids, output));
  }
  void m_backward(const oslo_tensor *ids, const oslo_tensor *grad_output) {
    oslo_bind_check(oslo_parallel_embedding_backward($self, ids, grad_output));
  }
  void m_zero_grad() { oslo_bind_check(oslo_parallel_embedding_zero_grad($self)); }
}

%extend oslo_context {
  /* oslo_context_vocab_parallel_cross_entropy; losses and grad_logits may be
     NULL; returns the mean loss. */
  float m_vocab_parallel_cross_entropy(const oslo_tensor *logits, const oslo_tensor *labels,
                                       int64_t vocab_size, int64_t ignore_index,
                                       oslo_tensor *losses, oslo_tensor *grad_logits) {
    oslo_vocab_parallel_cross_entropy_options o;
    float mean = 0;
    if (!oslo_bind_check(oslo_vocab_parallel_cross_entropy_options_init(
            &o, OSLO_VOCAB_PARALLEL_CROSS_ENTROPY_OPTIONS_VERSION)))
      return 0;
    o.vocab_size = vocab_size;
    o.ignore_index = ignore_index;
    oslo_bind_check(oslo_context_vocab_parallel_cross_entropy($self, logits, labels, &o, losses,
                                                              grad_logits, &mean));
    return mean;
  }
}

/* A parameter set borrows what is added to it: the language layers keep
   those alive while the set lives. */
%extend oslo_param_set {
  oslo_param_set(oslo_context *ctx) {
    oslo_param_set *p = NULL;
    oslo_bind_check(oslo_param_set_create(ctx, &p));
    return p;
  }
  ~oslo_param_set() { oslo_param_set_destroy($self); }
  void m_add(const char *name, oslo_tensor *tensor, oslo_tensor *grad, int split_dim) {
    oslo_bind_check(oslo_param_set_add($self, name, tensor, grad, split_dim));
  }
  void m_add_linear(const char *prefix, oslo_parallel_linear *layer) {
    oslo_bind_check(oslo_param_set_add_linear($self, prefix, layer));
  }
  void m_add_embedding(const char *prefix, oslo_parallel_embedding *emb) {
    oslo_bind_check(oslo_param_set_add_embedding($self, prefix, emb));
  }
  size_t m_count() {
    size_t n = 0;
    oslo_bind_check(oslo_param_set_count($self, &n));
    return n;
  }
  /* Returns the global gradient norm (clips when max_norm > 0). */
  double m_clip_grad_norm(double max_norm, double norm_type) {
    double n = 0;
    oslo_bind_check(oslo_param_set_clip_grad_norm($self, max_norm, norm_type, &n));
    return n;
  }
  void m_save_checkpoint(const char *dir) {
    oslo_bind_check(oslo_param_set_save_checkpoint($self, dir));
  }
  void m_load_checkpoint(const char *dir) {
    oslo_bind_check(oslo_param_set_load_checkpoint($self, dir));
  }
}
